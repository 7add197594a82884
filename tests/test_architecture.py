"""The package's layout rules, checked on its source: layers and import cycles.

- ``translate/nn/`` imports nothing from the rest of the package (torch only).
- Only ``settings.py`` and the entry-point layer import omegaconf or hydra.
- Lower layers never import higher ones, so the module graph has no cycle.
- A command imports torch only once it runs: its ``--help`` and a refused setting never need it.

A function's size is ruff's business (C901, PLR0912, PLR0915 in pyproject.toml), judged by its
branches, paths and statements rather than by lines.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "translate"
# Modules that may read Hydra/OmegaConf: the one settings reader and the command-line layer.
ENTRY_LAYER = {
    "translate.settings",
    "translate.cli",
    "translate.record",
    "translate.sweeps",
    # The sweep report reads the jobs a sweep defines from Hydra's multirun.yaml.
    "translate.ablation.report",
    "translate.train",
    "translate.evaluate",
    "translate.translate",
    "translate.analyze",
    "translate.average",
    "translate.export",
    "translate.serve",
    "translate.data.__main__",
    # The benchmark that reads conf/ as the commands do (a preset, the optimizer's YAML).
    "translate.bench.train",
}
# The commands whose settings are read before anything computes (the benchmarks parse their
# own arguments and import torch at once).
COMMANDS = [
    "translate.train",
    "translate.translate",
    "translate.evaluate",
    "translate.average",
    "translate.export",
    "translate.serve",
    "translate.analyze",
    "translate.data.__main__",
    "translate.ablation.__main__",
]
# Each package may import only the packages listed for it (and the base modules and package).
BASE = {"errors", "fields", "io", "runtime", "metrics"}
ALLOWED = {
    "nn": set(),
    # Not settings: the settings reader checks data.source against the data layer's sources.
    "data": {"schema"},
    "decoding": {"nn", "data", "schema", "settings", "checkpoint"},
    "analysis": {"nn", "data", "decoding", "schema", "settings", "scoring"},
    "training": {"nn", "data", "decoding", "analysis", "schema", "settings", "checkpoint"}
    | {"scoring"},
    # Benchmarks: commands that measure every layer below them.
    "bench": {"nn", "data", "decoding", "analysis", "training", "schema", "settings", "checkpoint"}
    | {"cli", "scoring", "serving"},
    # The web server: a loaded model's translations and heads.
    "serving": {"nn", "data", "decoding", "analysis", "schema", "settings"},
    # The heads study's commands: the sweep report (translate.sweeps) and the speed benchmark.
    "ablation": {"nn", "data", "decoding", "analysis", "training", "schema", "settings"}
    | {"checkpoint", "cli", "sweeps", "bench"},
}


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports_of(path: Path) -> set[str]:
    """Every module name imported anywhere in the file (also inside functions)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def own_imports(path: Path, known: set[str]) -> set[str]:
    return {n for n in imports_of(path) if n in known}


def test_nn_imports_nothing_else_of_the_package():
    mods = modules()
    for name, path in mods.items():
        if name.startswith("translate.nn"):
            foreign = {m for m in own_imports(path, set(mods)) if not m.startswith("translate.nn")}
            assert not foreign, f"{name} imports {sorted(foreign)}"


def test_only_settings_and_entry_points_import_hydra_or_omegaconf():
    for name, path in modules().items():
        config_libs = {n for n in imports_of(path) if n.split(".")[0] in ("hydra", "omegaconf")}
        if name not in ENTRY_LAYER:
            assert not config_libs, f"{name} imports {sorted(config_libs)}"


def test_packages_import_only_lower_layers():
    mods = modules()
    for name, path in mods.items():
        package = name.split(".")[1] if "." in name else None
        if package not in ALLOWED or name in ENTRY_LAYER:
            continue
        for imported in own_imports(path, set(mods)):
            if imported == "translate":
                continue
            target = imported.split(".")[1]
            if target == package or target in BASE:
                continue
            assert target in ALLOWED[package], f"{name} imports {imported}"


def test_no_import_cycle():
    mods = modules()
    graph = {name: own_imports(path, set(mods)) - {name} for name, path in mods.items()}
    state: dict[str, str] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in graph[node]:
            if state.get(nxt) == "open":
                cycle = stack[stack.index(nxt) :] + [nxt] if nxt in stack else [node, nxt]
                pytest.fail(f"import cycle: {' -> '.join(cycle)}")
            if nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = "done"

    for name in graph:
        if name not in state:
            visit(name, [name])


def test_a_command_imports_torch_only_once_it_runs():
    """Importing a command's module (all ``--help`` and the settings check need) loads no torch:
    about 1.4 s of a 2 s start, which --help, a refused key and the tests' ~100 refusals skip."""
    code = "import sys\nsys.modules['torch'] = None  # import torch fails\n"
    code += "".join(f"import {module}\n" for module in COMMANDS)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
