"""A small corpus in the IWSLT 2017 release layout, the folder ``data=iwslt2017 data.path=DIR``
reads, made from the built-in sample corpus, so tests of the recipe on a few thousand pairs need
no ``../shared/data``. File names come from the reader (translate/data/iwslt.py), so the two
cannot drift apart."""

from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import escape

from translate.data.iwslt import TEST_SETS, train_file, xml_file
from translate.data.sources import read_lines, sample_dir

PAIR = "de-en"


def write_release(out: Path, pairs: int, test_pairs: int = 60) -> Path:
    """``out/de-en/`` with ``pairs`` training lines, the sample validation split as dev2010 and
    ``test_pairs`` lines cut into tst2010..tst2015; ``out``. A training or test line joins two
    consecutive sample pairs (cycling), so lines are about twice a sample sentence long."""
    folder = out / PAIR
    folder.mkdir(parents=True)
    for lang in PAIR.split("-"):
        text = {split: read_lines(sample_dir() / f"{split}.{lang}") for split in ("train", "test")}
        train = _joined(text["train"], pairs)
        (folder / train_file(PAIR, lang)).write_text("".join(s + "\n" for s in train), "utf-8")
        dev = read_lines(sample_dir() / f"validation.{lang}")
        (folder / xml_file("dev2010", PAIR, lang)).write_text(_xml(dev), "utf-8")
        test = _joined(text["test"], test_pairs)
        bounds = [round(i * test_pairs / len(TEST_SETS)) for i in range(len(TEST_SETS) + 1)]
        for name, a, b in zip(TEST_SETS, bounds, bounds[1:]):
            (folder / xml_file(name, PAIR, lang)).write_text(_xml(test[a:b]), "utf-8")
    return out


def _joined(sentences: list[str], lines: int) -> list[str]:
    n = len(sentences)
    return [f"{sentences[(2 * i) % n]} {sentences[(2 * i + 1) % n]}" for i in range(lines)]


def _xml(sentences: list[str]) -> str:
    """The ``<seg>`` lines the reader keeps, in the release's frame."""
    segs = [f'<seg id="{i}"> {escape(s)} </seg>' for i, s in enumerate(sentences, 1)]
    return "\n".join(["<mteval>", "<doc>", *segs, "</doc>", "</mteval>", ""])
