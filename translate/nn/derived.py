"""Inference copies of parameters in the layout a decoding step reads fastest.

A cached decoding step multiplies a few rows by each weight matrix, so it is bound by reading
the weights and by the number of operators, not by arithmetic. Two layouts help there: the tied
output table as a contiguous ``(D, V)`` matrix (:class:`~translate.nn.model.TokenEmbedding`)
and self-attention's three projections as one ``(3D, D)`` matrix, one GEMM where there were
three (:class:`~translate.nn.attention.MultiHeadAttention`). Both give the same numbers as the
parameters they copy (docs/benchmarks.md); only decoding steps without autograd use them.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


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
    """Whether a decoding step may read derived copies of ``weight``: only without autograd,
    since gradients must reach the parameters themselves."""
    return not (torch.is_grad_enabled() and weight.requires_grad)


def transposed(weight: Tensor) -> Tensor:
    """A contiguous copy of ``weight (N, K)`` transposed: ``(K, N)``."""
    return weight.t().contiguous()


def stacked(*tensors: Tensor | None) -> Tensor | None:
    """Tensors stacked along their first dimension (projections' weights or biases, into one
    projection's); None if they are None (projections without bias)."""
    return None if tensors[0] is None else torch.cat(tensors, dim=0)
