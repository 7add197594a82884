"""Score a checkpoint: ``python -m translate.evaluate checkpoint=<path> [src=<file> ref=<file>]``.

Without ``src``/``ref`` the test split of the checkpoint's own data config is scored (override
it with ``data=<source> data.dir=...``). Hypotheses go to ``hyp.txt`` in this command's Hydra
run dir; BLEU, chrF and the sacreBLEU signature are printed and written to ``scores.json``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from translate.checkpoint import load_checkpoint, restore_model
from translate.config import decode_settings
from translate.data import load_raw_test
from translate.errors import UserError, exit_on_user_error
from translate.inference import Translator
from translate.metrics import score
from translate.runtime import resolve_device, resolve_precision
from translate.sources import read_lines

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


@hydra.main(version_base="1.3", config_path="../conf", config_name="evaluate")
@exit_on_user_error
def main(cfg: DictConfig) -> None:
    evaluate(cfg)


if __name__ == "__main__":
    main()
