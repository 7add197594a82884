"""What the ``python -m`` entry points share: the user-error exit, Hydra's run facts, and the
output dirs each command holds for itself (entry-point layer: it may import Hydra)."""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import logging
import os
import re
import signal
import sys
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn, TypeVar

import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, OverrideParseException
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from translate import io
from translate.errors import EXIT_USER_ERROR, UserError, debug_enabled, interrupt_in_one_line
from translate.record import recorded
from translate.schema.help import group_type, leaf_fields
from translate.settings import COMMANDS
from translate.training.rundir import RunLock, training_run_marks

T = TypeVar("T")
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"  # the commands' config_path


def in_multirun() -> bool:
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def sweep_job() -> str | None:
    """A multirun job's overrides as its dir is named (``heads=4,seed=2``); None outside one."""
    if not in_multirun():
        return None
    job = HydraConfig.get().job
    return job.override_dirname or f"job {job.num}"


def task_overrides() -> list[str]:
    """The command line's overrides but ``trainer.resume``'s, for the resume hint."""
    if not HydraConfig.initialized():
        return []
    return [o for o in HydraConfig.get().overrides.task if not o.startswith("trainer.resume")]


def run_command(main: Callable[[], object], config_name: str) -> None:
    """A command's ``python -m`` entry: the command line checked, then ``main`` (its
    ``hydra.main``); Ctrl-C is one line and exit 130, and so is a bad override under ``--help``
    or ``--info``, where Hydra's exception would escape as a 40-line traceback."""
    with interrupt_in_one_line():
        check_command_line()
        _refuse_keys_of_an_unpicked_group(config_name)
        _refuse_unknown_keys(config_name)
        try:
            with refused_stdout_in_one_line(), _composition_errors_raised():
                main()
        except (HydraException, OmegaConfBaseException) as err:
            if debug_enabled():
                raise
            fail(_missing_key_message(err, config_name) or hydra_message(err))


# Set by _composition_errors_raised while Hydra composes; the command's own start unsets it.
_RAISING = "HYDRA_FULL_ERROR"
_raising_set = False


@contextlib.contextmanager
def _composition_errors_raised() -> Iterator[None]:
    """``HYDRA_FULL_ERROR=1`` while Hydra composes: it then raises a config it cannot compose
    (``data=foo``), which :func:`run_command` says in one line, instead of reporting it in five
    to eight lines and exit 1. Unset once the command starts (:func:`exit_on_user_error`)."""
    global _raising_set
    _raising_set = os.environ.get(_RAISING) != "1"
    if _raising_set:
        os.environ[_RAISING] = "1"
    try:
        yield
    finally:
        _composed()


def _composed() -> None:
    global _raising_set
    if _raising_set:
        os.environ.pop(_RAISING, None)
        _raising_set = False


def _missing_key_message(err: Exception, config_name: str) -> str | None:
    """``data.dir=x`` where the picked group has no ``dir``: which ``conf/data/`` configs have
    it (Hydra would suggest ``+data.dir=x``, which the source would then ignore); ``head=8``:
    the command's keys (Hydra would suggest ``+head=8``, which :func:`refuse_unused_keys`
    refuses in turn)."""
    found = re.match(r"Could not override '([\w.]+)'", str(err))
    if not (isinstance(err, HydraException) and found):
        return None
    key = found[1]
    unknown = _unknown_top_key(key, config_name)
    if unknown is not None:
        return unknown
    if "." not in key:
        return None
    group, _, rest = key.partition(".")
    folder = CONF_DIR / group
    if not folder.is_dir():
        return None
    having = [p.stem for p in sorted(folder.glob("*.yaml")) if _has_key(p, rest.split("."))]
    where = f"no conf/{group}/ config has it"
    if having:
        names = ", ".join(having[:-1]) + " and " * (len(having) > 1) + having[-1]
        where = f"{group}={names} {'have' if len(having) > 1 else 'has'} it"
    return f"{key} is not a key of the {group} config in use; {where}: pick one with {group}=<name>"


def _has_key(path: Path, parts: list[str]) -> bool:
    node = yaml.safe_load(path.read_text())
    for part in parts:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def run_plain_command(main: Callable[[], object]) -> NoReturn:
    """The ``python -m`` entry of a command without Hydra (benchmarks, ablation): a
    :class:`UserError`, Ctrl-C and a refused stdout each one line; exits with ``main``'s status."""
    with interrupt_in_one_line(), refused_stdout_in_one_line():
        try:
            status = main()
        except UserError as err:
            if debug_enabled():
                raise
            fail(str(err))
    sys.exit(status if isinstance(status, int) else 0)


class _QuietStdout:
    """Standard output that keeps the first write the system refuses (``> /dev/full``) instead
    of raising it wherever it lands (a ``print``, a log handler, the flush at exit); fd 1 is then
    /dev/null, and the command finishes its files before saying it in one line."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.refused: OSError | None = None

    def write(self, text: str) -> int:
        self._guarded(self.stream.write, text)
        return len(text)

    def flush(self) -> None:
        self._guarded(self.stream.flush)

    def _guarded(self, call: Callable, *args) -> None:
        try:
            call(*args)
        except OSError as err:
            if self.refused is None:
                self.refused = err
                io.point_at_devnull(self.stream)

    def __getattr__(self, name: str):  # fileno, buffer, encoding: the stream's own
        return getattr(self.stream, name)


@contextlib.contextmanager
def refused_stdout_in_one_line() -> Iterator[None]:
    """The block with :class:`_QuietStdout`; a refused write to stdout ends it, once its files
    are done, with one line and exit 2. A reader that stopped (``| head``) is no error: exit 141
    without a word, as a shell tool killed by SIGPIPE does."""
    stdout = sys.stdout = _QuietStdout(sys.stdout)
    succeeded = False
    try:
        yield
        succeeded = True
    except SystemExit as done:
        succeeded = done.code in (None, 0)  # --help: its text is the output
        raise
    finally:
        stdout.flush()
        sys.stdout = stdout.stream
        if succeeded and isinstance(stdout.refused, BrokenPipeError):
            sys.exit(128 + signal.SIGPIPE)
        if succeeded and stdout.refused is not None:  # a failure has said its own line
            fail(f"could not write to standard output: {io.write_error_reason(stdout.refused)}")


def hydra_message(err: Exception) -> str:
    """Hydra's message on one line, without its config search path; indented options joined."""
    segments: list[str] = []
    for line in str(err).split("\nConfig search path:")[0].splitlines():
        if not line.strip():
            continue
        if line[0].isspace() and segments:
            segments[-1] += (" " if segments[-1].endswith(":") else ", ") + line.strip()
        else:
            segments.append(line.strip())
    return " ".join(s if s.endswith((".", ":")) else s + "." for s in segments).rstrip(".")


def exit_on_user_error(fn: Callable[..., T]) -> Callable[..., T]:
    """A command's body: a :class:`UserError` prints ``error: <message>`` and exits 2; in a
    multirun it is logged and re-raised, so that Hydra fails only that job."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        _composed()
        try:
            with recorded(args[0] if args else None):  # .hydra/, once the command is accepted
                refuse_unused_keys(args[0] if args else None)
                return fn(*args, **kwargs)
        except UserError as err:
            if debug_enabled():
                raise
            if in_multirun():
                logging.getLogger(fn.__module__).error("error: %s", err)
                raise
            fail(str(err))

    return wrapper


def refuse_unused_keys(cfg: DictConfig | None) -> None:
    """Refuse overrides of keys the command does not read (Hydra adds any ``+key=``, and the
    command would run as if it were not there): it reads its settings' keys
    (:data:`translate.settings.COMMANDS`) and what its config defines (train's ``heads``)."""
    if cfg is None or not HydraConfig.initialized():
        return
    hydra_cfg = HydraConfig.get()
    name, overrides = str(hydra_cfg.job.config_name), list(hydra_cfg.overrides.task)
    unused = [o for o in overrides if _top_key(o) not in {*command_keys(name), "hydra"}]
    if unused:
        raise UserError(_unused_message(name, unused))


def _unused_message(name: str, unused: list[str]) -> str:
    return (
        f"{name} does not use {' '.join(unused)}; it takes "
        f"{', '.join(sorted(command_keys(name)))} (conf/{name}.yaml): leave them out"
    )


@functools.cache
def command_keys(name: str) -> frozenset[str]:
    """The top-level keys ``python -m translate.<name>`` reads: the keys and groups of
    ``conf/<name>.yaml`` (read as plain YAML; the experiments only set keys it has) and its
    settings' keys."""
    config = yaml.safe_load((CONF_DIR / f"{name}.yaml").read_text())
    groups = [next(iter(entry)) for entry in config.get("defaults", []) if isinstance(entry, dict)]
    keys = {*config, *(g for g in groups if not g.startswith("override "))} - {"defaults", "hydra"}
    read = dataclasses.fields(COMMANDS[name]) if name in COMMANDS else ()
    return frozenset(keys | {field.name for field in read if field.metadata["key"]})


def _refuse_keys_of_an_unpicked_group(config_name: str) -> None:
    """``data.dir=x`` without ``data=<name>``: an optional group is absent until picked, and
    Hydra would refuse its key in a 6-line report."""
    hints = typing.get_type_hints(COMMANDS[config_name])
    keys = [arg.partition("=")[0] for arg in sys.argv[1:]]
    for key in keys:
        group, dot, _ = key.partition(".")
        optional = type(None) in typing.get_args(hints.get(group))
        if dot and optional and group not in keys:
            fail(
                f"{key}= sets a key of the {group} group, which only {group}=<name> brings in "
                f"(conf/{group}/): add {group}=<name>"
            )


def _refuse_unknown_keys(config_name: str) -> None:
    """``trainer.lr=1`` (the key is ``optim.lr``) or ``head=8`` in one line naming where it
    is a key, not Hydra's five lines suggesting ``+trainer.lr=1``, which the settings would
    refuse too; before Hydra runs, so a refused sweep leaves no sweep dir behind."""
    schema = COMMANDS[config_name]
    # What +key= adds is a key for Hydra, refused here with its other keys as refuse_unused_keys
    # would refuse it in each job (after a sweep's dir is made).
    added = {_top_key(arg) for arg in sys.argv[1:] if arg.startswith("+")}
    foreign = added - command_keys(config_name) - {"hydra"}
    unused = [arg for arg in sys.argv[1:] if _top_key(arg) in foreign]
    if unused:
        fail(_unused_message(config_name, unused))
    for arg in sys.argv[1:]:
        key, eq, _ = arg.partition("=")
        if not eq or arg.startswith(("-", "+", "~", "hydra.", "hydra/")):
            continue
        unknown = _unknown_top_key(key, config_name)
        if unknown is not None:
            fail(unknown)
        if "." in key:
            found = _unknown_key(schema, key.split("."))
            if found is not None:
                group, known = found
                leaf = "." + key.rsplit(".", 1)[1]
                keys = [k for k, field in leaf_fields(schema) if field.metadata["key"]]
                elsewhere = [k for k in keys if k.endswith(leaf)]
                hint = f" ({' or '.join(elsewhere)}?)" if elsewhere else ""
                fail(f"unknown key {key}{hint}; the keys of {group} are {', '.join(known)}")


def _unknown_top_key(key: str, config_name: str) -> str | None:
    """``head=8`` or ``traner.max_steps=1``: the nearest key and every key the command takes;
    None where the key's first part is one of them."""
    group, dot, rest = key.partition(".")
    if group in command_keys(config_name):
        return None
    known = sorted(command_keys(config_name))
    close = difflib.get_close_matches(group, known, n=1)
    hint = f" ({close[0]}{dot}{rest}?)" if close else ""
    return (
        f"unknown key {key}{hint}; {config_name} takes {', '.join(known)} (conf/{config_name}.yaml)"
    )


def _unknown_key(schema, parts: list[str]) -> tuple[str, list[str]] | None:
    """``(group, its keys)`` where ``parts`` leave ``schema``'s groups; None when they name
    one of its keys, or a top-level name (Hydra's to check: ``heads``, ``experiment``)."""
    cls = schema
    for n, part in enumerate(parts):
        keys = [f.name for f in dataclasses.fields(cls) if f.metadata["key"]]
        if part not in keys:
            return (".".join(parts[:n]), keys) if n else None
        cls = group_type(typing.get_type_hints(cls)[part])
        if cls is None:  # a value (or a dict's entries) from here on
            return None
    return None


def _top_key(override: str) -> str:
    """``model`` of ``+model.d_model=64``."""
    return re.split(r"[.@=/]", override.lstrip("+~"), maxsplit=1)[0]


def fail(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(EXIT_USER_ERROR)


@contextlib.contextmanager
def own_output_dir(out_dir: Path, outputs: tuple[str, ...], command: str) -> Iterator[Path]:
    """Hold ``out_dir`` while ``command`` writes there; refused: a training run's dir, one
    holding ``outputs``, or one inside a run or sweep (whose report would take it for a job)."""
    marks = training_run_marks(out_dir)
    if marks:
        raise UserError(
            f"{out_dir} is a training run's dir ({', '.join(marks)}); {command} writes into "
            "a dir of its own: pass another hydra.run.dir=<folder>"
        )
    for folder in Path(os.path.abspath(out_dir)).parents:
        what = "a sweep's dir" if (folder / "multirun.yaml").exists() else None
        marks = training_run_marks(folder)
        what = what or (f"a training run's dir ({', '.join(marks)})" if marks else None)
        if what:
            raise UserError(
                f"{out_dir} is inside {folder}, {what}; {command} writes into a dir of its own, "
                "outside runs and sweeps: pass another hydra.run.dir=<folder>"
            )
    lock = RunLock(out_dir).acquire()
    try:
        found = [name for name in outputs if (out_dir / name).exists()]
        if found:
            raise UserError(
                f"{out_dir} already holds the outputs of an earlier {command} "
                f"({', '.join(found)}); pass another hydra.run.dir=<folder>"
            )
        yield out_dir
    finally:
        lock.release()


def check_command_line() -> None:
    """Stop at a ``hydra.run.dir=`` or ``hydra.sweep.dir=`` Hydra could not make or write into,
    before its mkdir or log file fails with a traceback."""
    parser = OverridesParser.create()
    for arg in sys.argv[1:]:
        key = arg.lstrip("+~").partition("=")[0]
        if key not in ("hydra.run.dir", "hydra.sweep.dir"):
            continue
        try:
            override = parser.parse_overrides([arg])[0]
        except OverrideParseException:  # Hydra reports it in its own words
            continue
        value = override.value()
        if isinstance(value, str):
            check_run_dir(override.key_or_group, Path(value))


def check_run_dir(key: str, path: Path) -> None:
    """Stop in one line at a run or sweep dir that cannot be a folder (a file in the way, a
    link to a missing folder) or written (it, or the nearest existing folder above)."""
    for link in (path, *path.parents):
        if link.is_symlink() and not link.exists():
            target = os.path.realpath(link)  # the end of the chain: the folder to create
            where = "is" if link == path else f"is inside {link},"
            fail(
                f"{key}={path} {where} a symbolic link to {target}, which does not exist; "
                f"create {target} or pass another {key}"
            )
    blocker = io.file_in_the_way(path)
    if blocker is not None:
        what = "is a file" if blocker == path else f"is inside {blocker}, a file"
        fail(f"{key}={path} {what}, not a folder; pass a folder with {key}=<folder>")
    folder = next(p for p in (path, *path.parents) if p.exists())
    if not os.access(folder, os.W_OK | os.X_OK):
        read_only = os.statvfs(folder).f_flag & os.ST_RDONLY
        why = "read-only file system" if read_only else "permission denied"
        where = "" if folder == path else f": {os.path.abspath(folder)}"
        fail(
            f"{key}={path} cannot be written ({why}{where}); "
            f"pass a writable folder with {key}=<folder>"
        )


class RunDirCheck(Callback):
    """:func:`check_run_dir` on the dir Hydra resolved (also a default or a preset's), before
    it makes it and opens its log there."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        check_run_dir("hydra.run.dir", Path(str(config.hydra.run.dir)))

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        check_run_dir("hydra.sweep.dir", Path(str(config.hydra.sweep.dir)))
