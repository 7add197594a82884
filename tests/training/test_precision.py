"""The GPU-only training paths, exercised on the CPU: fp16 autocast with loss scaling (skipped
steps lower the scale), bf16 autocast, and ``trainer.compile=true`` against eager.

``resolve_precision`` refuses fp16 on the CPU for users; the tests build the ``Trainer``
directly, which runs the same code a GPU does with ``torch.amp.GradScaler("cpu")``.
"""

from __future__ import annotations

import math
import shutil

import pytest
import torch

from translate.data.batching import collate
from translate.nn.model import Seq2SeqTransformer
from translate.runtime.device import autocast
from translate.schema import ModelSettings, OptimSettings
from translate.training.step import Trainer

CPU = torch.device("cpu")
V = 40


def tiny(seed: int = 0) -> Seq2SeqTransformer:
    torch.manual_seed(seed)
    return ModelSettings(32, 2, 1, 1, 64, 0.0, 0.0, 0.0, "relu", True, "sdpa").build(V, 0)


def make_trainer(precision: str, model=None, compiled=None) -> Trainer:
    optim = OptimSettings(3e-3, [0.9, 0.98], 1e-9, 0.0, 0, 0.0, 0.1, 1.0)
    return Trainer(model or tiny(), optim, CPU, precision, pad_id=0, compiled_model=compiled)


def batch(seed: int = 0, n: int = 6):
    g = torch.Generator().manual_seed(seed)
    return collate(
        [
            (
                i,
                torch.randint(4, V, (5,), generator=g).tolist(),
                torch.randint(4, V, (4,), generator=g).tolist(),
            )
            for i in range(n)
        ]
    )


def weights(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def require_cpu_fp16() -> None:
    """Skip, with PyTorch's reason, where this torch has no fp16 autocast or scaler on the CPU."""
    try:
        scaler = torch.amp.GradScaler("cpu")
        with autocast(CPU, "fp16"):
            logits = tiny()(batch().src, batch().tgt_in, batch().src_padding_mask)
        assert scaler.is_enabled() and logits.dtype == torch.float16
    except (TypeError, RuntimeError, NotImplementedError, AssertionError) as err:
        pytest.skip(
            f"fp16 autocast with a GradScaler is unsupported on the CPU in torch "
            f"{torch.__version__}: {err}"
        )


def test_fp16_skips_an_inf_gradient_step_and_lowers_the_scale():
    require_cpu_fp16()
    trainer = make_trainer("fp16")
    assert trainer.scaler.is_enabled()
    scale = trainer.scaler.get_scale()
    lr = trainer.optimizer.param_groups[0]["lr"]
    before = weights(trainer.model)
    # An overflow in backward, as fp16 gradients of a too-large loss scale produce.
    param = next(trainer.model.parameters())
    hook = param.register_hook(lambda grad: grad * float("inf"))
    result = trainer.step([batch()])
    hook.remove()
    assert result.skipped and math.isfinite(result.loss) and not math.isfinite(result.grad_norm)
    assert all(torch.equal(a, b) for a, b in zip(weights(trainer.model), before))
    assert trainer.scaler.get_scale() == scale * trainer.scaler.get_backoff_factor() < scale
    assert not trainer.optimizer.state  # Adam took no step: no moments, no step count
    assert trainer.optimizer.param_groups[0]["lr"] == lr  # nor did the schedule
    assert all(p.grad is None for p in trainer.model.parameters())  # nothing carried over

    # The next, healthy step trains at the lowered scale.
    result = trainer.step([batch()])
    assert not result.skipped and math.isfinite(result.grad_norm)
    assert any(not torch.equal(a, b) for a, b in zip(weights(trainer.model), before))
    assert trainer.scaler.get_scale() == scale * trainer.scaler.get_backoff_factor()


def test_fp16_nan_gradients_are_skipped_too():
    require_cpu_fp16()
    trainer = make_trainer("fp16")
    scale = trainer.scaler.get_scale()
    before = weights(trainer.model)
    param = list(trainer.model.parameters())[-1]
    hook = param.register_hook(lambda grad: torch.full_like(grad, float("nan")))
    result = trainer.step([batch()])
    hook.remove()
    assert result.skipped
    assert all(torch.equal(a, b) for a, b in zip(weights(trainer.model), before))
    assert trainer.scaler.get_scale() < scale


def test_fp16_steps_train_on_the_cpu():
    require_cpu_fp16()
    trainer = make_trainer("fp16")
    results = [trainer.step([batch()]) for _ in range(6)]
    trained = [r for r in results if not r.skipped]
    assert len(trained) >= 5 and all(math.isfinite(r.loss) for r in trained)
    assert trained[-1].loss < 0.9 * trained[0].loss, [r.loss for r in trained]


def test_bf16_autocast_steps_train():
    trainer = make_trainer("bf16")
    assert not trainer.scaler.is_enabled()  # bf16 has float32's range: no loss scaling
    seen = []
    linear = trainer.model.decoder_layers[0].ffn.fc1
    handle = linear.register_forward_hook(lambda mod, args, out: seen.append(out.dtype))
    before = weights(trainer.model)
    results = [trainer.step([batch()]) for _ in range(5)]
    handle.remove()
    assert seen and set(seen) == {torch.bfloat16}  # the layers really ran under bf16 autocast
    assert not any(r.skipped for r in results)
    assert all(math.isfinite(r.loss) and math.isfinite(r.grad_norm) for r in results)
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())  # master weights
    assert sum(not torch.equal(a, b) for a, b in zip(weights(trainer.model), before)) > 1
    assert results[-1].loss < 0.9 * results[0].loss, [r.loss for r in results]


def _cxx() -> str | None:
    return next((shutil.which(c) for c in ("g++", "c++", "clang++") if shutil.which(c)), None)


@pytest.mark.slow
def test_compiled_model_trains_like_eager():
    """``trainer.compile=true`` (loop.setup: ``torch.compile(model)`` given to the Trainer)."""
    if _cxx() is None:
        pytest.skip("torch.compile's inductor backend needs a C++ compiler (g++/clang++) on CPU")
    eager = make_trainer("32", tiny(seed=4))
    model = tiny(seed=4)
    compiled = make_trainer("32", model, compiled=torch.compile(model))
    counters = torch._dynamo.utils.counters
    counters.clear()
    try:
        for step in range(3):
            b = batch(seed=step)  # other tokens, one shape: no dynamic-shape recompilation
            got, want = compiled.step([b]), eager.step([b])
            assert got.loss == pytest.approx(want.loss, rel=1e-4), step
            assert got.grad_norm == pytest.approx(want.grad_norm, rel=1e-3), step
        assert counters["stats"]["unique_graphs"] >= 1  # the compiled graph really ran
    finally:
        torch._dynamo.reset()
    # The losses of steps 2 and 3 already compare the weights after each update; comparing the
    # weights element by element would not: Adam turns float-rounding noise in near-zero
    # gradients into whole learning-rate-sized steps, so such elements differ by ~lr.
