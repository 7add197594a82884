"""Every figure the README states comes from a committed result file (docs/figures.yaml says
which file and which value), and each matches its file at the precision it is written with,
so the README's numbers cannot drift from what was measured. On the results pages (PAGES) each
section's figures match the result files the section links, or docs/figures.yaml says how they
were derived or that no file holds them."""

import ast
import contextlib
import csv
import json
import math
import operator
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


# ---------------------------------------------------------------------------------------------
# The results pages. Each section's decimal figures (prose, tables and `text` blocks, by
# _stated_text's rules) equal a value of the result files the section links at the precision
# they are written with, or docs/figures.yaml accounts for them: `derived` (computed from such
# values, and how), `literal` (a setting, a version: not a measurement) or `unsourced` (no result
# file holds it: a text, or a section and the count of its figures, which may shrink, not grow).

PAGES = [
    "docs/benchmarks.md",
    "docs/ablation-multi30k.md",
    "docs/measurements.md",
    "docs/deploy.md",
    "docs/serve.md",
    "docs/data.md",
    "docs/scale.md",
    "docs/training.md",
    "docs/alignment.md",
    "docs/attention.md",
    "docs/gpu.md",
    "docs/reliability.md",
    "docs/extending.md",
    "docs/scale_out.md",
    "docs/ablation.md",
]
# 38.13, 1,589.5, 2.33x; not 2.13.0, 0.2.x, v2.6 or 1e-9
FIGURE = re.compile(r"(?<![\w.,])(?:\d{1,3}(?:,\d{3})+|\d+)\.\d+(?![^\Wx]|x\w|\.\w)")
HEADING = re.compile(r"^#{1,6} (.*)")
LINKED = re.compile(
    r"\]\(([^()\s#]+\.(?:json|csv|yaml))(?:#[^)]*)?\)"  # [text](file.json), beside the page
    r"|(?<![\w./-])((?:docs|conf)/[\w./-]+\.(?:json|csv|yaml))"  # docs/x.json, from the root
)
TARGET = re.compile(r"(?:[≥≤]|[<>]=)\s?$")
# The unit written after a figure (or after a range or pair it closes: "282.7 → 313.9 MiB")
# picks the scales of a file's value it may be: a share as a percentage only, milliseconds or
# seconds as ms, minutes or seconds as minutes, bytes or KiB as KiB, bytes as MiB. No unit: the
# value itself.
UNIT = re.compile(
    r"(?:\s?(?:→|–|-|/|to|and)\s?[\d.,]+)?\s?(%|ms\b|min\b|minutes?\b|KiB\b|MiB\b|GB\b)"
)
SCALES = {"%": (100,), "ms": (1, 1000), "min": (1, 1 / 60), "minute": (1, 1 / 60)}
SCALES |= {"minutes": SCALES["min"], "KiB": (1, 1 / 1024), "MiB": (1, 1 / 1024**2)}
SCALES |= {"GB": (1, 1 / 1000)}  # a peak RSS in MB, written in GB


def declared() -> dict[str, list[dict]]:
    registry = yaml.safe_load(REGISTRY.read_text(encoding="utf-8"))
    return {key: registry.get(key) or [] for key in ("derived", "literal", "unsourced")}


def _sections(page: str) -> list[tuple[str, str]]:
    """(heading, text) of the part before the first heading and of each heading's part; a `#`
    line inside a code block is a comment, not a heading."""
    sections, heading, lines, fence = [], "", [], False
    for line in (ROOT / page).read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.strip()):
            fence = not fence
        found = None if fence else HEADING.match(line)
        if found:
            sections.append((heading, "\n".join(lines)))
            heading, lines = found.group(1).strip(), []
        lines.append(line)
    sections.append((heading, "\n".join(lines)))
    return [(heading, text) for heading, text in sections if text.strip()]


def _linked_files(page: str, text: str) -> list[Path]:
    """The committed result files a section links (docs/*.json, docs/*.csv, conf/*.yaml): by a
    Markdown link, or by its path from the root, as a command's `--json docs/...` names it."""
    files = []
    for link in LINKED.finditer(text):
        beside, rooted = link.groups()
        path = (((ROOT / page).parent / beside) if beside else ROOT / rooted).resolve()
        name = path.relative_to(ROOT).as_posix()
        assert path.exists(), f"{page} links {name}, which is not in the repository"
        if name != "docs/figures.yaml" and path not in files:
            files.append(path)
    return files


def _all_values(data, out: set[float]) -> set[float]:
    """Every number in a parsed file (signs dropped), numeric strings and lists included."""
    if isinstance(data, dict):
        data = list(data.values())
    if isinstance(data, list):
        for item in data:
            _all_values(item, out)
    elif isinstance(data, (int, float)) and not isinstance(data, bool):
        out.add(abs(float(data)))
    elif isinstance(data, str):
        for part in re.split(r"[\s,;]+", data.strip()):
            with contextlib.suppress(ValueError):  # a CSV cell, "1 2 3 4 5"
                out.add(abs(float(part)))
    return out


_VALUES: dict[Path, set[float]] = {}


def _load(path: Path):
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".csv":
        return list(csv.DictReader(text.splitlines()))
    return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)


def _file_values(path: Path) -> set[float]:
    if path not in _VALUES:
        _VALUES[path] = _all_values(_load(path), set())
    return _VALUES[path]


def _spread(text: str) -> re.Pattern:
    """`text` as a pattern that any run of whitespace (a line break in a paragraph) matches."""
    return re.compile(r"\s+".join(map(re.escape, text.split())))


def _figure(figure: str) -> re.Pattern:
    return re.compile(rf"(?<![\w.,]){re.escape(figure)}(?![^\Wx]|x\w|\.\w)")


def _mask(page: str, text: str, entries: list[dict]) -> str:
    """`text` with the figures the entries account for blanked: an entry's `figures` where its
    `text` occurs (every figure of that text when it lists none). Entries may overlap."""
    blank = set()
    for entry in entries:
        if entry.get("doc", page) != page or "text" not in entry:
            continue
        for shown in _spread(entry["text"]).finditer(text):
            figures = [str(f) for f in entry.get("figures", [])] or FIGURE.findall(shown.group())
            for figure in figures:
                for found in _figure(figure).finditer(text, shown.start(), shown.end()):
                    blank.update(range(found.start(), found.end()))
    return "".join("#" if i in blank else c for i, c in enumerate(text))


def _matches(figure: str, unit: str, values: set[float]) -> bool:
    decimals, shown = len(figure.partition(".")[2]), figure.replace(",", "")
    scales = SCALES[unit] if unit else (1,)
    return any(f"{value * scale:.{decimals}f}" == shown for value in values for scale in scales)


def _unmatched(page: str, text: str, registry: dict) -> tuple[list[str], list[str]]:
    """(every figure the section states, those no linked file holds and no entry accounts for)."""
    values = set().union(*map(_file_values, _linked_files(page, text)))
    entries = registry["literal"] + registry["derived"] + registry["unsourced"]
    stated = _stated_text(_mask(page, text, entries))
    figures = list(_figures(stated))
    return [f for f, _ in figures], [f for f, unit in figures if not _matches(f, unit, values)]


def _figures(stated: str):
    """(figure, the unit after it) of each figure of `stated`, but a target's ("≥ 40.0")."""
    for found in FIGURE.finditer(stated):
        if not TARGET.search(stated[max(0, found.start() - 3) : found.start()]):
            unit = UNIT.match(stated, found.end())
            yield found.group(), unit.group(1) if unit else ""


def _unsourced_count(page: str, heading: str, registry: dict) -> int:
    counts = [e for e in registry["unsourced"] if e.get("doc") == page and "count" in e]
    return sum(e["count"] for e in counts if heading.startswith(e["section"]))


@pytest.mark.parametrize("page", PAGES)
def test_each_figure_of_a_results_page_equals_its_sections_files(page):
    registry, wrong = declared(), []
    for heading, text in _sections(page):
        _, misses = _unmatched(page, text, registry)
        allowed = _unsourced_count(page, heading, registry)
        if len(misses) != allowed:
            wrong.append(
                f"{heading!r}: {len(misses)} figures from no linked file "
                f"(docs/figures.yaml allows {allowed}): {misses}"
            )
    assert not wrong, f"{page}:\n" + "\n".join(wrong)


def test_every_declared_text_and_section_is_on_its_page():
    for kind, entries in declared().items():
        for entry in entries:
            pages = [entry["doc"]] if "doc" in entry else PAGES
            if "text" in entry:
                texts = [(ROOT / p).read_text(encoding="utf-8") for p in pages]
                assert any(_spread(entry["text"]).search(t) for t in texts), (kind, entry)
            else:
                found = [t for h, t in _sections(entry["doc"]) if h.startswith(entry["section"])]
                assert len(found) == 1, (kind, entry, "names no single section")
                # An unsourced section says so beside its figures, not only here.
                said = kind != "unsourced" or "no result file" in found[0].lower()
                assert said, f"{entry['doc']}, {entry['section']!r} does not say 'no result file'"


def _lookup(data, dotted: str):
    """`dotted` read into `data`; a key may hold dots itself (`summary.bleu_min6.5`)."""
    while dotted:
        if isinstance(data, list):
            index, _, dotted = dotted.partition(".")
            data = data[int(index)]
            continue
        key = max((k for k in data if dotted == k or dotted.startswith(f"{k}.")), key=len)
        data, dotted = data[key], dotted[len(key) + 1 :]
    return data


def _arithmetic(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _arithmetic(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_arithmetic(node.operand)
    operators = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}
    operators[ast.Div] = operator.truediv
    if isinstance(node, ast.BinOp) and type(node.op) in operators:
        return operators[type(node.op)](_arithmetic(node.left), _arithmetic(node.right))
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "log" and not node.keywords:
        return math.log(*map(_arithmetic, node.args))  # a growth exponent: log(b / a) / log(2)
    raise ValueError(f"not arithmetic: {ast.dump(node)}")


def _evaluate(expression: str, default_file: str | None) -> float:
    """`{path}` (in `file`) or `{docs/x.json:path}` replaced by the value, then + - * / only."""

    def value(found: re.Match) -> str:
        file, _, dotted = found.group(1).rpartition(":")
        return repr(float(_lookup(_load(ROOT / (file or default_file)), dotted)))

    return _arithmetic(ast.parse(re.sub(r"\{([^{}]+)\}", value, expression), mode="eval"))


def _computed() -> list[dict]:
    return [e for e in declared()["derived"] if "equals" in e]


@pytest.mark.parametrize("entry", _computed(), ids=lambda e: f"{e['doc']}: {e['text']}")
def test_each_computed_figure_equals_its_computation(entry):
    """A `derived` entry with `equals` is checked: each expression, over the values of its
    files, gives the figure (its `figures`, else the text's, in order) as written."""
    figures = [str(f) for f in entry.get("figures") or FIGURE.findall(entry["text"])]
    assert len(figures) == len(entry["equals"]), entry
    for figure, expression in zip(figures, entry["equals"]):
        value = abs(_evaluate(expression, entry.get("file")))
        decimals = len(figure.partition(".")[2])
        assert f"{value:.{decimals}f}" == figure.replace(",", ""), (entry["text"], value)


def _page(tmp_path, monkeypatch, page: str, registry: str = "figures: []\n") -> None:
    """A results page `doc.md` beside a result file `r.json`, as the only page checked."""
    (tmp_path / "docs").mkdir()
    result = {"rows": [{"ms": 17.56, "seconds": 0.0721}], "share": 0.375, "bleu": 38.1351}
    (tmp_path / "docs" / "r.json").write_text(json.dumps(result))
    (tmp_path / "docs" / "doc.md").write_text(page)
    (tmp_path / "docs" / "figures.yaml").write_text(registry)
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    monkeypatch.setitem(globals(), "REGISTRY", tmp_path / "docs" / "figures.yaml")


CHECKED = "## Decoding\n\nFrom [r.json](r.json): {} ms a sentence, 72.1 ms in all, 37.5% of it.\n"


def test_a_section_check_reads_each_figure_at_its_written_precision(tmp_path, monkeypatch):
    _page(tmp_path, monkeypatch, CHECKED.format("17.6"))
    test_each_figure_of_a_results_page_equals_its_sections_files("docs/doc.md")


@pytest.mark.parametrize("changed", ["17.5", "17.7", "17.57", "1.76", "175.6"])
def test_a_changed_figure_fails_the_section_check(tmp_path, monkeypatch, changed):
    _page(tmp_path, monkeypatch, CHECKED.format(changed))
    with pytest.raises(AssertionError, match=rf"'Decoding': 1 figures .*\['{changed}'\]"):
        test_each_figure_of_a_results_page_equals_its_sections_files("docs/doc.md")


def test_a_unit_allows_its_own_scale_only(tmp_path, monkeypatch):
    """37.5% is a share of 0.375, 72.1 ms are 0.0721 s; without their units they are not."""
    page = "## A\n\n[r.json](r.json): 37.5% and 72.1 ms; 37.5 and 72.1, 0.375 and 0.0721.\n"
    _page(tmp_path, monkeypatch, page)
    with pytest.raises(AssertionError, match=r"2 figures .*\['37\.5', '72\.1'\]"):
        test_each_figure_of_a_results_page_equals_its_sections_files("docs/doc.md")


def test_a_section_without_a_file_is_listed_and_cannot_grow(tmp_path, monkeypatch):
    page = "## Old\n\nMeasured by hand: 1.25 and 3.5 ms.\n\n## Targets\n\nAt most ≥ 1.2×.\n"
    _page(tmp_path, monkeypatch, page)
    with pytest.raises(AssertionError, match=r"'Old': 2 figures from no linked file .*allows 0"):
        test_each_figure_of_a_results_page_equals_its_sections_files("docs/doc.md")
    unsourced = "unsourced:\n  - {doc: docs/doc.md, section: Old, count: 2, reason: by hand}\n"
    (tmp_path / "docs" / "figures.yaml").write_text(unsourced)
    test_each_figure_of_a_results_page_equals_its_sections_files("docs/doc.md")
    (tmp_path / "docs" / "doc.md").write_text(page.replace("3.5 ms", "3.5 ms, 4.5 ms"))
    with pytest.raises(AssertionError, match=r"'Old': 3 figures .*allows 2"):
        test_each_figure_of_a_results_page_equals_its_sections_files("docs/doc.md")


def test_declared_figures_are_blanked_where_their_text_is_only(tmp_path, monkeypatch):
    page = "## A\n\n[r.json](r.json): 12.34 by hand,\nand 17.6 ms; later 12.34 again.\n"
    by_hand = "unsourced:\n  - {doc: docs/doc.md, text: '12.34 by hand, and', reason: ad hoc}\n"
    _page(tmp_path, monkeypatch, page, by_hand)
    with pytest.raises(AssertionError, match=r"1 figures .*\['12\.34'\]"):
        test_each_figure_of_a_results_page_equals_its_sections_files("docs/doc.md")


def test_a_computed_figure_is_checked(tmp_path, monkeypatch):
    _page(tmp_path, monkeypatch, "## A\n\nratio 2.43\n")
    entry = {"doc": "docs/doc.md", "text": "ratio 2.43", "file": "docs/r.json"}
    test_each_computed_figure_equals_its_computation(entry | {"equals": ["{rows.0.ms}/7.23"]})
    with pytest.raises(AssertionError, match="2.405"):
        test_each_computed_figure_equals_its_computation(entry | {"equals": ["{rows.0.ms}/7.3"]})
