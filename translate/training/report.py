"""The end of a training run: score its best checkpoint on the test split, measure latency,
summarise its heads, and write ``test.hyp.txt``, ``test.ref.txt`` and ``results.json``.
With ``trainer.average_last_n=N`` the last N ``step_*.pt`` are first averaged into
``checkpoints/averaged.pt``, which is scored instead if its dev BLEU is higher."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import yaml

from translate import io
from translate.analysis.figures import log_hparams
from translate.analysis.heads import head_summary
from translate.checkpoint import load_checkpoint
from translate.errors import UserError
from translate.metrics import score
from translate.nn.model import count_parameters
from translate.runtime.device import device_name, precision_reason
from translate.runtime.memory import peak_memory_mb
from translate.runtime.provenance import provenance
from translate.training.averaging import around, average_into, step_checkpoints
from translate.training.loop import dev_scores
from translate.training.run import Run
from translate.training.rundir import parse_overrides

log = logging.getLogger(__name__)


@dataclass
class Scored:
    name: str  # "best", "averaged", or "last" (no best.pt: the run never validated)
    path: Path
    averaged_dev_bleu: float | None = None  # None: averaging off or skipped
    averaged_from: list[str] | None = None


def _write(run: Run, name: str, text: str, kind: str) -> None:
    """A result file: under the run dir's lock, after a resume found every checkpoint there this
    experiment's, an earlier scoring's file (marked or not) is this run's to replace."""
    io.write(run.run_dir / name, text, kind, adopt=True)


def finish_run(run: Run) -> dict:
    """Score the best (or the averaged) checkpoint on the test split and write the results."""
    t, search = run.settings.trainer, run.settings.decode.search
    train_peak_mb = peak_memory_mb(run.trainer.device)  # before decoding adds its own peak
    scored = _choose_checkpoint(run)
    test = run.corpus.splits["test"]
    log.info("decoding %d test sentences (%s, %s)", len(test.src_ids), test.name, search)
    hyp_ids, sentences_per_s = run.translator.timed_translate_ids(
        test.src_ids, progress=t.progress_bar
    )
    hyps = run.corpus.tokenizer.decode(hyp_ids)
    scores = score(hyps, test.tgt_text)
    scores["bleu_greedy"] = _greedy_bleu(run) if run.settings.decode.beam_size > 1 else None
    _write(run, "test.hyp.txt", "".join(h + "\n" for h in hyps), "test hypotheses")
    _write(run, "test.ref.txt", "".join(r + "\n" for r in test.tgt_text), "test references")
    speed = {
        "peak_mem_mb": train_peak_mb,
        "latency_ms": run.translator.latency_ms(test.src_ids[: t.latency_sentences]),
        "latency_sentences": min(t.latency_sentences, len(test.src_ids)),
        "sentences_per_s": sentences_per_s,
    }
    results = _results(run, scores, speed, _heads(run), scored)
    _write(run, "results.json", json.dumps(results, indent=2) + "\n", "run results")
    _log_hparams(run, results)
    run.writer.close()
    log.info(
        "test BLEU %.2f, chrF %.2f (%s, %s) | %s",
        scores["bleu"],
        scores["chrf"],
        test.name,
        search,
        scores["bleu_signature"],
    )
    log.info(
        "latency %.1f ms/sentence (batch 1), %.1f sentences/s", speed["latency_ms"], sentences_per_s
    )
    log.info(
        "results: %s (hypotheses: test.hyp.txt, checkpoints: checkpoints/, TensorBoard: "
        "tensorboard/ beside it)",
        run.run_dir / "results.json",
    )
    return results


def _greedy_bleu(run: Run) -> float:
    test = run.corpus.splits["test"]
    hyps = run.corpus.tokenizer.decode(run.translator.translate_ids(test.src_ids, beam_size=1))
    bleu = score(hyps, test.tgt_text)["bleu"]
    log.info("test BLEU %.2f with greedy decoding", bleu)
    return bleu


def _choose_checkpoint(run: Run) -> Scored:
    """Load into the model the weights the test split is scored with."""
    best = run.ckpts.best if run.ckpts.best.is_file() else run.ckpts.last
    scored = Scored("best" if best == run.ckpts.best else "last", best)
    averaged = _average_last(run)
    if averaged is not None:
        p = run.progress
        better = averaged.averaged_dev_bleu > p.best_dev_bleu
        log.info(
            "dev BLEU: averaged.pt %.2f, %s (step %d) %.2f -> the test split is scored with %s",
            averaged.averaged_dev_bleu,
            best.name,
            p.best_step,
            p.best_dev_bleu,
            "averaged.pt" if better else best.name,
        )
        if better:
            return averaged  # its weights are in the model already
        scored.averaged_dev_bleu = averaged.averaged_dev_bleu
        scored.averaged_from = averaged.averaged_from
    if best.is_file():
        run.model.load_state_dict(load_checkpoint(best, map_location=run.trainer.device)["model"])
    return scored


def _average_last(run: Run) -> Scored | None:
    """averaged.pt, loaded into the model and scored on the dev prefix; None: off or too few."""
    t, best = run.settings.trainer, run.progress.best_step
    n = t.average_last_n
    if not n:
        return None
    files = step_checkpoints(run.ckpts.directory)
    paths = files[-n:]
    window = around(files, best, n) if t.average_around_best else []
    if window and not around(paths, best, n):
        paths = window
        log.info(
            "the newest %d step checkpoints come after best.pt's (step %d, dev BLEU %.2f): "
            "averaging the ones around it (trainer.average_around_best)",
            n,
            best,
            run.progress.best_dev_bleu,
        )
    if len(paths) < 2:
        log.info(
            "trainer.average_last_n=%d: %d step checkpoint(s) in %s, nothing to average",
            n,
            len(paths),
            run.ckpts.directory,
        )
        return None
    if len(paths) < n:
        log.info("trainer.average_last_n=%d: only %d step checkpoints to average", n, len(paths))
    output = run.ckpts.directory / "averaged.pt"
    try:
        averaged = average_into(paths, output)
    except UserError as err:  # e.g. a diverged input: the run's best.pt is still scored
        log.warning("not averaged: %s", err)
        return None
    run.model.load_state_dict(averaged["model"])
    bleu = dev_scores(run)["bleu"]  # as validation measures it
    run.writer.add_scalar("dev/bleu_averaged", bleu, run.progress.step)
    names = [path.name for path in paths]
    log.info("averaged %s into %s", ", ".join(names), output)
    return Scored("averaged", output, bleu, names)


def _heads(run: Run) -> dict | None:
    """What the heads learned, cheaply (one teacher-forced pass over a dev prefix)."""
    analysis = run.settings.analysis
    if not analysis.summary_sentences:
        return None
    summary = head_summary(
        run.model,
        run.corpus.splits["valid"],
        run.trainer.device,
        run.trainer.precision,
        analysis,
        run.corpus.eval_max_len,
        run.corpus.eval_max_len,
    )
    step = run.progress.step
    for kind, entropy in summary["entropy"].items():
        run.writer.add_scalar(f"heads/entropy_{kind}", entropy, step)
    run.writer.add_scalar("heads/degenerate", summary["degenerate_heads"], step)
    log.info(
        "heads: mean attention entropy %s; %d of %d heads degenerate",
        ", ".join(f"{k} {v:.2f}" for k, v in summary["entropy"].items()),
        summary["degenerate_heads"],
        summary["total_heads"],
    )
    return summary


def _results(run: Run, scores: dict, speed: dict, heads: dict | None, scored: Scored) -> dict:
    m, p, device = run.settings.model, run.progress, run.trainer.device
    test = run.corpus.splits["test"]
    return {
        "status": "completed",
        "heads": m.num_heads,
        "d_k": m.d_model // m.num_heads,
        "kv_heads": m.num_kv_heads,  # = heads for multi-head attention
        "d_model": m.d_model,
        "layers": {"encoder": m.num_encoder_layers, "decoder": m.num_decoder_layers},
        "params": count_parameters(run.model),
        "attention_impl": m.attention_impl,
        "precision": run.trainer.precision,
        "precision_reason": precision_reason(
            run.settings.runtime.precision, run.trainer.precision, device
        ),
        "device": device_name(device),
        "seed": run.settings.seed,
        "steps": p.step,
        "skipped_nonfinite_updates": p.skipped_updates,  # not in steps: nothing was learnt
        "epochs_completed": p.epoch,
        "train_minutes": p.train_seconds / 60,
        # [from, to] steps of optim.cooldown_patience's cooldown; None: it did not start early
        "early_cooldown": None if p.cooldown_to is None else [p.cooldown_from, p.cooldown_to],
        "tokens_per_s": p.tokens / max(p.train_seconds, 1e-9),
        "dev_bleu": p.best_dev_bleu,  # best.pt's
        "best_step": p.best_step,
        "averaged_dev_bleu": scored.averaged_dev_bleu,
        "averaged_from": scored.averaged_from,
        "scored_checkpoint": scored.name,
        "test_split": test.name,
        "bleu": scores["bleu"],
        "bleu_greedy": scores["bleu_greedy"],  # None when the beam is greedy (beam_size 1)
        "chrf": scores["chrf"],
        "sacrebleu_signature": scores["bleu_signature"],
        "chrf_signature": scores["chrf_signature"],
        "beam_size": run.settings.decode.beam_size,
        **speed,
        "head_summary": heads,
        "checkpoint": str(scored.path),
        "hypotheses": str(run.run_dir / "test.hyp.txt"),
        "provenance": provenance(device),  # the code, torch, CPU and command that made these
    }


# Always among the first columns of the HParams table, swept or not: what the study varies.
LEADING_HPARAMS = ("heads", "kv_heads", "seed")


def _log_hparams(run: Run, results: dict) -> None:
    """This run's HParams row: the keys its sweep varies, heads, kv_heads and seed first."""
    s, m = run.settings, run.settings.model
    swept, spec = swept_overrides(run.run_dir)
    # Integers (heads, kv_heads, seed...) go in as ints; TensorBoard still prints every number
    # with 5 digits (16.000): the row name below shows them as written.
    hparams = {
        **{k: _scalar(v) for k, v in swept.items()},
        "heads": m.num_heads,
        "kv_heads": m.num_kv_heads,
        "d_model": m.d_model,
        "d_ff": m.d_ff,
        "encoder_layers": m.num_encoder_layers,
        "decoder_layers": m.num_decoder_layers,
        "attention_impl": m.attention_impl,
        "precision": results["precision"],
        "seed": s.seed,
        "lr": s.optim.lr,
        "beam_size": s.decode.beam_size,
    }
    metrics = {
        "hparam/test_bleu": results["bleu"],
        "hparam/dev_bleu": results["dev_bleu"],
        "hparam/latency_ms": results["latency_ms"],
    }
    # The table shows a row's first dozen characters: what was swept, then whose sweep it is.
    name = ",".join(f"{k}={_sortable(v, spec.get(k, ''))}" for k, v in swept.items())
    trial = f"{name or s.sweep_job} · {run.run_dir.parent}" if s.sweep_job else ""
    log_hparams(run.writer, hparams, metrics, {*LEADING_HPARAMS, *swept}, trial)


def _sortable(value: str, spec: str) -> str:
    """An integer zero-padded to the widest of its sweep's values (``heads=1,4,8,16``: 01, 04,
    08, 16): TensorBoard sorts the rows by name, as text."""
    width = max((len(v) for v in spec.split(",") if v.isdigit()), default=0)
    return value.zfill(width) if value.isdigit() else value


def swept_overrides(run_dir: Path) -> tuple[dict[str, str], dict[str, str]]:
    """``({key: value}, {key: the sweep's value})`` of the job's overrides (``.hydra/``) that its
    sweep (``multirun.yaml``) varies, as ``heads=1,4,8,16``; empty for a single run."""
    try:
        job = parse_overrides(yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text()))
        sweep = yaml.safe_load((run_dir.parent / "multirun.yaml").read_text())
        shared = parse_overrides(sweep["hydra"]["overrides"]["task"])
    except (OSError, yaml.YAMLError, KeyError, TypeError):  # not a sweep job Hydra launched
        return {}, {}
    swept = {k: v for k, v in job.items() if k not in shared or _value(shared[k]) != _value(v)}
    return swept, {k: shared[k] for k in swept if k in shared}


def _scalar(text: str):
    """An override's value as an HParams value: a number or boolean as such, else the text."""
    value = _value(text)
    return value if isinstance(value, (int, float, str, bool)) else text


def _value(text: str):
    """An override's value as YAML reads it: Hydra writes a job's ``false`` as ``False``."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text
