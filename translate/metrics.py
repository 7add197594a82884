"""Scores: sacreBLEU BLEU and chrF with signatures, and the paired bootstrap.

Everything is scored on detokenized text with sacreBLEU's defaults (BLEU: ``13a`` tokenization,
exponential smoothing, mixed case; chrF: character 6-grams, beta 2), so the numbers are
comparable with published ones and the signature says exactly how they were computed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest


def _check_lengths(references: list[str], **systems: list[str]) -> None:
    if not references:
        raise ValueError("no references to score against")
    for name, hyps in systems.items():
        if len(hyps) != len(references):
            raise ValueError(
                f"{name} has {len(hyps)} lines but there are {len(references)} references; "
                f"hypotheses and references must be aligned line by line"
            )


def score(hypotheses: list[str], references: list[str]) -> dict:
    """Corpus BLEU and chrF (0-100) of detokenized ``hypotheses`` against one reference each,
    with sacreBLEU's signatures (``nrefs:1|case:mixed|...|tok:13a|...``)."""
    _check_lengths(references, hypotheses=hypotheses)
    bleu, chrf = BLEU(), CHRF()
    return {
        "bleu": bleu.corpus_score(hypotheses, [references]).score,
        "chrf": chrf.corpus_score(hypotheses, [references]).score,
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }


@contextmanager
def _sacrebleu_test(seed: int) -> Iterator[None]:
    """One sacreBLEU significance test's seed (read from ``SACREBLEU_SEED`` only), its INFO
    lines muted (three per test; the ablation report runs one per job)."""
    previous = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    logger = logging.getLogger("sacrebleu")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)
        if previous is None:
            del os.environ["SACREBLEU_SEED"]
        else:
            os.environ["SACREBLEU_SEED"] = previous


def _same_bleu_statistics(a: list[str], b: list[str], references: list[str]) -> bool:
    bleu = BLEU(effective_order=True)  # only for sentence_score's statistics; no warning
    for hyp_a, hyp_b, ref in zip(a, b, references):
        if hyp_a != hyp_b:
            sa, sb = bleu.sentence_score(hyp_a, [ref]), bleu.sentence_score(hyp_b, [ref])
            if (sa.counts, sa.totals, sa.sys_len) != (sb.counts, sb.totals, sb.sys_len):
                return False
    return True


def paired_bootstrap(
    baseline: list[str],
    systems: dict[str, list[str]],
    references: list[str],
    n_samples: int = 1000,
    seed: int = 12345,
) -> dict[str, dict]:
    """BLEU of each of ``systems`` (name -> hypotheses) against ``baseline``: the p-value of
    ``sacrebleu --paired-bs`` (Koehn 2004) over ``n_samples`` resamples, and the mean and 95%
    half-width of the resampled BLEU. Where a system's BLEU statistics equal the baseline's on
    every sentence, sacreBLEU's strict ``>`` gives ``p = 1 / (n_samples + 1)``, "significant":
    there is no difference to test, so ``p = 1.0``.
    """
    _check_lengths(references, baseline=baseline, **systems)
    if seed < 1:
        raise ValueError(f"seed must be >= 1 (sacreBLEU ignores a seed of 0), got {seed}")
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}")
    if not systems:
        return {}
    names = list(systems)
    named = [("baseline", baseline)] + [(f"system {i}", systems[n]) for i, n in enumerate(names)]
    with _sacrebleu_test(seed):
        test = PairedTest(named, {"BLEU": BLEU()}, [references], "bs", n_samples)
        signatures, results = test()
    (metric,) = signatures  # "BLEU"
    baseline_result, *system_results = results[metric]
    report = {}
    for name, result in zip(names, system_results):
        identical = _same_bleu_statistics(systems[name], baseline, references)
        report[name] = {
            "bleu": float(result.score),
            "baseline_bleu": float(baseline_result.score),
            "p_value": 1.0 if identical else float(result.p_value),
            "bleu_mean": float(result.mean),
            "bleu_ci95": float(result.ci),
            "signature": str(signatures[metric]),
        }
    return report
