"""Score a checkpoint: ``python -m translate.evaluate checkpoint=<path> [src=<file> ref=<file>]``.

Without ``src``/``ref`` the test split of the checkpoint's own data config is scored (override
it with ``data=<source> data.dir=...``). Hypotheses go to ``hyp.txt`` in this command's Hydra
run dir; BLEU, chrF and the sacreBLEU signature are printed and written to ``scores.json``.

:func:`evaluate_run` is the same scoring at the end of every training run (the best
checkpoint on the test split, latency, head summary, ``results.json``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from translate.checkpoint import CheckpointManager, load_checkpoint, restore_model
from translate.config import TrainSettings, decode_settings
from translate.data import Corpus, load_raw_test
from translate.errors import UserError, exit_on_user_error
from translate.heads import head_summary, summary_settings
from translate.inference import Translator
from translate.loop import Progress
from translate.metrics import score
from translate.model import Seq2SeqTransformer, count_parameters
from translate.runtime import peak_memory_mb, resolve_device, resolve_precision
from translate.sources import read_lines
from translate.visualize import log_hparams

log = logging.getLogger(__name__)


def evaluate(cfg: DictConfig) -> dict:
    """Decode and score; returns ``{"bleu", "chrf", "bleu_signature", ...}``."""
    device = resolve_device(cfg.device)
    precision = resolve_precision(cfg.precision, device)
    decode = decode_settings(cfg.decode)
    if cfg.checkpoint is None:
        raise UserError("pass checkpoint=<run_dir>/checkpoints/best.pt")
    model, tokenizer, train_cfg = restore_model(load_checkpoint(cfg.checkpoint), device)
    data_cfg = train_cfg.data
    if cfg.get("data") is not None:  # data=<source> given on the command line
        data_cfg = OmegaConf.merge(data_cfg, cfg.data)
    if (cfg.src is None) != (cfg.ref is None):
        raise UserError("give both src=<file> and ref=<file>, or neither to use the test split")
    if cfg.src is not None:
        sources, references = read_lines(Path(cfg.src)), read_lines(Path(cfg.ref))
        if len(sources) != len(references):
            raise UserError(
                f"{cfg.src} has {len(sources)} lines but {cfg.ref} has {len(references)}; "
                "source and reference must be line-aligned"
            )
        name = Path(cfg.src).name
    else:
        name, sources, references = load_raw_test(data_cfg)
    translator = Translator(
        model,
        tokenizer,
        decode,
        device,
        precision,
        int(data_cfg.eval_max_tokens),
        data_cfg.filter.max_src_len,
    )
    hyps = translator.translate(sources, progress=True)
    scores = score(hyps, references)
    out_dir = Path(cfg.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "hyp.txt").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    result = {
        "checkpoint": str(cfg.checkpoint),
        "test": name,
        "sentences": len(sources),
        "beam_size": decode.beam_size,
        **scores,
    }
    (out_dir / "scores.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(
        f"BLEU {scores['bleu']:.2f}  chrF {scores['chrf']:.2f}  ({name}, {len(sources)} sentences, "
        f"beam {decode.beam_size})"
    )
    print(f"signature: {scores['bleu_signature']}")
    print(f"hypotheses: {out_dir / 'hyp.txt'}")
    return result


def evaluate_run(
    settings: TrainSettings,
    corpus: Corpus,
    model: Seq2SeqTransformer,
    translator: Translator,
    progress: Progress,
    ckpts: CheckpointManager,
    writer,
    analysis: DictConfig | None,
) -> dict:
    """The end of a training run: score its best checkpoint on the test split, measure
    latency, summarise its heads, and write ``test.hyp.txt``, ``test.ref.txt`` and
    ``results.json`` into the run dir (also the HParams summary to TensorBoard).

    ``model`` is the trained model (its best weights are loaded into it); ``analysis`` is the
    run's ``cfg.analysis`` (thresholds of the head summary).
    """
    t = settings.trainer
    device, precision = translator.device, translator.precision
    run_dir = Path(settings.run_dir)
    train_peak_mb = peak_memory_mb(device)
    if ckpts.best.is_file():
        model.load_state_dict(load_checkpoint(ckpts.best, map_location=device)["model"])
    test = corpus.splits["test"]
    log.info(
        "decoding %d test sentences (%s, beam %d)",
        len(test.src_ids),
        test.name,
        settings.decode.beam_size,
    )
    hyp_ids, sentences_per_s = translator.timed_translate_ids(test.src_ids, progress=t.progress_bar)
    hyps = corpus.tokenizer.decode(hyp_ids)
    scores = score(hyps, test.tgt_text)
    (run_dir / "test.hyp.txt").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    (run_dir / "test.ref.txt").write_text(
        "".join(r + "\n" for r in test.tgt_text), encoding="utf-8"
    )
    latency_ms = translator.latency_ms(test.src_ids[: t.latency_sentences])
    # What the heads learned, cheaply (one teacher-forced pass over a dev prefix): mean
    # attention entropy per layer type and degenerate heads, for the heads-ablation report.
    plain = None if analysis is None else OmegaConf.to_container(analysis, resolve=True)
    thresholds, summary_sentences, summary_tokens = summary_settings(plain)
    heads_summary = None
    if summary_sentences:
        heads_summary = head_summary(
            model,
            corpus.splits["valid"],
            corpus.tokenizer,
            device,
            precision,
            thresholds,
            summary_sentences,
            summary_tokens,
            corpus.max_src_len,
            corpus.max_tgt_len,
        )
        for kind, entropy in heads_summary["entropy"].items():
            writer.add_scalar(f"heads/entropy_{kind}", entropy, progress.step)
        writer.add_scalar("heads/degenerate", heads_summary["degenerate_heads"], progress.step)
        log.info(
            "heads: mean attention entropy %s; %d of %d heads degenerate",
            ", ".join(f"{k} {v:.2f}" for k, v in heads_summary["entropy"].items()),
            heads_summary["degenerate_heads"],
            heads_summary["total_heads"],
        )
    m = settings.model
    results = {
        "status": "completed",
        "heads": m.num_heads,
        "d_k": m.d_model // m.num_heads,
        "d_model": m.d_model,
        "layers": {"encoder": m.num_encoder_layers, "decoder": m.num_decoder_layers},
        "params": count_parameters(model),
        "attention_impl": m.attention_impl,
        "precision": precision,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "seed": settings.seed,
        "steps": progress.step,
        "epochs_completed": progress.epoch,
        "train_minutes": progress.train_seconds / 60,
        "tokens_per_s": progress.tokens / max(progress.train_seconds, 1e-9),
        "peak_mem_mb": train_peak_mb,
        "dev_bleu": progress.best_dev_bleu,
        "best_step": progress.best_step,
        "test_split": test.name,
        "bleu": scores["bleu"],
        "chrf": scores["chrf"],
        "sacrebleu_signature": scores["bleu_signature"],
        "chrf_signature": scores["chrf_signature"],
        "beam_size": settings.decode.beam_size,
        "latency_ms": latency_ms,
        "latency_sentences": min(t.latency_sentences, len(test.src_ids)),
        "sentences_per_s": sentences_per_s,
        "head_summary": heads_summary,
        "checkpoint": str(ckpts.best if ckpts.best.is_file() else ckpts.last),
        "hypotheses": str(run_dir / "test.hyp.txt"),
    }
    (run_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    hparams = {
        "heads": m.num_heads,
        "d_model": m.d_model,
        "d_ff": m.d_ff,
        "encoder_layers": m.num_encoder_layers,
        "decoder_layers": m.num_decoder_layers,
        "attention_impl": m.attention_impl,
        "precision": precision,
        "seed": settings.seed,
        "lr": settings.optim.lr,
        "beam_size": settings.decode.beam_size,
    }
    log_hparams(
        writer,
        hparams,
        {
            "hparam/test_bleu": scores["bleu"],
            "hparam/dev_bleu": progress.best_dev_bleu,
            "hparam/latency_ms": latency_ms,
        },
    )
    writer.close()
    log.info(
        "test BLEU %.2f, chrF %.2f (%s, beam %d) | %s",
        scores["bleu"],
        scores["chrf"],
        test.name,
        settings.decode.beam_size,
        scores["bleu_signature"],
    )
    log.info(
        "latency %.1f ms/sentence (batch 1), %.1f sentences/s | outputs in %s",
        latency_ms,
        sentences_per_s,
        run_dir,
    )
    return results


@hydra.main(version_base="1.3", config_path="../conf", config_name="evaluate")
@exit_on_user_error
def main(cfg: DictConfig) -> None:
    evaluate(cfg)


if __name__ == "__main__":
    main()
