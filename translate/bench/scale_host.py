"""The host side of the training loop, measured (``translate/bench/scale.py`` stages ``host``
and ``syncs``), with a tiny model at the recipe's batch size so that the model costs little.

``host``: the real :func:`translate.training.loop.fit` for ``host_updates`` updates, the
package functions it spends an update in (:data:`PARTS`) wrapped in timers for the run (the
wrappers add about a microsecond a call); where the time of the steady updates goes, and
updates/s with and without the step.

``syncs``: a few updates of the same run under a :class:`~torch.overrides.TorchFunctionMode`
that records every read of a tensor's value on the host (``item``, ``float()``, ``bool()``,
``tolist``, ``nonzero``, ...) and every blocking ``.to(device)`` our code makes, by the
package line that made it. On CUDA each such read of a GPU tensor is a host-device
synchronisation, and so is each blocking copy to the device (PyTorch synchronises the stream
after a copy from pageable memory); reads in ``translate/data/`` are of host tensors (batches
are built before they are moved). On CUDA the stage also counts what
``torch.cuda.set_sync_debug_mode`` reports. Plus the operators one
update dispatches, with this CPU's cost to dispatch a trivial one: the host's floor per update
on a GPU, where kernels run asynchronously.
"""

from __future__ import annotations

import collections
import functools
import importlib
import logging
import time
import traceback
import warnings

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from translate.bench.scale_common import setup_run

log = logging.getLogger("rehearse")

# The model made narrow; its depth (so the operators an update dispatches), the data, the
# tokenizer and the 8,192-token batches stay the recipe's.
TINY = ["heads=2", "model.d_model=32", "model.d_ff=64"]
# The end of the run (a validation and a test scoring) is no part of what is measured: short.
SHORT_END = [
    "trainer.val_bleu_sentences=8",
    "trainer.latency_sentences=1",
    "decode.max_len_a=0",
    "decode.max_len_b=4",
]
# (module, attribute, part): what fit spends an update in. "batches" wraps the epoch's batch
# generator (sampler order, rank share, collate); collate and forward+loss are inside others.
PARTS = [
    ("translate.training.batch_order", "TrainBatches.epoch", "batches"),
    ("translate.training.batch_order", "collate", "collate"),
    ("translate.training.step", "Trainer.step", "step"),
    ("translate.training.step", "Trainer._loss", "forward+loss"),
    ("translate.training.loop", "_count_step", "count"),
    ("translate.training.loop", "_log_step", "log"),
    ("translate.training.loop", "_stop_reason", "stop check"),
    ("translate.training.loop", "_validate_and_checkpoint", "validate/checkpoint check"),
]
NESTED = {"collate": "batches", "forward+loss": "step"}
STEADY_AFTER = 10  # updates left out at the start: allocator and optimizer state warm-up


class Clock:
    """Timed calls: ``(part, start, seconds)`` of every call of the wrapped functions."""

    def __init__(self) -> None:
        self.events: list[tuple[str, float, float]] = []

    def wrap(self, fn, part: str):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.events.append((part, start, time.perf_counter() - start))

        return timed

    def wrap_generator(self, fn, part: str):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            items = fn(*args, **kwargs)
            while True:
                start = time.perf_counter()
                item = next(items, StopIteration)
                self.events.append((part, start, time.perf_counter() - start))
                if item is StopIteration:
                    return
                yield item

        return timed


def _patch(clock: Clock) -> tuple[list, list[str]]:
    """Wrap every function of :data:`PARTS` that exists; ``(undo list, parts not found)``."""
    undo, missing = [], []
    for module_name, attr, part in PARTS:
        owner = importlib.import_module(module_name)
        *path, name = attr.split(".")
        for step in path:
            owner = getattr(owner, step, None)
        fn = getattr(owner, name, None) if owner is not None else None
        if fn is None:  # renamed since: say so rather than fail
            missing.append(f"{module_name}.{attr}")
            continue
        wrap = clock.wrap_generator if part == "batches" else clock.wrap
        setattr(owner, name, wrap(fn, part))
        undo.append((owner, name, fn))
    return undo, missing


def _breakdown(events, skip: int) -> dict:
    """Seconds per update of each part over the steady updates: from the end of update
    ``skip`` to the end of the last (whose end of run, a validation, is left out)."""
    ends = sorted(start + seconds for part, start, seconds in events if part == "step")
    if len(ends) < skip + 2:
        raise ValueError(f"{len(ends)} updates: too few to leave {skip} out; raise the count")
    lo, hi = ends[skip], ends[-1]
    updates = len(ends) - 1 - skip
    per_part = collections.Counter()
    for part, start, seconds in events:
        if lo <= start < hi:
            per_part[part] += seconds
    window = hi - lo
    top = sum(v for k, v in per_part.items() if k not in NESTED)
    rows = [{"part": k, "ms_per_update": 1e3 * v / updates} for k, v in per_part.items()]
    rows.append(
        {"part": "other (the loop itself)", "ms_per_update": 1e3 * (window - top) / updates}
    )
    for row in rows:
        row["share"] = row["ms_per_update"] / (1e3 * window / updates)
        row["inside"] = NESTED.get(row["part"])
    loop_s = window - per_part["step"]
    return {
        "updates": updates,
        "updates_per_s": updates / window,
        "loop_updates_per_s": updates / loop_s if loop_s > 0 else None,
        "rows": rows,
    }


def stage_host(p: dict) -> dict:
    run = setup_run(p, *TINY, *SHORT_END, f"trainer.max_steps={p['host_updates']}")
    from translate.training import loop

    clock = Clock()
    undo, missing = _patch(clock)
    try:
        stop, _ = loop.fit(run)
    finally:
        for owner, name, fn in undo:
            setattr(owner, name, fn)
        run.lock.release()
    out = _breakdown(clock.events, STEADY_AFTER)
    t = run.settings.trainer
    return {
        **out,
        "stopped": stop,
        "max_tokens": run.corpus.max_tokens,
        "log_every_n_steps": t.log_every_n_steps,
        "parameters": sum(x.numel() for x in run.model.parameters()),
        "not_found": missing,
    }


# ------------------------------------------------------------------------------- syncs

VALUE_READS = {"item", "__float__", "__bool__", "__int__", "__index__", "tolist", "nonzero"}
VALUE_READS |= {"numpy", "cpu", "equal", "allclose"}
SKIPPED_FRAMES = {"_validate", "_checkpoint", "finish_run"}  # validation and checkpoints
# torch's own frames between a call in our code and the mode (Tensor.__float__ and friends).
WRAPPERS = ("torch/overrides.py", "torch/_tensor.py")
BLOCKING_COPY = "to(device), blocking"


class Reads(TorchFunctionMode):
    """Counts value reads and blocking copies to a device by ``(op, package line)``."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in VALUE_READS:
            self._record(name)
        elif name == "to" and not kwargs.get("non_blocking", False) and _to_device(args, kwargs):
            self._record(BLOCKING_COPY)
        return func(*args, **kwargs)

    def _record(self, op: str) -> None:
        """Count ``op`` if our own code made it (not torch's: Adam reads its step counters,
        which it keeps on the host, and ``clip_grad_norm_`` moves norms within the device),
        outside validation and checkpoints."""
        frames = traceback.extract_stack()[:-2]
        while frames and frames[-1].filename.replace("\\", "/").endswith(WRAPPERS):
            frames.pop()
        path = frames[-1].filename.replace("\\", "/") if frames else ""
        if "/translate/" not in path or any(f.name in SKIPPED_FRAMES for f in frames):
            return
        where = f"translate/{path.split('/translate/')[-1]}:{frames[-1].lineno} {frames[-1].name}"
        self.counts[(op, where)] += 1


def _syncs(op: str, where: str) -> bool:
    """Whether ``op`` at ``where`` waits for the GPU: a blocking copy to the device does (the
    stream is synchronised) unless ``data.batching.to_device`` makes it, which on a GPU copies
    through pinned memory without blocking (on the CPU, where this counts, its copy is plain);
    a value read does unless it reads a host tensor (the data package's: batches are built on
    the host and moved afterwards)."""
    if op == BLOCKING_COPY:
        return not where.endswith(" to_device")
    return not where.startswith("translate/data/")


def _to_device(args, kwargs) -> bool:
    return "device" in kwargs or any(isinstance(a, (torch.device, str)) for a in args[1:])


class Ops(TorchDispatchMode):
    """Counts the operators dispatched (forward, backward and optimizer)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def _dispatch_us(calls: int = 20000) -> float:
    """Microseconds this CPU takes to dispatch a trivial operator (one-element add)."""
    a, b = torch.ones(1), torch.ones(1)
    for _ in range(1000):
        torch.add(a, b)
    start = time.perf_counter()
    for _ in range(calls):
        torch.add(a, b)
    return 1e6 * (time.perf_counter() - start) / calls


def stage_syncs(p: dict) -> dict:
    updates = p["sync_updates"]
    extra = [*TINY, *SHORT_END, f"trainer.max_steps={updates}", "trainer.log_every_n_steps=1"]
    run = setup_run(p, *extra)
    from translate.training import loop
    from translate.training.batch_order import TrainBatches

    reads, cuda = Reads(), run.trainer.device.type == "cuda"
    try:
        with reads, warnings.catch_warnings(record=True) as caught:
            if cuda:
                torch.cuda.set_sync_debug_mode("warn")
            loop.fit(run)
        batches = TrainBatches(run.corpus.splits["train"], run.corpus.max_tokens, 0)
        group = next(batches.epoch(0, 0, run.settings.trainer.accumulate_grad_batches))
        ops = Ops()
        with ops:
            run.trainer.step(group)
    finally:
        if cuda:
            torch.cuda.set_sync_debug_mode("default")
        run.lock.release()
    rows = [
        {"op": op, "where": where, "per_update": n / updates, "sync_on_cuda": _syncs(op, where)}
        for (op, where), n in sorted(reads.counts.items(), key=lambda kv: kv[0][1])
    ]
    dispatch = _dispatch_us()
    return {
        "updates": updates,
        "rows": rows,
        "syncs_per_update": sum(r["per_update"] for r in rows if r["sync_on_cuda"]),
        "cuda_sync_warnings": sum("synchroniz" in str(w.message) for w in caught) if cuda else None,
        "ops_per_update": ops.count,
        "dispatch_us_per_op": dispatch,
        "dispatch_floor_updates_per_s": 1e6 / (ops.count * dispatch),
    }
