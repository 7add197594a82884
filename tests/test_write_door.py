"""One door for every write: no module of the package writes a file except through
``translate/io.py`` (the way test_architecture.py finds layer breaks, read from the source).

What counts as a write: ``open`` (or ``os.open``) for writing, ``Path.write_text`` /
``write_bytes`` / ``touch`` / ``rename`` / ``symlink_to`` / ``hardlink_to``, ``torch.save``,
``json.dump``, ``np.save``, ``savefig`` / ``imsave``, TensorBoard's ``SummaryWriter``, any
other object's ``.save(...)`` (a library writing its own files), and ``os``/``shutil``/
``tempfile`` calls that make, copy, move or rename files. Each exception below says why it is
not an output.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "translate"
DOOR = PACKAGE / "io.py"

WRITING_METHODS = {
    "write_text",
    "write_bytes",
    "touch",
    "rename",
    "symlink_to",
    "hardlink_to",
    "savefig",
    "imsave",
    "save",
    "savez",
    "savez_compressed",
    "dump",
}
WRITING_FUNCTIONS = {
    "os": {"replace", "rename", "renames", "link", "symlink", "mkfifo", "mknod", "truncate"},
    "shutil": {"copy", "copy2", "copyfile", "copytree", "move", "copyfileobj"},
    "tempfile": {"mkstemp", "mkdtemp", "NamedTemporaryFile", "TemporaryFile"},
}
WRITING_NAMES = {"SummaryWriter"}
# (module, call as written): why it is not a write of an output.
EXCEPTIONS = {
    ("translate.training.loop", "run.ckpts.save"): "CheckpointManager.save writes through io",
    ("translate.ablation.report", "fig.savefig"): "into an in-memory BytesIO",
    ("translate.decoding.ct2_export", "spec.save"): "into io.write_folder's temporary folder",
    ("translate.data.tokenizer", "np.savez"): "into an in-memory BytesIO",
    ("translate.checkpoint", "torch.save"): "into a byte counter, to say a checkpoint's size",
    ("translate.training.rundir", "os.open"): "the run dir's lock file, never renamed over",
    ("translate.data.tokenizer", "os.open"): "the tokenizer build's lock file, likewise",
    ("translate.runtime.memory", "_PROC_CLEAR_REFS.write_text"): "a kernel control in /proc",
}


def _call_name(func: ast.expr) -> str:
    """``a.b.c`` of a call's function, as written (``?`` for what is not a plain name)."""
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return f"{_call_name(func.value)}.{func.attr}"
    return "?"


def _open_mode(call: ast.Call, method: bool) -> str:
    """The mode of ``open(path, mode)`` or of ``path.open(mode)`` (a method)."""
    at = 0 if method else 1
    mode = call.args[at] if len(call.args) > at else None
    mode = next((k.value for k in call.keywords if k.arg == "mode"), mode)
    return mode.value if isinstance(mode, ast.Constant) and isinstance(mode.value, str) else ""


def _is_write(call: ast.Call) -> bool:
    name = _call_name(call.func)
    head, _, last = name.rpartition(".")
    if name in ("open", "io.open") or last == "open" and head not in ("os", ""):
        return any(c in _open_mode(call, method=name not in ("open", "io.open")) for c in "wax+")
    if name == "os.open":
        return True
    if head in WRITING_FUNCTIONS:
        return last in WRITING_FUNCTIONS[head]
    return last in WRITING_NAMES or (bool(head) and last in WRITING_METHODS)


def _handed_to_the_door(tree: ast.AST) -> set[int]:
    """The calls inside a ``lambda f: ...`` given to the door (``io.write(path, lambda f:
    torch.save(state, f), kind)``): they write into the temporary file the door opened."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _call_name(node.func) in ("io.write", "write"):
            for arg in node.args:
                if isinstance(arg, ast.Lambda):
                    inside |= {id(n) for n in ast.walk(arg.body) if isinstance(n, ast.Call)}
    return inside


def writes_outside_the_door() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == DOOR:
            continue
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        tree = ast.parse(path.read_text())
        handed = _handed_to_the_door(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and _is_write(node)) or id(node) in handed:
                continue
            if (module, _call_name(node.func)) not in EXCEPTIONS:
                found.append(f"{module}:{node.lineno} {_call_name(node.func)}")
    return found


def test_no_module_writes_a_file_except_through_the_door():
    assert writes_outside_the_door() == []


def test_the_finder_finds_each_kind_of_write(tmp_path, monkeypatch):
    """The search above would find a new write of every kind it names (so an empty list means
    something): a module written with one of each is reported line by line."""
    lines = [
        "open(p, 'w')",
        "open(p, mode='ab')",
        "p.open('w')",
        "p.write_text('x')",
        "p.write_bytes(b'')",
        "torch.save(state, p)",
        "json.dump(d, f)",
        "np.save(p, a)",
        "fig.savefig(p)",
        "spec.save(folder)",
        "SummaryWriter(folder)",
        "os.replace(a, b)",
        "shutil.copyfile(a, b)",
        "tempfile.mkstemp()",
        "os.open(p, os.O_WRONLY)",
    ]
    harmless = [
        "open(p)",
        "open(p, 'rb')",
        "d.copy()",
        "s.replace('a', 'b')",
        "io.write(p, lambda f: torch.save(state, f), 'kind')",
    ]
    package = tmp_path / "translate"
    package.mkdir()
    (package / "io.py").write_text("")
    (package / "sample.py").write_text("\n".join(lines + harmless) + "\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", package)
    monkeypatch.setattr(sys.modules[__name__], "DOOR", package / "io.py")
    assert [f.split(" ")[0] for f in writes_outside_the_door()] == [
        f"translate.sample:{n}" for n in range(1, len(lines) + 1)
    ]
