"""Same code, same CPU, same thread count and a step budget train bit-identical weights
(docs/training.md, "Reproducibility"); ``trainer.deterministic=true`` turns on torch's deterministic
kernels, leaves CPU training as it was, is switched off again for the next job of a multirun,
and an operation without such a kernel stops the run in one line naming the setting."""

from __future__ import annotations

import pytest
import torch
from conftest import SHORT_DECODE, short_config

from translate.checkpoint import load_checkpoint
from translate.errors import UserError
from translate.runtime.rng import refuse_nondeterministic
from translate.train import train

# Dropout, so that the random draws must repeat too; one validation, at the end; short decodes
# (an untrained model decodes to the length limit).
RECIPE = [
    "model.dropout=0.1",
    "trainer.val_every_n_steps=4",
    "trainer.latency_sentences=1",
    *SHORT_DECODE,
]


@pytest.fixture(autouse=True)
def torch_globals():
    """Threads and the deterministic flag are process-wide: restored for the next test."""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic)


def _tensors(tree, path: str = "") -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint by its path: weights, optimizer moments, RNG states."""
    if isinstance(tree, torch.Tensor):
        return {path: tree}
    if not isinstance(tree, dict | list | tuple):
        return {}
    items = tree.items() if isinstance(tree, dict) else enumerate(tree)
    out = {}
    for key, value in items:
        out.update(_tensors(value, f"{path}/{key}"))
    return out


def _trained(tmp_path, cache_dir, name: str, *overrides: str) -> dict[str, torch.Tensor]:
    run = tmp_path / name
    train(short_config(run, cache_dir, *RECIPE, *overrides))
    return _tensors(load_checkpoint(run / "checkpoints" / "last.pt"))


def _differing(a: dict, b: dict) -> list[str]:
    assert a.keys() == b.keys() and any(k.startswith("/model/") for k in a)
    return [k for k in a if a[k].dtype != b[k].dtype or not torch.equal(a[k], b[k])]


@pytest.mark.parametrize("threads", [1, 2])
def test_the_same_run_twice_trains_bit_identical_weights(tmp_path, cache_dir, threads):
    # 2 updates (Adam's moments and dropout's draws after more than one), validated at the
    # end, and without the heads' summary after training (a pass over 200 dev pairs with
    # attention maps), which leaves the weights alone: at 2 threads beside the other xdist
    # worker each update took a second, the summary a fifth of the test.
    settings = [f"runtime.num_threads={threads}", "analysis.summary_sentences=0"]
    settings += ["trainer.max_steps=2", "trainer.val_every_n_steps=2"]
    first = _trained(tmp_path, cache_dir, "a", *settings)
    again = _trained(tmp_path, cache_dir, "b", *settings)
    assert _differing(first, again) == []


def test_deterministic_kernels_change_nothing_on_the_cpu_and_end_with_the_job(tmp_path, cache_dir):
    strict = _trained(tmp_path, cache_dir, "strict", "trainer.deterministic=true")
    assert torch.are_deterministic_algorithms_enabled()
    plain = _trained(tmp_path, cache_dir, "plain")  # the next job of a multirun, say
    assert not torch.are_deterministic_algorithms_enabled()
    assert _differing(strict, plain) == []


def _without_a_deterministic_kernel():
    """put_ without accumulating: with repeated indices, which write lands last is not fixed,
    so torch refuses it on the CPU under use_deterministic_algorithms."""
    torch.zeros(3).put_(torch.tensor([0, 0]), torch.tensor([1.0, 2.0]))


def test_an_operation_without_a_deterministic_kernel_is_one_line_naming_the_setting(
    tmp_path, cache_dir, monkeypatch
):
    monkeypatch.setattr(
        "translate.training.loop.fit", lambda run: _without_a_deterministic_kernel()
    )
    with pytest.raises(UserError) as err:
        train(short_config(tmp_path / "run", cache_dir, "trainer.deterministic=true"))
    message = str(err.value)
    assert message.startswith("trainer.deterministic=true, but ") and "\n" not in message
    assert "put_" in message and message.endswith("set trainer.deterministic=false to run it")
    torch.use_deterministic_algorithms(False)
    _without_a_deterministic_kernel()  # torch's default kernel runs it
    refuse_nondeterministic(RuntimeError("shapes do not match"))  # other errors pass on
