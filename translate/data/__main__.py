"""``python -m translate.data data=<source> [overrides]``: load a corpus and report on it, per
split the pairs kept and dropped, subword length statistics and where the tokenizer lives."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import hydra
import numpy as np
from omegaconf import DictConfig

from translate.cli import exit_on_user_error, run_command
from translate.schema import DataSettings
from translate.schema.commands import InspectDataCommand
from translate.settings import command_settings

if TYPE_CHECKING:
    from translate.data.corpus import Corpus


def describe(corpus: Corpus, data: DataSettings, seconds: float | None = None) -> str:
    """The report of ``python -m translate.data``: pairs, kept, dropped and length statistics."""
    tok = corpus.tokenizer
    lines = [
        f"data={data.source}  {corpus.src_lang} -> {corpus.tgt_lang}"
        + (f"  (loaded in {seconds:.1f}s)" if seconds is not None else ""),
        f"tokenizer: {corpus.tokenizer_path}  ({data.tokenizer.model_type}, "
        f"{tok.vocab_size} pieces)",
        "lengths: subword tokens of the kept pairs, without EOS/BOS: mean / p50 / p95 / max",
        f"{'role':<6} {'split':<18} {'pairs':>8} {'kept':>8} {'dropped':>8}  "
        f"{'src length':<24} {'tgt length':<24}",
    ]
    for role, split in corpus.splits.items():
        lines.append(
            f"{role:<6} {split.name:<18} {split.num_raw:>8} {len(split):>8} "
            f"{split.num_raw - len(split):>8}  {_stats(split.src_lens - 1):<24} "
            f"{_stats(split.tgt_lens - 1):<24}"
        )
        if split.filtered:
            why = ", ".join(f"{reason} {n}" for reason, n in split.dropped.items())
            lines.append(f"{'':<6} dropped: {why}")
        else:
            limits = data.filter
            over = int(
                (split.src_lens > (limits.max_src_len or np.inf)).sum()
                + (split.tgt_lens > (limits.max_tgt_len or np.inf)).sum()
            )
            lines.append(f"{'':<6} not filtered (data.filter.roles); sides over max_*_len: {over}")
    return "\n".join(lines)


def _stats(lengths: np.ndarray) -> str:
    if len(lengths) == 0:
        return "-"
    p50, p95 = np.percentile(lengths, [50, 95], method="higher")
    return f"{lengths.mean():.1f} / {p50} / {p95} / {lengths.max()}"


@hydra.main(version_base="1.3", config_path="../../conf", config_name="inspect_data")
@exit_on_user_error
def main(cfg: DictConfig) -> None:
    data = command_settings(InspectDataCommand, cfg).data
    from translate.data.corpus import load_corpus

    start = time.perf_counter()
    corpus = load_corpus(data)
    print(describe(corpus, data, time.perf_counter() - start))


if __name__ == "__main__":
    run_command(main, "inspect_data")
