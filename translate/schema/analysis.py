"""The ``analysis`` group: per-head diagnostics (translate.analyze, the end of training)."""

from __future__ import annotations

from dataclasses import dataclass

from translate.errors import UserError
from translate.nn.config import doc, non_negative, positive


@dataclass(frozen=True)
class DegenerateThresholds:
    """When a head counts as degenerate (``conf/analysis/default.yaml`` explains each value)."""

    uniform_entropy: float = doc(
        "near-uniform above this mean normalised entropy H / log(visible keys)",
        "fraction",
        "[0, 1]; 1 = a perfectly even spread",
    )
    position_fraction: float = doc(
        "positional when the argmax lands on one fixed place (a relative offset, the first or "
        "the last key) on at least this share of queries ...",
        "fraction",
        "[0, 1]",
    )
    max_weight: float = doc(
        "... and the mean top weight is at least this", "attention weight", "[0, 1]"
    )
    max_offset: int = doc(
        "the relative offsets a self-attention head is tested for, -max_offset to +max_offset",
        "tokens",
        check=non_negative,
    )


@dataclass(frozen=True)
class ImportanceSettings:
    metric: str = doc(
        "what orders the heads for pruning: the dev loss increase or the dev BLEU drop when a "
        "head alone is masked",
        "name",
        "loss | bleu (needs bleu_sentences > 0)",
    )
    bleu_sentences: int = doc(
        "also measure each head's BLEU drop on this many dev sentences (one decode per head)",
        "sentences",
        "; 0 = off",
        check=non_negative,
    )

    def validate(self) -> None:
        if self.metric not in ("loss", "bleu") or (
            self.metric == "bleu" and not self.bleu_sentences
        ):
            raise UserError(
                f"analysis.importance.metric={self.metric}: use loss, or bleu with "
                "analysis.importance.bleu_sentences > 0"
            )


@dataclass(frozen=True)
class PruningSettings:
    bleu_sentences: int = doc(
        "dev sentences decoded at each step of the pruning curve", "sentences", check=non_negative
    )
    fractions: list = doc(
        "the shares of all heads kept, least important masked first", "fractions", "each in [0, 1]"
    )


@dataclass(frozen=True)
class AnalysisSettings:
    max_sentences: int | None = doc(
        "dev sentences translate.analyze measures: a fixed prefix of the split, so that models "
        "are compared on the same sentences",
        "sentences",
        "; null = the whole split",
        check=positive,
    )
    summary_sentences: int = doc(
        "dev sentences of the head summary at the end of training (entropy and degenerate heads)",
        "sentences",
        "; 0 = no summary",
        check=non_negative,
    )
    max_tokens: int = doc("padded tokens per teacher-forced batch", "tokens", check=positive)
    degenerate: DegenerateThresholds = doc("when a head counts as degenerate")
    importance: ImportanceSettings = doc(
        "how much worse the model gets when a head alone is masked (Michel et al. 2019)"
    )
    pruning: PruningSettings = doc("the BLEU curve as heads are masked")
    beam_size: int = doc(
        "beam of the importance and pruning BLEU", "hypotheses", "; 1 = greedy", check=positive
    )
    heatmap_sentences: int = doc(
        "dev sentences drawn per layer as attention heatmaps", "sentences", check=non_negative
    )
    alignments: str | None = doc(
        "gold word alignments of the analysed pairs: one Pharaoh line per pair, 0-based i-j "
        "(sure) and i?j (possible) over the whitespace words of source and reference",
        "file",
        "; null = silver alignments from eflomal (docs/alignment.md)",
    )
    silver_train_pairs: int = doc(
        "training pairs the eflomal aligner learns silver alignments from, beside the analysed "
        "pairs",
        "pairs",
        "; 0 = no silver alignments: AER only with a gold file",
        check=non_negative,
    )
