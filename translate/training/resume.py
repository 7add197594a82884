"""Resuming a run from its newest checkpoint that loads, as the same experiment or not at all
(else ``results.json`` would describe a model it did not make): a change of a setting in
:data:`IDENTITY` is refused, naming each. Where the data is read from (:data:`LOCATION`) is
compared by the text fingerprints every checkpoint stores, so a moved data folder is still the
same data. Every other setting only changes the schedule, the budget or the scoring: it may
differ, and the log lists it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from translate.checkpoint import load_checkpoint
from translate.data.corpus import Corpus, split_fingerprints
from translate.errors import UserError
from translate.runtime.rng import set_rng_state
from translate.settings import TrainSettings, mechanics_keys
from translate.training.progress import Progress, limit_reached
from translate.training.step import Trainer

log = logging.getLogger(__name__)

# Prefixes of dotted config keys; one ending in "." covers a whole group.
IDENTITY = (
    "heads",
    "kv_heads",
    "model.",
    "seed",
    "data.source",
    "data.src_lang",
    "data.tgt_lang",
    "data.pair",
    "data.splits.",
    "data.tokenizer.",
    "data.filter.",
)
LOCATION = ("data.dir", "data.path", "data.hub.")
# How a job runs: never worth a word when it differs. The fields marked so, and the command.
MECHANICS = ("task_name", *mechanics_keys())


def _flat(config: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _rank(key: str, prefixes: tuple[str, ...]) -> int | None:
    for i, prefix in enumerate(prefixes):
        if key == prefix or (prefix.endswith(".") and key.startswith(prefix)):
            return i
    return None


def differences(
    saved: dict,
    here: dict,
    covered: Callable[[str], bool],
    where: tuple[str, str] = ("in the checkpoint", "here"),
) -> list[str]:
    """``key=<saved> in the checkpoint, <here> here`` for each ``covered`` key whose values
    differ. Keys in one config only (added or dropped since) are not compared."""
    a, b = _flat(saved), _flat(here)
    keys = [k for k in a if k in b and a[k] != b[k] and covered(k)]
    # heads and kv_heads are what a user sets; model.num_heads/num_kv_heads only follow them.
    for top, inner in (("heads", "model.num_heads"), ("kv_heads", "model.num_kv_heads")):
        if top in keys and inner in keys:
            keys.remove(inner)
    keys.sort(key=lambda k: (_rank(k, IDENTITY + LOCATION) or 0, k))
    return [f"{k}={a[k]} {where[0]}, {b[k]} {where[1]}" for k in keys]


def _covered(prefixes: tuple[str, ...], inside: bool = True) -> Callable[[str], bool]:
    return lambda key: (_rank(key, prefixes) is not None) == inside


_identity, _location = _covered(IDENTITY), _covered(LOCATION)
_schedule = _covered(IDENTITY + LOCATION + MECHANICS, inside=False)  # the rest


def refuse_other_experiment(what: str, ckpt: dict, config: dict, fingerprints) -> None:
    """Refuse a config of another experiment than ``ckpt``'s, naming every difference;
    ``fingerprints`` (of this config's data, by role) are only read where the data moved."""
    differ = differences(ckpt["config"], config, _identity)
    moved = differences(ckpt["config"], config, _location)
    saved = ckpt.get("data_fingerprints")
    if moved and saved and fingerprints:
        roles = [r for r in saved if r in fingerprints and saved[r] != fingerprints[r]]
        if roles:
            differ.append(f"the text of the {', '.join(roles)} split differs")
        else:
            log.info("the data is read from elsewhere (%s) but its text is the same", moved[0])
            moved = []
    differ += moved
    if differ:
        raise UserError(
            f"{what} was trained with other model or data settings ({'; '.join(differ)}); "
            "resume it with its own settings (see its .hydra/config.yaml), train these "
            "settings in a new run with hydra.run.dir=<new folder>, or replace that run with "
            "trainer.resume=false trainer.overwrite=true"
        )


def check_same_experiment(what: str, ckpt: dict, config: dict, fingerprints) -> None:
    """Refuse another experiment than ``ckpt``'s; log the schedule settings that differ."""
    refuse_other_experiment(what, ckpt, config, fingerprints)
    changed = differences(ckpt["config"], config, _schedule)
    if changed:
        log.warning("resuming with other schedule or budget settings: %s", "; ".join(changed))


def resume(path: Path, trainer: Trainer, corpus: Corpus, settings: TrainSettings) -> Progress:
    ckpt = load_checkpoint(path, map_location=trainer.device)
    check_same_experiment(str(path), ckpt, settings.config, corpus.fingerprints)
    if ckpt["tokenizer"] != corpus.tokenizer.model_proto:
        raise UserError(
            f"{path} was trained with a different tokenizer than this data config builds; "
            "resume with the run's original data settings"
        )
    try:
        trainer.load_state_dict(ckpt)
    except (RuntimeError, KeyError, ValueError) as err:
        raise UserError(
            f"{path} does not fit this model ({_first_lines(err)}); resume with the run's "
            "original model settings (see its .hydra/config.yaml)"
        ) from None
    set_rng_state(ckpt["rng"])
    progress = Progress(**ckpt["progress"])
    log.info("resumed from %s at step %d (epoch %d)", path, progress.step, progress.epoch)
    return progress


def _first_lines(err: Exception) -> str:
    """torch's first details of a state dict that does not fit, on one line."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    details = lines[1:] or lines  # torch's first line only says "Error(s) in loading ..."
    more = f"; and {len(details) - 2} more" if len(details) > 2 else ""
    return "; ".join(details[:2]) + more


def resume_or_start(
    directory: Path, trainer: Trainer, corpus: Corpus, settings: TrainSettings
) -> Progress:
    """:func:`resume` from the newest checkpoint in ``directory``, or start from step 0 where a
    run started but wrote no checkpoint, or a sweep job never started. A single run whose dir
    holds nothing of a run is a mistyped dir under ``true`` and starts under ``auto`` (a study
    preset's job run alone). Results without a checkpoint are no run to continue under either."""
    newest = newest_resumable(directory, settings.config, corpus.fingerprints)
    if newest is not None:
        return resume(newest, trainer, corpus, settings)
    run_dir, mode = directory.parent, settings.trainer.resume
    started = any((run_dir / name).is_dir() for name in ("checkpoints", "tensorboard"))
    fresh = settings.sweep_job or mode == "auto"
    if (run_dir / "results.json").exists() or not (started or fresh):
        word = str(mode).lower()
        raise UserError(
            f"trainer.resume={word} but {directory / 'last.pt'} does not exist: {run_dir} holds "
            "no run to resume; pass the interrupted run's dir with hydra.run.dir=<run_dir>, or "
            f"leave out trainer.resume={word} to start a new run there"
        )
    if started:
        log.warning(
            "%s holds no complete checkpoint (its run was stopped before the first one was "
            "written): starting from step 0",
            run_dir,
        )
    else:
        log.info("%s: no checkpoint yet, starting", settings.sweep_job or run_dir)
    return Progress()


def newest_resumable(directory: Path, config: dict, fingerprints: dict) -> Path | None:
    """The newest checkpoint in ``directory`` that loads and holds a training state; None where
    there is none. Each one that loads must be this experiment's (a resume writes over or prunes
    them all); a dir of only unreadable ones or averages is refused (a new start would too)."""
    newest, unreadable, averages = None, [], []
    for path in _checkpoint_files(directory):
        try:
            ckpt = load_checkpoint(path)
        except UserError as err:  # truncated, corrupt, refused: an older one may be whole
            unreadable.append(str(err))
            continue
        refuse_other_experiment(str(path), ckpt, config, fingerprints)
        if "optimizer" not in ckpt:
            averages.append(path.name)
        elif newest is None or ckpt["progress"]["step"] > newest[0]:
            newest = (ckpt["progress"]["step"], path)
    if newest is None and unreadable + averages:
        why = unreadable + [
            f"{name}: averaged weights, without a training state" for name in averages
        ]
        raise UserError(
            f"no checkpoint in {directory} can be resumed ({'; '.join(why)}); train in a new "
            "run with hydra.run.dir=<new folder>, or replace these with trainer.resume=false "
            "trainer.overwrite=true"
        )
    for reason in unreadable:
        log.warning("not resumed from: %s", reason)
    return None if newest is None else newest[1]


def _checkpoint_files(directory: Path) -> list[Path]:
    """Each checkpoint file (a hard link once): ``last.pt``, step files newest first, others."""
    paths = sorted((p for p in directory.glob("*.pt") if p.is_file()), reverse=True)
    paths.sort(key=lambda p: (p.name != "last.pt", not p.name.startswith("step_")))
    files: dict[tuple[int, int], Path] = {}  # by inode, the first name of each
    for path in paths:
        files.setdefault((path.stat().st_dev, path.stat().st_ino), path)
    return list(files.values())


def finished_results(settings: TrainSettings) -> dict | None:
    """The results of a resumed run already done, checked to be this experiment's."""
    run_dir, t = Path(settings.run_dir), settings.trainer
    results_file, last = run_dir / "results.json", run_dir / "checkpoints" / "last.pt"
    if not (t.resume and results_file.is_file() and last.is_file()):
        return None
    try:
        results = json.loads(results_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ckpt = load_checkpoint(last)
    progress = Progress(**ckpt["progress"])
    done = results.get("status") == "completed" and results.get("steps") == progress.step
    if not (done and limit_reached(progress, t)):
        return None
    # Reading the data to compare its text is only needed where it is read from elsewhere.
    moved = differences(ckpt["config"], settings.config, _location)
    fingerprints = split_fingerprints(settings.data) if moved else None
    check_same_experiment(f"{run_dir} is a finished run that", ckpt, settings.config, fingerprints)
    return results
