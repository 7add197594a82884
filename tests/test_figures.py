"""Every figure the README states comes from a committed result file (docs/figures.yaml says
which file and which value), and each matches its file at the precision it is written with,
so the README's numbers cannot drift from what was measured."""

import csv
import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
REGISTRY = ROOT / "docs" / "figures.yaml"
NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?![\w.])")
DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.])")  # 38.13, not 2.13.0 or 1e-9
FENCE = re.compile(r"^```(\w*)")


def figures() -> list[dict]:
    return yaml.safe_load(REGISTRY.read_text(encoding="utf-8"))["figures"]


def _path(data, dotted: str):
    for part in dotted.split("."):
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


def _source(entry: dict):
    """The record the entry's keys are read from: a CSV row, a JSON or YAML document, or one
    element of a list in it chosen by ``where``."""
    path = ROOT / entry["file"]
    if path.suffix == ".csv":
        with path.open(newline="", encoding="utf-8") as f:
            records = list(csv.DictReader(f))
    else:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        if "where" not in entry:
            return data
        records = _path(data, entry["rows"])
    where = {k: str(v) for k, v in entry["where"].items()}
    found = [r for r in records if all(str(r[k]) == v for k, v in where.items())]
    assert len(found) == 1, f"{entry['file']}: {len(found)} records where {where}"
    return found[0]


def _values(entry: dict) -> list[float]:
    record, values = _source(entry), []
    for key in entry["keys"]:
        value = _path(record, key)
        parts = value if isinstance(value, list) else str(value).split(",")
        values += [float(v) for v in parts]
    return values


def _numbers(text: str) -> list[str]:
    return [n.replace(",", "") for n in NUMBER.findall(text)]


@pytest.mark.parametrize("entry", figures(), ids=lambda e: f"{e['doc']}: {e['text']}")
def test_each_figure_is_in_its_doc_and_equals_its_file(entry):
    doc = (ROOT / entry["doc"]).read_text(encoding="utf-8")
    assert entry["text"] in doc, f"{entry['doc']} no longer says {entry['text']!r}"
    shown = [n for n in _numbers(entry["text"]) if n not in map(str, entry.get("literal", []))]
    measured = _values(entry)
    assert len(shown) == len(measured), (entry["text"], measured)
    for figure, value in zip(shown, measured):
        decimals = len(figure.partition(".")[2])
        written = f"{value:.{decimals}f}"
        assert written == figure, f"{entry['text']!r}: {figure} is {value} in its file"


def _stated_text(doc: str) -> str:
    """The prose and the ``text`` blocks (a command's expected output), without shell blocks,
    inline code or links' targets: there numbers are commands, settings and versions."""
    kept, fence = [], None
    for line in doc.splitlines():
        opened = FENCE.match(line.strip())
        if opened:
            fence = None if fence is not None else opened.group(1)
            continue
        if fence is None or fence == "text":
            kept.append(line)
    text = "\n".join(kept)
    text = re.sub(r"`[^`]*`", "", text)
    return re.sub(r"\]\([^)]*\)|https?://\S+", "", text)


def test_every_decimal_figure_of_the_readme_is_registered():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    registered = [e["text"] for e in figures() if e["doc"] == "README.md"]
    for line in _stated_text(readme).splitlines():
        covered = line
        for text in registered:
            covered = covered.replace(text, "")
        unregistered = f"README.md states {line.strip()!r} with no source in docs/figures.yaml"
        assert not DECIMAL.findall(covered), unregistered


def test_the_check_reads_a_figure_at_its_written_precision(tmp_path, monkeypatch):
    """38.13 matches 38.1255 and 38.126, not 38.1351: the check can fail."""
    (tmp_path / "r.json").write_text(json.dumps({"a": {"bleu": 38.1351}}))
    (tmp_path / "doc.md").write_text("BLEU 38.13 here")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    entry = {"doc": "doc.md", "text": "BLEU 38.13", "file": "r.json", "keys": ["a.bleu"]}
    with pytest.raises(AssertionError, match="38.13 is 38.1351"):
        test_each_figure_is_in_its_doc_and_equals_its_file(entry)
