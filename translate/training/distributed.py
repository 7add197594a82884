"""Data-parallel training over the processes ``torchrun`` starts (docs/scale_out.md);
a plain ``python -m translate.train`` never touches ``torch.distributed``.

* every rank trains on its own share of each epoch's batches (:func:`shard`) and DDP averages
  the gradients, so N ranks with ``accumulate_grad_batches=A`` take the steps of one with A*N;
* rank 0 alone validates, writes the run's files and scores the test split;
* stop decisions are agreed on by all ranks, so they stop at the same step;
* a rank that fails on a user error says so, the others leave quietly (:func:`one_cause`).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
import shutil
import signal
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

import torch
import torch.distributed as tdist
from torch import nn

from translate import io
from translate.errors import EXIT_PEER_FAILED, UserError

log = logging.getLogger(__name__)

T = TypeVar("T")

# Rank 0 validates while the others wait in their next collective; leave that room before a
# rank gives up on the others.
TIMEOUT = timedelta(minutes=30)
# Rank 0 builds the tokenizer and the encoded splits (main_first), and at the end scores the
# test split (main_last), while the others wait: minutes at IWSLT2017's size on 2 CPU cores,
# and on a larger corpus or a slower machine more than TIMEOUT, so the waiting ranks are given
# this long instead (a rank that dies ends the job sooner: torchrun stops the others).
BUILD_TIMEOUT = timedelta(hours=6)
# Where the first rank to fail on a user error leaves its rank, message and time (JSON).
FAILED_KEY = "translate/failed"


@dataclass(frozen=True)
class Dist:
    """This process's place among the training processes."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    # Started by torchrun: DDP even for one process (a single-GPU torchrun job expects it).
    torchrun: bool = field(default=False, compare=False)

    @property
    def enabled(self) -> bool:
        return self.torchrun or self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def from_env(environ: Mapping[str, str] = os.environ) -> Dist:
    if "RANK" not in environ or "WORLD_SIZE" not in environ:
        return Dist()
    try:
        rank, world = int(environ["RANK"]), int(environ["WORLD_SIZE"])
        local = int(environ.get("LOCAL_RANK", rank))
    except ValueError as err:
        raise UserError(f"RANK/WORLD_SIZE/LOCAL_RANK must be integers ({err})") from err
    if not 0 <= rank < world:
        raise UserError(f"RANK={rank} is outside WORLD_SIZE={world}")
    return Dist(rank, local, world, torchrun=True)


def init(d: Dist, device: torch.device) -> torch.device:
    """Join the process group; the device this rank trains on (``cuda:LOCAL_RANK`` on GPUs)."""
    if not d.enabled:
        return device
    if device.type == "cuda":
        visible = torch.cuda.device_count()
        if d.local_rank >= visible:
            raise UserError(
                f"LOCAL_RANK={d.local_rank} but only {visible} GPU(s) are visible; start at most "
                f"{visible} processes per node (torchrun --nproc_per_node={visible})"
            )
        device = torch.device("cuda", d.local_rank)
        torch.cuda.set_device(device)
        tdist.init_process_group("nccl", timeout=TIMEOUT, device_id=device)
    else:
        tdist.init_process_group("gloo", timeout=TIMEOUT)
    if d.is_main:
        log.info(
            "DistributedDataParallel: %d processes, backend %s, this one on %s",
            d.world_size,
            tdist.get_backend(),
            device,
        )
    return device


@contextlib.contextmanager
def one_cause(d: Dist, active: bool = True) -> Iterator[None]:
    """A torchrun job's body, leaving the process group at its end: a rank that fails on a
    :class:`UserError` says so, the others leave without a word.

    Before the failing rank leaves the group (which ends a peer's collective with "Connection
    closed by peer"), it puts its message in the store; a rank whose error comes after that (or
    is the same user error) exits quietly with :data:`EXIT_PEER_FAILED`. Each writes torchrun's
    error file, the failing rank with the earliest time, so torchrun's summary names it as the
    root cause. ``active=False`` (a sweep's job) only leaves the group."""
    try:
        yield
    except UserError as err:
        if active and d.enabled and tdist.is_initialized():
            _say_failed(d, str(err))
        raise
    except Exception:
        first = _failure_said() if active and d.enabled and tdist.is_initialized() else None
        if first is not None:
            _leave_quietly(d, first)
        raise
    finally:
        if d.enabled and tdist.is_available() and tdist.is_initialized():
            tdist.destroy_process_group()


def _say_failed(d: Dist, message: str) -> None:
    """Put this rank's failure in the store, unless a peer's is there; leave quietly when that
    one says the same. SIGTERM (torchrun's, once a rank has exited) no longer cuts it short."""
    mine = json.dumps({"rank": d.rank, "message": message, "time": int(time.time())})
    try:
        first = json.loads(_store().compare_set(FAILED_KEY, "", mine))
    except RuntimeError:  # the store's host (rank 0 outside torchrun) is gone: say it anyway
        return
    said_first = first["rank"] == d.rank
    if not said_first and first["message"] == message:
        _leave_quietly(d, first)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _error_file(f"error: {message}", first["time"] if said_first else _after(first))


def _failure_said() -> dict | None:
    try:
        store = _store()
        return json.loads(store.get(FAILED_KEY)) if store.check([FAILED_KEY]) else None
    except RuntimeError:
        return None


def _store() -> tdist.Store:
    # The store the process group was made with (torch has no public accessor): under
    # torchrun its agent's, which outlives the ranks.
    return tdist.distributed_c10d._get_default_store()


def _leave_quietly(d: Dist, first: dict) -> None:
    _error_file(f"rank {d.rank} stopped: rank {first['rank']} failed", _after(first))
    raise SystemExit(EXIT_PEER_FAILED) from None


def _after(first: dict) -> int:
    return max(int(time.time()), first["time"] + 1)


def _error_file(message: str, timestamp: int) -> None:
    """torchrun's error file, in torch's ``record`` format with ``message`` as traceback."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if path:
        info = {"py_callstack": message, "timestamp": str(timestamp)}
        body = {"message": {"message": message, "extraInfo": info}}
        io.write(path, json.dumps(body), "torchrun error file")


def wrap(model: nn.Module, device: torch.device) -> nn.parallel.DistributedDataParallel:
    """``model`` in DDP. Buffers are not re-broadcast every forward (the only ones are constant
    positional encodings), so rank 0 can validate on the bare model between steps."""
    ddp = nn.parallel.DistributedDataParallel
    # torch >= 2.13 renamed the switch (and still syncs buffers once, at construction)
    renamed = "forward_sync_buffers" in inspect.signature(ddp.__init__).parameters
    no_buffer_sync = {"forward_sync_buffers" if renamed else "broadcast_buffers": False}
    ids = [device.index] if device.type == "cuda" else None
    return ddp(model, device_ids=ids, output_device=ids[0] if ids else None, **no_buffer_sync)


def shard(order: Sequence[T], rank: int, world_size: int) -> list[T]:
    """Items ``rank, rank + N, ...`` of ``order``, the ragged tail dropped so every rank takes
    the same number of steps."""
    usable = len(order) - len(order) % world_size
    return list(order[rank:usable:world_size])


@contextlib.contextmanager
def main_first(d: Dist) -> Iterator[None]:
    """Rank 0 runs the body first (builds the data caches), the others after it. They wait in a
    gloo group of their own with :data:`BUILD_TIMEOUT`, which a long build may need."""
    if not d.enabled:
        yield
        return
    group = tdist.new_group(backend="gloo", timeout=BUILD_TIMEOUT)
    start = time.perf_counter()
    if not d.is_main:
        tdist.barrier(group=group)
        log.info(
            "rank %d waited %.1f s for rank 0 to build the data caches (limit %s)",
            d.rank,
            time.perf_counter() - start,
            BUILD_TIMEOUT,
        )
    yield
    if d.is_main:
        log.info(
            "data caches ready after %.1f s; the other ranks waited for them (limit %s, "
            "the process group's timeout %s)",
            time.perf_counter() - start,
            BUILD_TIMEOUT,
            TIMEOUT,
        )
        tdist.barrier(group=group)
    tdist.destroy_process_group(group)


@contextlib.contextmanager
def main_last(d: Dist) -> Iterator[None]:
    """Rank 0 scores the test split in the body while the others wait at a barrier, so all
    leave the group together: a rank that tore it down while rank 0 still saved died now and
    then with SIGABRT, and torchrun stopped rank 0 mid-scoring. If the body raises, no
    barrier: rank 0 leaves with its error, which ends the others' wait."""
    if not d.enabled:
        yield
        return
    group = tdist.new_group(backend="gloo", timeout=BUILD_TIMEOUT)
    yield
    tdist.barrier(group=group)
    tdist.destroy_process_group(group)


def max_all(values: Sequence[float]) -> list[float]:
    """Element-wise maximum of ``values`` over the ranks."""
    nccl = tdist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
    t = torch.tensor(list(values), dtype=torch.float64, device=device)
    tdist.all_reduce(t, op=tdist.ReduceOp.MAX)
    return t.tolist()


def broadcast(obj: T) -> T:
    box = [obj]
    tdist.broadcast_object_list(box, src=0)
    return box[0]


def gather(obj: T) -> list[T]:
    out: list = [None] * tdist.get_world_size()
    tdist.all_gather_object(out, obj)
    return out


def quiet_other_ranks(d: Dist) -> None:
    """Ranks other than 0 log warnings only (a logger's own level, e.g. ``hydra.verbose``,
    stays), so the run's log is rank 0's story."""
    if not d.is_main:
        root = logging.getLogger()
        root.setLevel(max(root.level, logging.WARNING))


def adopt_run_dir(d: Dist, run_dir: Path) -> Path:
    """Rank 0's run dir, on every rank: Hydra names the default dir after the second a rank
    started. A rank with another moves its log file into rank 0's dir and removes its own if
    that holds nothing but Hydra's files."""
    main_dir = Path(broadcast(str(run_dir)))
    if d.is_main or main_dir.resolve() == run_dir.resolve():
        return main_dir
    root = logging.getLogger()
    own = run_dir.resolve()
    names = {".hydra"}
    for handler in list(root.handlers):
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).parent == own:
            name = Path(handler.baseFilename).name
            names.add(name)
            root.removeHandler(handler)
            handler.close()
            moved = logging.FileHandler(main_dir / name)
            moved.setFormatter(handler.formatter)
            moved.setLevel(handler.level)
            root.addHandler(moved)
    hydra_files = {"config.yaml", "hydra.yaml", "overrides.yaml"}
    made_by_hydra = run_dir.is_dir() and all(
        p.name in names and (p.name != ".hydra" or {q.name for q in p.iterdir()} <= hydra_files)
        for p in run_dir.iterdir()
    )
    if made_by_hydra:
        shutil.rmtree(run_dir, ignore_errors=True)
    return main_dir


class NullWriter:
    """Stands in for TensorBoard's ``SummaryWriter`` on ranks that write nothing: each of its
    methods does nothing."""

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: None
