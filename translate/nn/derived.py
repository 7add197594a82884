"""Inference copies of parameters in the layout a decoding step reads fastest.

A cached decoding step multiplies a few rows by each weight matrix, so it is bound by reading
the weights and by the number of operators, not by arithmetic. Two things help there:

* Weights stored ``(in, out)``, contiguous: a GEMM of a few rows by a ``(out, in)`` weight read
  through a transposed view (``F.linear``'s layout) takes 1.3-1.9 times as long on the CPU
  (docs/benchmarks.md). :class:`Linear` and the tied output table
  (:class:`~translate.nn.model.TokenEmbedding`) keep such a copy.
* Self-attention's three projections as one matrix, one GEMM where there were three
  (:class:`~translate.nn.attention.MultiHeadAttention`).

Only computations without autograd read the copies (the output table's, only in cached
decoding steps), and they are rebuilt when a parameter changes. A product through a copy may
differ from ``F.linear``'s in the last bits at a few rows, where the BLAS sums in another order
(measured on this model's four layer shapes: all four differ at 1 and 5 rows, one still at 25
and 60, none from 400 on): the decoding tests compare within a tolerance, and the study models'
test hypotheses stayed byte-identical.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class DerivedWeight:
    """A tensor built from parameters by ``build``, kept until one of them changes.

    The copy is neither a parameter nor a buffer: it is not saved, and it is rebuilt (on the
    next :meth:`get`) when a parameter's storage, version (an optimizer step or ``copy_`` bumps
    it), dtype or device differs from the ones it was built from.
    """

    def __init__(self, build: Callable[..., Tensor]) -> None:
        self._build = build
        self._value: Tensor | None = None
        self._key: tuple | None = None

    def get(self, *params: Tensor | None) -> Tensor:
        """``build(*params)`` (detached), from the cache while the parameters are unchanged."""
        key = tuple(
            None if p is None else (p.data_ptr(), p._version, p.dtype, p.device) for p in params
        )
        if self._key != key:
            with torch.no_grad():
                detached = (None if p is None else p.detach() for p in params)
                self._value, self._key = self._build(*detached), key
        return self._value


def uses_derived(weight: Tensor) -> bool:
    """Whether a computation may read derived copies of ``weight``: only without autograd,
    since gradients must reach the parameters themselves."""
    return not (torch.is_grad_enabled() and weight.requires_grad)


def transposed(*weights: Tensor) -> Tensor:
    """Weights ``(N_i, K)`` stacked along their first dimension and transposed, contiguous:
    ``(K, sum N_i)``, the layout :func:`linear_t` reads."""
    return torch.cat(weights, dim=0).t().contiguous()


def stacked(*tensors: Tensor | None) -> Tensor | None:
    """Tensors stacked along their first dimension (projections' biases, into one projection's);
    None if they are None (projections without bias)."""
    return None if tensors[0] is None else torch.cat(tensors, dim=0)


def linear_t(x: Tensor, weight_t: Tensor, bias: Tensor | None) -> Tensor:
    """``F.linear(x, weight, bias)`` for ``x (..., K)`` from ``weight_t = weight.t()`` stored
    contiguous ``(K, N)``; returns ``(..., N)``. ``F.linear`` multiplies by its weight's
    transpose, which for ``weight_t.t()`` is ``weight_t`` itself: the GEMM reads the
    contiguous copy, and one call does the reshapes and the bias."""
    return F.linear(x, weight_t.t(), bias)


class Linear(nn.Linear):
    """``nn.Linear`` (the same parameters and state dict) that, without autograd, multiplies by
    a contiguous transposed copy of its weight (module docstring)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._weight_t = DerivedWeight(transposed)  # (in, out)

    def forward(self, x: Tensor) -> Tensor:
        if uses_derived(self.weight):
            return linear_t(x, self._weight_t.get(self.weight), self.bias)
        return F.linear(x, self.weight, self.bias)
