"""Parallel text written as a local IWSLT 2017 release folder, the layout
:class:`~translate.data.iwslt.IwsltRelease` reads (``data=iwslt2017 data.path=<folder>``): for
stand-in corpora of the release's size (``translate/bench/scale_corpus.py``) and for tests. The file
names and the split of ``test`` into :data:`~translate.data.iwslt.TEST_SETS` are the reader's
own, so the two cannot drift apart."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from xml.sax.saxutils import escape

from translate import io
from translate.data.iwslt import TEST_SETS, train_file, xml_file


def write_release(
    folder: Path,
    splits: Mapping[str, Mapping[str, Sequence[str]]],
    pair: str = "de-en",
    talk_lines: int = 0,
) -> Path:
    """Write ``{"train" | "validation" | "test": {lang: sentences}}`` as the release's
    ``folder/pair/`` files, which :class:`IwsltRelease` reads back as written: ``train`` as
    ``train.tags.*`` (a ``<talkid>`` markup line, which the reader skips, before every
    ``talk_lines`` lines when > 0, as the release heads each talk), ``validation`` as dev2010,
    ``test`` cut into :data:`TEST_SETS` in order (the reader joins them again). Returns the
    folder written. For stand-in corpora (translate/bench/scale_corpus.py) and tests."""
    out = Path(folder) / pair
    first = pair.split("-")[0]
    for name, columns in splits.items():
        for lang, lines in columns.items():
            bad = next((s for s in lines if "\n" in s or "\r" in s), None)
            if bad is not None:
                raise ValueError(f"{name}.{lang}: a sentence spans lines: {bad[:60]!r}")
        if name == "train":
            if any(s.startswith("<") for s in columns[first]):
                raise ValueError(f"train.{first}: a sentence starts with '<' (read as markup)")
            for lang, lines in columns.items():
                io.write(out / train_file(pair, lang), _train_text(lines, talk_lines), "corpus")
        elif name in ("validation", "test"):
            sets = ["dev2010"] if name == "validation" else list(TEST_SETS)
            for set_name, part in zip(sets, _cut(columns, len(sets))):
                for lang, lines in part.items():
                    text = _xml_text(set_name, lines, pair, lang)
                    io.write(out / xml_file(set_name, pair, lang), text, "corpus")
        else:
            raise ValueError(f"unknown split {name!r}: use train, validation or test")
    return out


def _train_text(lines: Sequence[str], talk_lines: int) -> str:
    out = []
    for i, line in enumerate(lines):
        if talk_lines and i % talk_lines == 0:
            out.append(f"<talkid>{i // talk_lines + 1}</talkid>")
        out.append(line)
    return "".join(line + "\n" for line in out)


def _cut(columns: Mapping[str, Sequence[str]], parts: int) -> list[dict[str, Sequence[str]]]:
    """``columns`` cut into ``parts`` consecutive, nearly equal pieces."""
    n = len(next(iter(columns.values())))
    bounds = [round(i * n / parts) for i in range(parts + 1)]
    return [
        {lang: lines[a:b] for lang, lines in columns.items()} for a, b in zip(bounds, bounds[1:])
    ]


def _xml_text(name: str, lines: Sequence[str], pair: str, lang: str) -> str:
    src, tgt = pair.split("-")
    tag = "srcset" if lang == src else "refset"
    head = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        "<mteval>",
        f'<{tag} setid="iwslt2017-{name}" srclang="{src}" trglang="{tgt}">',
        '<doc docid="1" genre="lectures">',
    ]
    segs = [f'<seg id="{i}"> {escape(s)} </seg>' for i, s in enumerate(lines, 1)]
    return "\n".join([*head, *segs, "</doc>", f"</{tag}>", "</mteval>", ""])
