"""docs/extending.md shows the recipes' tested code: each code block follows a mark
``<!-- recipe: PATH -->`` (the whole file) or ``<!-- recipe: PATH::NAME -->`` (the lines
between ``# recipe: start NAME`` and ``# recipe: end NAME`` in PATH, dedented) and must equal
it, so a recipe that stops working fails its test and a guide that drifts from it fails here."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from conftest import ROOT

GUIDE = ROOT / "docs" / "extending.md"
RECIPES = Path(__file__).parent
MARK = r"<!-- recipe: (?P<path>[^\s:]+)(?:::(?P<name>\w+))? -->"
MARKED = re.compile(MARK + r"\n```\w+\n(?P<code>.*?)^```$", re.S | re.M)  # the mark, then a block
FENCE = re.compile(r"^```\w+$", re.M)  # a block's opening line
START = re.compile(r"^\s*# recipe: start (\w+)$", re.M)


def marked_blocks() -> list:
    """``(path, region name or None, code)`` of each marked block of the guide, as test cases."""
    return [
        pytest.param(*m.groups(), id=f"{m['path']}::{m['name']}")
        for m in MARKED.finditer(GUIDE.read_text())
    ]


def region(path: Path, name: str | None) -> str:
    text = path.read_text()
    if name is None:
        return text
    between = rf"^[ \t]*# recipe: start {name}\n(.*?)^[ \t]*# recipe: end {name}\n"
    found = re.search(between, text, re.S | re.M)
    assert found, f"{path} has no region {name}"
    return textwrap.dedent(found.group(1))


def test_every_code_block_of_the_guide_is_marked_with_its_recipe():
    assert len(FENCE.findall(GUIDE.read_text())) == len(marked_blocks()) >= 6


@pytest.mark.parametrize(("path", "name", "code"), marked_blocks())
def test_the_block_is_the_tested_code(path, name, code):
    assert code == region(ROOT / path, name)


def test_every_recipe_region_is_in_the_guide():
    shown = {(ROOT / case.values[0], case.values[1]) for case in marked_blocks()}
    for path in RECIPES.glob("test_recipe_*.py"):
        for name in START.findall(path.read_text()):
            assert (path, name) in shown, f"{path.name}::{name} is in no block of the guide"
