"""The server's endpoints through Starlette's TestClient (no port): answers, attention, and every
bad request a 4xx with one line, the server answering the next good one."""

from __future__ import annotations

import json
import math
import sys

import pytest
from conftest import compose_config

pytest.importorskip("starlette", reason='no serve extra: pip install -e ".[serve]"')
from starlette.testclient import TestClient  # noqa: E402

from translate.decoding.translator import load_translator  # noqa: E402
from translate.schema.commands import ServeCommand  # noqa: E402
from translate.serve import load_service  # noqa: E402
from translate.serving.app import Limits, create_app  # noqa: E402
from translate.serving.service import Service  # noqa: E402
from translate.settings import command_settings  # noqa: E402

SENTENCES = ["Ein Hund läuft.", "Zwei Männer spielen Fußball im Park.", "Die Katze schläft."]
LIMITS = Limits(max_sentences=4, max_body_bytes=2000)


@pytest.fixture(scope="module")
def ckpt(trained_run) -> str:
    return trained_run[1]["checkpoint"]


def serve_command(*overrides: str) -> ServeCommand:
    return command_settings(ServeCommand, compose_config("serve", list(overrides)))


@pytest.fixture(scope="module")
def service(ckpt) -> Service:
    return load_service(serve_command(f"checkpoint={ckpt}"))


@pytest.fixture(scope="module")
def client(service) -> TestClient:
    return TestClient(create_app(service, LIMITS))


def test_translations_are_the_translate_commands(client, ckpt):
    answer = client.post("/translate", json={"text": SENTENCES})
    assert answer.status_code == 200, answer.text
    expected = load_translator(ckpt).translator.translate(SENTENCES)
    assert [t["translation"] for t in answer.json()["translations"]] == expected
    assert answer.json()["warnings"] == []


def test_alignments_are_the_best_heads_pharaoh_lines(client):
    answer = client.post("/translate", json={"text": SENTENCES[:2], "alignments": True}).json()
    for sentence, got in zip(SENTENCES, answer["translations"]):
        seen = client.post("/attention", json={"text": sentence}).json()
        best = seen["best_head"]
        assert got["translation"] == seen["translation"]
        assert got["alignment_head"] == best
        assert got["alignment"] == seen["alignments"][best["layer"]][best["head"]]
        links = [tuple(map(int, link.split("-"))) for link in got["alignment"].split()]
        # One link per target word, to a source word that exists.
        assert sorted(j for _, j in links) == list(range(len(got["translation"].split())))
        assert all(0 <= i < len(sentence.split()) for i, _ in links)


@pytest.fixture(scope="module")
def beam_client(ckpt) -> TestClient:
    service = load_service(serve_command(f"checkpoint={ckpt}", "decode.beam_size=3"))
    return TestClient(create_app(service, LIMITS))


def test_nbest_lists_are_best_first_and_start_with_the_translation(beam_client):
    plain = beam_client.post("/translate", json={"text": SENTENCES}).json()["translations"]
    answer = beam_client.post("/translate", json={"text": SENTENCES, "nbest": 3})
    assert answer.status_code == 200, answer.text
    for alone, got in zip(plain, answer.json()["translations"]):
        scores = [h["score"] for h in got["nbest"]]
        assert 1 <= len(scores) <= 3 and scores == sorted(scores, reverse=True)
        assert all(s <= 0 for s in scores)  # normalised sums of log-probabilities
        assert got["translation"] == got["nbest"][0]["translation"] == alone["translation"]


def test_nbest_beyond_the_beam_is_refused_in_one_line(client, beam_client):
    check_refused(client.post("/translate", json={"text": ["a"], "nbest": 2}), 400, "beam_size=1")
    one = client.post("/translate", json={"text": ["Hund"], "nbest": 1}).json()["translations"]
    assert one[0]["nbest"][0]["translation"] == one[0]["translation"]
    for bad in (0, "2", True, 1.5):
        check_refused(beam_client.post("/translate", json={"text": ["a"], "nbest": bad}), 400, "")
    assert_still_serving(beam_client)


def entropy(rows: list[list[float]]) -> float:
    """Mean entropy (nats) of the rows of one head."""
    return sum(-sum(p * math.log(p) for p in row if p > 0) for row in rows) / len(rows)


def test_attention_has_every_head_as_rows_of_weights(client, service):
    answer = client.post("/attention", json={"text": SENTENCES[1]})
    assert answer.status_code == 200, answer.text
    seen = answer.json()
    model = service.translator.model
    src, tgt, out = seen["source_tokens"], seen["target_tokens"], seen["output_tokens"]
    assert src[-1] == "</s>" and tgt[0] == "<s>" and out == [*tgt[1:], "</s>"]
    assert "".join(tgt[1:]).replace("\u2581", " ").strip() == seen["translation"]
    shapes = {"encoder": (src, src), "decoder_self": (tgt, tgt), "decoder_cross": (out, src)}
    for kind, (queries, keys) in shapes.items():
        layers = seen["attention"][kind]
        assert len(layers) == model.num_layers[kind]
        for n, heads in enumerate(layers):
            assert len(heads) == model.num_heads
            for h, rows in enumerate(heads):
                assert len(rows) == len(queries) and {len(r) for r in rows} == {len(keys)}
                assert all(abs(sum(r) - 1) < 1e-3 for r in rows)
                if kind == "decoder_self":  # causal: no query sees a later token
                    assert all(w == 0 for t, r in enumerate(rows) for w in r[t + 1 :])
                assert seen["entropy"][kind][n][h] == pytest.approx(entropy(rows), abs=2e-3)
    cross_entropy = seen["entropy"]["decoder_cross"]
    best = seen["best_head"]
    assert cross_entropy[best["layer"]][best["head"]] == min(map(min, cross_entropy))
    assert len(seen["alignments"]) == model.num_layers["decoder_cross"]


def test_the_page_and_its_files_are_served(client):
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    for asset in ("/static/app.js", "/static/style.css"):
        assert asset in page.text
        assert client.get(asset).status_code == 200
    assert "//cdn" not in page.text and "https://" not in client.get("/static/app.js").text


LONG = " ".join(["Hund"] * 400)
BAD = {
    "empty list": ("/translate", {"text": []}, 400, "empty list"),
    "blank sentence": ("/translate", {"text": ["ok", "  "]}, 400, '"text"[1] is empty'),
    "not a string": ("/translate", {"text": ["ok", 3]}, 400, '"text"[1] must be a string'),
    "text a string": ("/translate", {"text": "Hund"}, 400, "must be a list"),
    "no text": ("/translate", {}, 400, "must be a list"),
    "unknown key": ("/translate", {"text": ["a"], "beam": 3}, 400, "unknown key 'beam'"),
    "alignments not bool": ("/translate", {"text": ["a"], "alignments": 1}, 400, "true or false"),
    "too many sentences": ("/translate", {"text": ["Hund"] * 5}, 413, "at most 4"),
    "attention blank": ("/attention", {"text": ""}, 400, "is empty"),
    "attention list": ("/attention", {"text": ["a"]}, 400, "one sentence"),
    "not an object": ("/translate", ["a"], 400, "JSON object"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_request_is_one_line_and_the_server_goes_on(client, case):
    path, body, status, fragment = BAD[case]
    check_refused(client.post(path, json=body), status, fragment)
    assert_still_serving(client)


RAW = {
    "invalid JSON": (b'{"text": [', 400, "not valid JSON"),
    "invalid UTF-8": ('{"text": ["K\u00e4se"]}'.encode("latin-1"), 400, "not UTF-8"),
    "body too big": (json.dumps({"text": ["Hund " * 500]}).encode(), 413, "over 2000 bytes"),
}


@pytest.mark.parametrize("case", list(RAW))
def test_a_bad_body_is_one_line_and_the_server_goes_on(client, case):
    raw, status, fragment = RAW[case]
    check_refused(client.post("/translate", content=raw), status, fragment)
    assert_still_serving(client)


def test_a_body_too_big_is_refused_without_a_length_header_too(client):
    def chunks():  # streamed: no Content-Length, counted as it arrives
        yield b'{"text": ["'
        for _ in range(100):
            yield b"Hund " * 10
        yield b'"]}'

    check_refused(client.post("/translate", content=chunks()), 413, "over 2000 bytes")
    assert_still_serving(client)


def test_a_sentence_over_the_cap_is_truncated_with_a_warning(client, service):
    cap = service.translator.max_src_len
    answer = client.post("/translate", json={"text": ["Hund", LONG[:1500]]})
    assert answer.status_code == 200, answer.text
    (warning,) = answer.json()["warnings"]
    assert warning.startswith("sentence 2 has ") and f"truncated to the first {cap - 1}" in warning
    attention = client.post("/attention", json={"text": LONG[:1500]}).json()
    assert len(attention["source_tokens"]) == cap  # the cut pieces and the EOS
    assert attention["warnings"] and "truncated" in attention["warnings"][0]


def test_without_our_model_attention_is_refused_in_one_line(service):
    client = TestClient(create_app(Service(service.loaded, None, None), LIMITS))
    check_refused(client.post("/attention", json={"text": "Hund"}), 501, "checkpoint=")
    check_refused(client.post("/translate", json={"text": ["a"], "alignments": True}), 501, "")
    assert_still_serving(client)


def check_refused(answer, status: int, fragment: str) -> None:
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert isinstance(error, str) and "\n" not in error and fragment in error


def assert_still_serving(client) -> None:
    answer = client.post("/translate", json={"text": ["Der Hund schläft."]})
    assert answer.status_code == 200 and answer.json()["translations"][0]["translation"]


@pytest.fixture(scope="module")
def exported(ckpt, tmp_path_factory) -> str:
    pytest.importorskip("ctranslate2", reason='no ct2 extra: pip install -e ".[ct2]"')
    from translate.decoding.ct2_export import export_checkpoint

    folder = tmp_path_factory.mktemp("export") / "model"
    export_checkpoint(ckpt, folder, "float32", None)
    return str(folder)


def test_an_export_translates_and_takes_its_heads_from_the_checkpoint(
    exported, ckpt, client, capsys
):
    alone = load_service(serve_command("engine=ctranslate2", f"model_dir={exported}"))
    assert "attention: none; CTranslate2 gives no per-head" in capsys.readouterr().err
    beside = load_service(
        serve_command("engine=ctranslate2", f"model_dir={exported}", f"checkpoint={ckpt}")
    )
    assert f"attention: the heads of {ckpt}" in capsys.readouterr().err
    ours = client.post("/translate", json={"text": SENTENCES}).json()
    for service in (alone, beside):
        exported_client = TestClient(create_app(service, LIMITS))
        answer = exported_client.post("/translate", json={"text": SENTENCES})
        assert answer.json()["translations"] == ours["translations"]  # the same greedy argmax
    alone_client = TestClient(create_app(alone, LIMITS))
    check_refused(
        alone_client.post("/attention", json={"text": "Hund"}),
        501,
        "CTranslate2 gives no per-head attention weights",
    )
    check_refused(alone_client.post("/translate", json={"text": ["a"], "nbest": 1}), 501, "torch")
    seen = TestClient(create_app(beside, LIMITS)).post("/attention", json={"text": SENTENCES[0]})
    assert seen.status_code == 200
    assert seen.json() == client.post("/attention", json={"text": SENTENCES[0]}).json()


def test_without_the_serve_extra_the_command_says_what_to_install(monkeypatch):
    from translate.errors import UserError
    from translate.serve import import_web

    monkeypatch.setitem(sys.modules, "uvicorn", None)  # import uvicorn raises ImportError
    with pytest.raises(
        UserError, match=r'needs uvicorn, which is not installed: pip install -e "\.\[serve\]"'
    ):
        import_web()
