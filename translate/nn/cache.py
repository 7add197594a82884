"""The keys and values one attention module keeps between incremental decoding steps.

Only the key/value heads are stored: with grouped-query attention (``num_kv_heads < num_heads``)
the cache is ``num_kv_heads / num_heads`` the size of multi-head attention's, which is the
point of sharing K/V heads at decoding time.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass
class AttentionCache:
    """Keys and values kept between decoding steps for one attention module.

    ``static=True`` marks cross-attention: keys/values come from the encoder and are computed
    once. Otherwise new keys/values are appended at every step.
    """

    static: bool = False
    k: Tensor | None = None  # (B, Hkv, S, Dh)
    v: Tensor | None = None  # (B, Hkv, S, Dh)

    @property
    def length(self) -> int:
        return 0 if self.k is None else self.k.size(2)

    @property
    def nbytes(self) -> int:
        """Bytes held by the cached keys and values (0 before the first step)."""
        if self.k is None:
            return 0
        return self.k.numel() * self.k.element_size() + self.v.numel() * self.v.element_size()

    def reorder(self, index: Tensor) -> None:
        """Keep the batch rows (beams) given by ``index`` ``(B',)``, in that order."""
        if self.k is not None:
            self.k = self.k.index_select(0, index)
            self.v = self.v.index_select(0, index)
