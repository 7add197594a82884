"""Data-parallel training over the processes ``torchrun`` starts (DistributedDataParallel).

``torchrun --nproc_per_node=N -m translate.train ...`` starts N copies of the training job and
tells each its place through the environment (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``).
:func:`from_env` reads them; a plain ``python -m translate.train`` sees no such variables and
never touches ``torch.distributed``. Under torchrun :func:`init` joins the process group:
``nccl`` with one GPU per process (``cuda:LOCAL_RANK``), ``gloo`` on the CPU.

The division of labour (README "Multi-GPU", docs/scale_out.md):

* every rank trains on its own share of each epoch's token batches (:func:`shard`) and
  :class:`~torch.nn.parallel.DistributedDataParallel` averages the gradients, so N ranks with
  ``accumulate_grad_batches=A`` take exactly the steps of one process with ``A*N``;
* rank 0 alone validates, writes checkpoints, TensorBoard and ``results.json``, shows the
  progress bar and scores the test split; the other ranks log warnings only;
* stop decisions (time budget, signals, early stopping) are agreed on by all ranks, so they
  stop at the same step;
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
# The key of the process group's store where the first rank to fail on a user error leaves
# its rank, message and time (JSON), for the others to read.
FAILED_KEY = "translate/failed"


@dataclass(frozen=True)
class Dist:
    """This process's place among the training processes (one process: rank 0 of 1)."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    # Started by torchrun: DDP even for one process (what a single-GPU torchrun job, and a
    # test of the nccl path, expects). Not part of equality: it follows from the environment.
    torchrun: bool = field(default=False, compare=False)

    @property
    def enabled(self) -> bool:
        """True under torchrun, or whenever several processes train together (DDP); False
        for a plain ``python -m translate.train``."""
        return self.torchrun or self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that evaluates and writes the run's files."""
        return self.rank == 0


def from_env(environ: Mapping[str, str] = os.environ) -> Dist:
    """The rank and world size torchrun exported; a single process when it did not."""
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
    """Join the process group (``nccl`` on CUDA, ``gloo`` on the CPU); the device this rank
    trains on: ``cuda:LOCAL_RANK`` on GPUs, else ``device`` unchanged. No-op for one process."""
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


def shutdown() -> None:
    """Leave the process group, if one was joined (also after an error)."""
    if tdist.is_available() and tdist.is_initialized():
        tdist.destroy_process_group()


@contextlib.contextmanager
def one_cause(d: Dist, active: bool = True) -> Iterator[None]:
    """A torchrun job's body, which leaves the process group at its end: a rank that fails on
    a :class:`UserError` is the one that says so, the others leave without a word.

    Before the failing rank leaves the group (which ends the collective another rank waits in
    with "Connection closed by peer"), it puts its message in the group's store; a rank whose
    own error comes after that exits quietly with :data:`EXIT_PEER_FAILED`. A rank whose user
    error is the one a peer has already said (every rank refuses the same resume) is quiet
    too. Each tells torchrun through its error file (``TORCHELASTIC_ERROR_FILE``), the failing
    rank with the earliest time, so that torchrun's summary names it as the root cause
    whichever process it saw exit first. ``active=False`` (a sweep's job, whose failure the
    sweep reports and outlives) only leaves the group."""
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
        if d.enabled:
            shutdown()


def _say_failed(d: Dist, message: str) -> None:
    """Put this rank's failure in the store, unless a peer's is there; leave quietly when
    that one says the same. The rank that says it is not cut short by the SIGTERM that
    torchrun sends the others once one has exited: it is leaving, with its own exit code."""
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
    """The failure a rank has put in the store; None if none has (or the store is gone)."""
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
    """A time for torchrun's summary after the first failure's (whole seconds, as it reads)."""
    return max(int(time.time()), first["time"] + 1)


def _error_file(message: str, timestamp: int) -> None:
    """The error file torchrun reads for its summary (the format of torch's ``record``, with
    ``message`` where the traceback would be)."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if path:
        info = {"py_callstack": message, "timestamp": str(timestamp)}
        body = {"message": {"message": message, "extraInfo": info}}
        io.write(path, json.dumps(body), "torchrun error file")


def wrap(model: nn.Module, device: torch.device) -> nn.parallel.DistributedDataParallel:
    """``model`` in DDP: parameters broadcast from rank 0, gradients averaged in backward.

    Buffers are not re-broadcast every forward (the model's only buffers are constant
    positional encodings), so rank 0 can validate on the bare model between steps.
    """
    ddp = nn.parallel.DistributedDataParallel
    # torch >= 2.13 renamed the switch (and still syncs buffers once, at construction)
    renamed = "forward_sync_buffers" in inspect.signature(ddp.__init__).parameters
    no_buffer_sync = {"forward_sync_buffers" if renamed else "broadcast_buffers": False}
    ids = [device.index] if device.type == "cuda" else None
    return ddp(model, device_ids=ids, output_device=ids[0] if ids else None, **no_buffer_sync)


def shard(order: Sequence[T], rank: int, world_size: int) -> list[T]:
    """Rank ``rank``'s share of ``order``: items ``rank, rank + N, rank + 2N, ...`` of the
    first ``N * (len(order) // N)`` (the ragged tail is dropped, so every rank takes the same
    number of steps). The shares are disjoint, and for ``world_size=1`` the whole list."""
    usable = len(order) - len(order) % world_size
    return list(order[rank:usable:world_size])


@contextlib.contextmanager
def main_first(d: Dist) -> Iterator[None]:
    """Rank 0 runs the body first (e.g. builds the tokenizer and data caches), the other ranks
    after it (and find the caches built). They wait at a barrier of a gloo group of their own
    with :data:`BUILD_TIMEOUT`, not the process group's :data:`TIMEOUT`, which a long build
    could outlast; the wait is logged. No-op for one process."""
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
    """The end of a run: rank 0 scores the test split in the body while the other ranks, done,
    wait for it at a barrier (of a gloo group with :data:`BUILD_TIMEOUT`), so that all of them
    leave the process group together. A rank that tore the group down while rank 0 was still
    saving its last checkpoint died now and then with "terminate called without an active
    exception" (SIGABRT; 1 torchrun run in 30 on a loaded 2-core machine), and torchrun then
    stopped rank 0 in the middle of scoring. If the body raises on rank 0, no barrier: rank 0
    leaves the group with its error, which ends the others' wait (:func:`one_cause`). No-op
    for one process."""
    if not d.enabled:
        yield
        return
    group = tdist.new_group(backend="gloo", timeout=BUILD_TIMEOUT)
    yield
    tdist.barrier(group=group)
    tdist.destroy_process_group(group)


def _device_of_group() -> torch.device:
    if tdist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def max_all(values: Sequence[float]) -> list[float]:
    """Element-wise maximum of ``values`` over the ranks (each rank passes the same length)."""
    t = torch.tensor(list(values), dtype=torch.float64, device=_device_of_group())
    tdist.all_reduce(t, op=tdist.ReduceOp.MAX)
    return t.tolist()


def broadcast(obj: T) -> T:
    """Rank 0's ``obj`` on every rank (any picklable object)."""
    box = [obj]
    tdist.broadcast_object_list(box, src=0)
    return box[0]


def gather(obj: T) -> list[T]:
    """Every rank's ``obj``, in rank order, on every rank."""
    out: list = [None] * tdist.get_world_size()
    tdist.all_gather_object(out, obj)
    return out


def quiet_other_ranks(d: Dist) -> None:
    """Ranks other than 0 log warnings and errors only (loggers given their own level, e.g. by
    ``hydra.verbose=translate.training.step``, keep it), so the run's log is rank 0's story."""
    if not d.is_main:
        root = logging.getLogger()
        root.setLevel(max(root.level, logging.WARNING))


def adopt_run_dir(d: Dist, run_dir: Path) -> Path:
    """Rank 0's run dir, on every rank.

    Each rank runs Hydra, which names the default run dir after the second it started; ranks
    that started a second later would otherwise get a dir of their own. Such a rank moves its
    log file into rank 0's dir and removes the dir Hydra made for it, if that holds nothing
    but Hydra's own files.
    """
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
    """Stands in for TensorBoard's ``SummaryWriter`` on ranks that write nothing."""

    def add_scalar(self, *args, **kwargs) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass
