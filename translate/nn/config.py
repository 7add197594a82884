"""The Transformer's hyperparameters, :class:`TransformerConfig` (as nanoGPT's ``GPTConfig``):
its field defaults are the model's only ones (``conf/model/transformer.yaml`` repeats them,
tests/test_settings.py holds the two equal). :func:`doc` and the range checks live here, at the
bottom of the package, so that every settings group (:mod:`translate.schema`) shares them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

# The feed-forward activations (torch.nn.functional's names) and attention paths a config may
# name; names only: settings are checked without importing torch, so --help answers at once.
ACTIVATIONS = ("relu", "gelu")
IMPLS = ("manual", "sdpa")


@dataclass(frozen=True)
class Check:
    """``--help`` shows ``range``; a value failing ``test`` is refused with ``<key>=<value> must
    be <must>``. None (no limit, or unset) is never tested."""

    range: str
    test: Callable[[Any], bool]
    must: str


positive = Check("> 0", lambda value: value > 0, "> 0")
non_negative = Check(">= 0", lambda value: value >= 0, ">= 0")
fraction = Check("[0, 1)", lambda value: 0 <= value < 1, "in [0, 1)")


def out_of_range(settings) -> tuple[str, Any, Check] | None:
    """``(name, value, check)`` of the first field of ``settings`` that fails its check."""
    for f in fields(settings):
        check, value = f.metadata["check"], getattr(settings, f.name)
        if check is not None and value is not None and not check.test(value):
            return f.name, value, check
    return None


def doc(
    what: str,
    unit: str = "",
    values: str = "",
    key: bool = True,
    check: Check | None = None,
    mechanics: bool = False,
    **kwargs: Any,
) -> Any:
    """A dataclass field with its meaning, unit and range (``check``'s, then ``values``).
    ``key=False``: filled in by a command, no config key; ``mechanics``: how a job runs, not
    what it computes (``translate.settings.mechanics_keys``)."""
    shown = (check.range if check else "") + values
    metadata = {"help": what, "unit": unit, "range": shown, "key": key}
    return field(metadata={**metadata, "check": check, "mechanics": mechanics}, **kwargs)


@dataclass(frozen=True)
class TransformerConfig:
    d_model: int = doc(
        "width of the embeddings, of every attention and of the residual stream",
        "features",
        ", a multiple of model.num_heads",
        check=positive,
        default=512,
    )
    num_heads: int = doc(
        "attention heads of every self- and cross-attention (set it with heads=N)",
        "heads",
        ">= 1, a divisor of model.d_model",
        default=8,
    )
    num_encoder_layers: int = doc("encoder layers", "layers", check=positive, default=2)
    num_decoder_layers: int = doc("decoder layers", "layers", check=positive, default=2)
    d_ff: int = doc(
        "inner width of each feed-forward block", "features", check=positive, default=2048
    )
    dropout: float = doc(
        "dropout on the embeddings and on each sublayer's output",
        "probability",
        check=fraction,
        default=0.1,
    )
    attention_dropout: float = doc(
        "dropout on the attention weights", "probability", check=fraction, default=0.1
    )
    activation_dropout: float = doc(
        "dropout after the feed-forward activation", "probability", check=fraction, default=0.0
    )
    activation: str = doc(
        "the feed-forward activation", "name", " | ".join(ACTIVATIONS), default="relu"
    )
    norm_first: bool = doc(
        "pre-norm (true: LayerNorm before each sublayer) or the original post-norm (false)",
        "flag",
        "true | false",
        default=True,
    )
    attention_impl: str = doc(
        "manual: the hand-written reference path; sdpa: torch's fused "
        "scaled_dot_product_attention (the same function, tested equal)",
        "name",
        " | ".join(IMPLS),
        default="sdpa",
    )
    # None (a config built in code) means num_heads: multi-head.
    num_kv_heads: int | None = doc(
        "key/value heads, each shared by num_heads / num_kv_heads query heads (set it with "
        "kv_heads=N): num_heads is multi-head, 1 multi-query, between grouped-query attention",
        "heads",
        ">= 1, a divisor of model.num_heads",
        default=None,
    )

    def __post_init__(self) -> None:
        if self.num_kv_heads is None:  # so readers always see the number
            object.__setattr__(self, "num_kv_heads", self.num_heads)


def check_heads(embed_dim: int, num_heads: int, num_kv_heads: int) -> None:
    if num_heads < 1:
        raise HeadLayoutError("num_heads", f"num_heads must be >= 1, got {num_heads}")
    if embed_dim % num_heads != 0:
        raise HeadLayoutError(
            "embed_dim",
            f"embed_dim={embed_dim} is not divisible by num_heads={num_heads}; "
            f"choose a head count that divides it",
        )
    if num_kv_heads < 1 or num_heads % num_kv_heads != 0:
        raise HeadLayoutError(
            "num_kv_heads",
            f"num_kv_heads={num_kv_heads} must be >= 1 and divide num_heads={num_heads} "
            f"(1: multi-query, {num_heads}: multi-head, a divisor between: grouped-query)",
        )


class HeadLayoutError(ValueError):
    """``argument``: the one at fault, for a caller that words its own message."""

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(message)
        self.argument = argument
