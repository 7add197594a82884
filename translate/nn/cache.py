"""The keys and values (of the K/V heads) one attention module keeps between decoding steps.

Beam search reorders the self-attention rows at every step; the reordering is kept pending and
done by the next append, which gathers the history straight into the new, one step longer
tensor: one copy per step, not a gather and a concatenation. A buffer with room for later steps
would save greedy search its copy, but CPU attention kernels read a slice of it (strided over
the unused room) about as slowly as the copy it saves (docs/benchmarks.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class AttentionCache:
    """``static=True``: cross-attention, stored once (:meth:`store`); else :meth:`append`-ed."""

    static: bool = False
    _k: Tensor | None = None  # (B, Hkv, length, Dh)
    _v: Tensor | None = None  # (B, Hkv, length, Dh)
    _pending: Tensor | None = None  # (B',) rows the next append selects (reorder not yet done)

    @property
    def length(self) -> int:
        return 0 if self._k is None else self._k.size(2)

    @property
    def k(self) -> Tensor | None:
        self._apply_pending()
        return self._k

    @property
    def v(self) -> Tensor | None:
        self._apply_pending()
        return self._v

    @property
    def nbytes(self) -> int:
        if self._k is None:
            return 0
        rows = self._k.size(0) if self._pending is None else self._pending.numel()
        return 2 * rows * self._k[0].numel() * self._k.element_size()

    def store(self, k: Tensor, v: Tensor) -> None:
        self._k, self._v, self._pending = k, v, None

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append this step's ``(B, Hkv, T, Dh)`` to the history (reordered if pending); returns
        the whole history ``(B, Hkv, past + T, Dh)`` each."""
        if self._k is None:
            self._k, self._v = k, v
            return k, v
        if self._pending is None:  # nothing to reorder (greedy search): one concatenation
            self._k, self._v = torch.cat([self._k, k], dim=2), torch.cat([self._v, v], dim=2)
            return self._k, self._v
        past, T = self.length, k.size(2)
        B, Hkv, _, Dh = k.shape
        new_k = k.new_empty(B, Hkv, past + T, Dh)  # (B, Hkv, past + T, Dh)
        new_v = torch.empty_like(new_k)
        self._gather_into(new_k[:, :, :past], new_v[:, :, :past])
        new_k[:, :, past:], new_v[:, :, past:] = k, v
        self._k, self._v, self._pending = new_k, new_v, None
        return new_k, new_v

    def reorder(self, index: Tensor) -> None:
        """Keep the rows (beams) ``index (B',)``: a static cache at once, a self-attention one at
        its next append (or when ``k``/``v`` are read)."""
        if self._k is None:
            return
        if self.static:
            self._k, self._v = self._k.index_select(0, index), self._v.index_select(0, index)
        else:
            self._pending = index if self._pending is None else self._pending.index_select(0, index)

    def _apply_pending(self) -> None:
        if self._pending is not None:
            new_k = self._k.new_empty(self._pending.numel(), *self._k.shape[1:])
            new_v = torch.empty_like(new_k)
            self._gather_into(new_k, new_v)
            self._k, self._v, self._pending = new_k, new_v, None

    def _gather_into(self, out_k: Tensor, out_v: Tensor) -> None:
        if self._k.requires_grad:  # out= has no gradient: gather, then copy
            out_k.copy_(self._k.index_select(0, self._pending))
            out_v.copy_(self._v.index_select(0, self._pending))
        else:  # gathered straight into the new tensor's view: one pass, no temporary
            torch.index_select(self._k, 0, self._pending, out=out_k)
            torch.index_select(self._v, 0, self._pending, out=out_v)
