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
    """Corpus BLEU and chrF of detokenized ``hypotheses`` against one reference each.

    Returns:
        ``{"bleu", "chrf", "bleu_signature", "chrf_signature"}``; scores on sacreBLEU's 0-100
        scale, signatures as sacreBLEU prints them (e.g. ``nrefs:1|case:mixed|...|tok:13a|...``).
    """
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
    """The surroundings of one sacreBLEU significance test. Its tests read their seed from
    ``SACREBLEU_SEED`` only: set for the call. Its INFO lines ("Pre-computing BLEU statistics
    ...", three per test) are muted meanwhile: the ablation report runs one test per job, so
    they buried the report's own lines."""
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
    """Whether every sentence of ``a`` and ``b`` has the same BLEU sufficient statistics."""
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
    """BLEU of each system against ``baseline``, with sacreBLEU's paired bootstrap p-value.

    This is ``sacrebleu --paired-bs`` (:class:`sacrebleu.significance.PairedTest`, which
    follows Koehn 2004 and Moses' ``bootstrap-hypothesis-difference-significance.pl``): the
    same ``n_samples`` resamples of sentence indices for every system, sufficient statistics
    summed per resample, and ``p = (c + 1) / (n_samples + 1)`` where ``c`` counts resamples whose
    centred absolute BLEU difference exceeds the observed one. Small p: the difference is
    unlikely under "the two systems are equally good".

    One correction: when the system's BLEU statistics equal the baseline's on every sentence
    (e.g. identical output), every resampled difference is 0, sacreBLEU's strict ``>`` gives
    ``c = 0`` and so ``p = 1 / (n_samples + 1)`` - "significant". There is no difference to
    test; we report ``p = 1.0``.

    Args:
        baseline: the reference system's hypotheses (the 8-head model in the ablation).
        systems: name -> hypotheses, each aligned with ``references``.
        n_samples: bootstrap resamples. seed: resampling seed (>= 1; sacreBLEU treats 0 as
            "unseeded").

    Returns:
        name -> ``{"bleu", "baseline_bleu", "p_value", "bleu_mean", "bleu_ci95", "signature"}``;
        ``bleu_mean`` and ``bleu_ci95`` (half-width) come from the system's resamples.
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
