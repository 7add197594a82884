"""Checkpoint averaging: the element-wise mean of the weights of a run's last checkpoints (as
fairseq and Joey NMT do), a cheap ensemble. The result is an inference checkpoint, the newest
input's with the averaged ``model`` and ``averaged_from``, without the optimizer, scheduler,
scaler and RNG states: they belong to the newest input's weights, so resuming from them would
silently continue another trajectory.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from translate.checkpoint import (
    AVERAGE,
    FORMAT_VERSION,
    load_checkpoint,
    non_finite,
    save_checkpoint,
)
from translate.errors import UserError, counted
from translate.io import check_output_file, file_sha256
from translate.training.resume import differences

_STEP_FILE = re.compile(r"step_(\d+)\.pt")
# What training's CheckpointManager owns in a checkpoints folder: never an averaging output.
_RESERVED = ("last.pt", "best.pt")


def step_checkpoints(directory: str | Path) -> list[Path]:
    """The ``step_<N>.pt`` files in ``directory``, by step."""
    found = [
        (int(match[1]), path)
        for path in Path(directory).glob("step_*.pt")
        if (match := _STEP_FILE.fullmatch(path.name))
    ]
    return [path for _, path in sorted(found)]


def around(paths: list[Path], step: int, n: int) -> list[Path]:
    """Up to ``n`` of ``paths`` (step checkpoints, oldest first) from ``n // 2`` before
    ``step``'s on; empty when no file is ``step``'s."""
    steps = [int(match[1]) for path in paths if (match := _STEP_FILE.fullmatch(path.name))]
    if step not in steps:
        return []
    start = max(0, steps.index(step) - n // 2)
    return paths[start : start + n]


def last_step_checkpoints(run_dir: str | Path, n: int) -> list[Path]:
    directory = Path(run_dir) / "checkpoints"
    if not directory.is_dir():
        raise UserError(f"{directory} does not exist; pass run_dir=<a training run's folder>")
    found = step_checkpoints(directory)
    if n > len(found):
        held = f"n={n} but {directory} holds {counted(len(found), 'step_*.pt checkpoint')}"
        raise UserError(f"{held}; {_what_to_pass(len(found))}")
    return found[len(found) - n :]


def _what_to_pass(found: int) -> str:
    """Only the ``n`` values the command accepts, or what to do when there are none."""
    if found >= 2:
        return "pass n=2" if found == 2 else f"pass n=2 to n={found}"
    return (
        "averaging needs 2 or more: train with trainer.keep_last_checkpoints>=2 and a "
        "trainer.checkpoint_every_n_steps that saves twice, or name the files with "
        "checkpoints='[a.pt,b.pt]' output=<file>"
    )


def check_output(output: str | Path, inputs: list[Path]) -> Path:
    """Where an average may go: a new file or an earlier average, not a training checkpoint."""
    output = Path(output)
    if output.name in _RESERVED or _STEP_FILE.fullmatch(output.name):
        raise UserError(
            f"output={output}: {output.name} is a name training's checkpoints use; "
            "choose another, e.g. averaged.pt"
        )
    target = check_output_file(output, "output", AVERAGE, inputs)
    if target.path is None or target.through:
        raise UserError(f"output={output}: an average is written to a file; name one")
    return target.path


def average_checkpoints(paths: list[str | Path]) -> dict:
    """The mean of ``paths``' ``model`` weights as a checkpoint: floats summed in float64 and cast
    back (N copies of one give exactly its weights), other entries equal in every input."""
    paths = [Path(p) for p in paths]
    _refuse_repeats(paths)
    first = newest = load_checkpoint(paths[0])
    # Every weight is a tensor: load_checkpoint refuses a checkpoint with anything else.
    sums = {
        k: v.to(torch.float64) if v.is_floating_point() else v for k, v in first["model"].items()
    }
    for path in paths[1:]:
        ckpt = load_checkpoint(path)
        _check_compatible(paths[0], first, path, ckpt)
        for key, value in ckpt["model"].items():
            _accumulate(sums, key, value, path, paths[0])
        if ckpt["step"] >= newest["step"]:
            newest = ckpt
        del ckpt
    n = len(paths)
    model = {
        key: (total / n).to(first["model"][key].dtype) if total.is_floating_point() else total
        for key, total in sums.items()
    }
    return {
        "format_version": FORMAT_VERSION,
        "model": model,
        "config": newest["config"],
        "tokenizer": newest["tokenizer"],
        "step": newest["step"],
        **({"progress": newest["progress"]} if "progress" in newest else {}),
        "averaged_from": [str(p) for p in paths],
    }


def _refuse_repeats(paths: list[Path]) -> None:
    """Refuse a checkpoint named twice (or linked, or copied): the mean of fewer was not asked."""
    seen: dict[str, Path] = {}
    for path in paths:
        identity = file_sha256(path)
        if identity in seen:
            first = seen[identity]
            same = f"{path} twice" if first == path else f"{first} and {path}, one checkpoint"
            raise UserError(
                f"the checkpoints to average name {same}: averaging a checkpoint with itself "
                "only weighs it double; name each checkpoint once"
            )
        seen[identity] = path


def average_into(paths: list[str | Path], output: str | Path) -> dict:
    """Average ``paths`` into ``output`` (refused, unwritten, if not finite); returns it."""
    averaged = average_checkpoints(paths)
    broken = non_finite(averaged["model"])
    if broken:
        raise UserError(
            f"the average of {', '.join(str(p) for p in paths)} has non-finite weights "
            f"({broken}): an input holds NaN or infinity; nothing is written; average "
            "checkpoints from before the run diverged"
        )
    save_checkpoint(averaged, Path(output), AVERAGE)
    return averaged


def _accumulate(sums: dict, key: str, value: torch.Tensor, path: Path, first: Path) -> None:
    if value.is_floating_point():
        sums[key] += value.to(torch.float64)
    elif not torch.equal(sums[key], value):
        raise UserError(
            f"cannot average {path} with {first}: their non-float entry model.{key} differs "
            "(averaging needs it equal in every checkpoint)"
        )


def _check_compatible(first_path: Path, first: dict, path: Path, ckpt: dict) -> None:
    why = f"cannot average {path} with {first_path}"
    differ = differences(
        first["config"],
        ckpt["config"],
        lambda key: key.startswith("model."),
        (f"in {first_path}", f"in {path}"),
    )
    if differ:
        raise UserError(f"{why}: different model configs ({'; '.join(differ)})")
    if ckpt["tokenizer"] != first["tokenizer"]:
        raise UserError(f"{why}: they were trained with different tokenizers")
    mine, theirs = first["model"], ckpt["model"]
    if set(mine) != set(theirs):
        key = sorted(set(mine) ^ set(theirs))[0]
        raise UserError(f"{why}: model.{key} is in only one of them")
    for key, value in theirs.items():
        if _describe(value) != _describe(mine[key]):
            raise UserError(
                f"{why}: model.{key} is {_describe(mine[key])} in {first_path}, "
                f"{_describe(value)} in {path}"
            )


def _describe(value: torch.Tensor) -> str:
    return f"{str(value.dtype).removeprefix('torch.')} {tuple(value.shape)}"
