"""The stages of ``translate/bench/scale.py`` that run inside one process each, so that each
has a peak resident size of its own (``VmHWM``, read through the package's
:func:`translate.runtime.memory.peak_memory_mb`).

    python -m translate.bench.scale_child STAGE '<params as JSON>'

prints the stage's result as one ``RESULT {...}`` line on stdout (logs go to stderr). Every
stage builds what it works with through the package's own entry points: the ``iwslt2017``
recipe composed by Hydra, :func:`~translate.data.corpus.load_corpus`,
:func:`~translate.training.run.setup` and the run's :class:`~translate.decoding.translator
.Translator`; nothing of the package is repeated here but the tokenizer's cache key (the
tokenizer stage trains it alone), whose reuse the data stage reports (``tokenizer_cached``).
"""

from __future__ import annotations

import json
import logging
import statistics
import sys
import time
from pathlib import Path

import torch

from translate.bench.scale_common import cache_mb, recipe, rss_mb, setup_run
from translate.bench.scale_host import stage_host, stage_syncs
from translate.data.corpus import load_corpus, load_raw_split
from translate.data.tokenizer import text_fingerprint, train_or_load_tokenizer
from translate.errors import UserError
from translate.runtime.memory import peak_memory_mb, reset_peak_memory
from translate.settings import data_settings

CPU = torch.device("cpu")


# ----------------------------------------------------------------------------- data stages


def stage_tokenizer(p: dict) -> dict:
    """Train the recipe's tokenizer alone (``input_sentence_size`` = ``p["sentence_size"]``)
    on both sides of the training split; the mean subwords per dev sentence it gives."""
    data = data_settings(recipe(p).data)
    start = time.perf_counter()
    _, src, tgt = load_raw_split(data, "train")
    cols = {data.src_lang: src, data.tgt_lang: tgt}
    read_s, before_mb = time.perf_counter() - start, rss_mb()
    tok = data.tokenizer
    start = time.perf_counter()
    tokenizer, path = train_or_load_tokenizer(
        lambda: (s for lang in sorted(cols) for s in cols[lang]),
        cache_dir=data.cache_dir,
        key_parts={"source": data.source, "fingerprint": text_fingerprint(cols)},
        vocab_size=tok.vocab_size,
        model_type=tok.model_type,
        character_coverage=tok.character_coverage,
        input_sentence_size=p["sentence_size"],
        seed=tok.seed,
    )
    train_s = time.perf_counter() - start
    _, dev_src, dev_tgt = load_raw_split(data, "valid")
    return {
        "input_sentence_size": p["sentence_size"],
        "sentences": 2 * len(src),
        "vocab_size": tokenizer.vocab_size,
        "read_s": read_s,
        "train_s": train_s,
        "rss_before_training_mb": before_mb,
        "dev_subwords_per_sentence": {
            lang: statistics.fmean(map(len, tokenizer.encode(lines)))
            for lang, lines in ((data.src_lang, dev_src), (data.tgt_lang, dev_tgt))
        },
        "model": str(path),
    }


def stage_data(p: dict) -> dict:
    """``load_corpus`` as training calls it (read, tokenizer, encode, filter), then one
    epoch's token batches cut as training cuts them; the cache's size on disk."""
    from translate.data.batching import padding_ratio
    from translate.training.batch_order import TrainBatches

    data = data_settings(recipe(p).data)
    tokenizer_cached = any(Path(data.cache_dir).glob("spm-*.model"))
    encoded_before = len(list(Path(data.cache_dir).glob("encoded-*.npz")))
    start = time.perf_counter()
    corpus = load_corpus(data)
    load_s = time.perf_counter() - start
    train = corpus.splits["train"]
    start = time.perf_counter()
    batches = TrainBatches(train, corpus.max_tokens, p["seed"])
    order = list(batches.sampler)
    bucket_s = time.perf_counter() - start
    return {
        "tokenizer_cached": tokenizer_cached,
        "encoded_files_cached": encoded_before,
        "load_s": load_s,
        "bucket_s": bucket_s,
        "batches_per_epoch": len(order),
        "real_token_ratio": padding_ratio(order, train.src_lens, train.tgt_lens)["all"],
        "splits": {
            role: {"pairs": s.num_raw, "kept": len(s), "dropped": s.dropped}
            for role, s in corpus.splits.items()
        },
        **cache_mb(Path(data.cache_dir)),
    }


# ----------------------------------------------------------------------------- model stages


def stage_d512(p: dict) -> dict:
    """Tokens/s of the recipe's model training on the CPU (``p["updates"]`` timed updates after
    one untimed), and what one checkpoint of it costs to write."""
    from translate.training.batch_order import TrainBatches
    from translate.training.saving import checkpoint_state

    run = setup_run(p)
    try:
        t = run.settings.trainer
        groups = TrainBatches(run.corpus.splits["train"], run.corpus.max_tokens, run.settings.seed)
        epoch = groups.epoch(0, 0, t.accumulate_grad_batches)
        run.trainer.step(next(epoch))  # warm-up: allocator, Adam state
        seconds, tokens = [], 0
        for _ in range(p["updates"]):
            group = next(epoch)
            start = time.perf_counter()
            tokens += run.trainer.step(group).tokens
            seconds.append(time.perf_counter() - start)
        corpus = run.corpus
        state = checkpoint_state(
            run.trainer, run.progress, run.settings.config, corpus.tokenizer, corpus.fingerprints
        )
        start = time.perf_counter()
        path = run.ckpts.save(state, 1, False)
        save_s = time.perf_counter() - start
    finally:
        run.lock.release()
    return {
        "updates": len(seconds),
        "tokens_per_s": tokens / sum(seconds),
        "s_per_update": statistics.median(seconds),
        "checkpoint_save_s": save_s,
        "checkpoint_mb": path.stat().st_size / 2**20,
        "checkpoint_every_n_steps": t.checkpoint_every_n_steps,
        "parameters": sum(x.numel() for x in run.model.parameters()),
    }


def stage_decode(p: dict) -> dict:
    """The recipe's (untrained) model decoding split ``p["role"]`` with each beam size in
    ``p["beams"]``: time, time per sentence, output lengths, peak resident size; for the dev
    split also the dev loss validation computes. Untrained, the model writes to the length
    limit (``decode.max_len_a * source + max_len_b``): a worst case per sentence, so the time
    per output token is given too."""
    from translate.scoring import mean_nll

    run = setup_run(p)
    run.lock.release()
    corpus, device = run.corpus, run.trainer.device
    split = corpus.splits[p["role"]]
    src = split.src_ids[: p["sentences"]] if p["sentences"] else split.src_ids
    out = {"sentences": len(src), "runs": []}
    if p["role"] == "valid":
        start = time.perf_counter()
        batches = split.batches(corpus.eval_max_tokens, corpus.eval_max_len)
        mean_nll(run.model, batches, device, run.trainer.precision)
        out["dev_loss_s"] = time.perf_counter() - start
    for beam in p["beams"]:
        reset_peak_memory(device)
        start = time.perf_counter()
        hyps = run.translator.translate_ids(src, beam_size=beam)
        seconds = time.perf_counter() - start
        tokens = sum(len(h) + 1 for h in hyps)  # + EOS, or the step at the length limit
        out["runs"].append(
            {
                "beam": beam,
                "seconds": seconds,
                "ms_per_sentence": 1e3 * seconds / len(src),
                "ms_per_output_token": 1e3 * seconds / tokens,
                "mean_output_len": tokens / len(src),
                "mean_source_len": statistics.fmean(len(s) + 1 for s in src),
                "peak_rss_mb": peak_memory_mb(device),
            }
        )
    return out


def main(argv: list[str]) -> None:
    stage, params = argv[0], json.loads(argv[1])
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    stages = {
        "tokenizer": stage_tokenizer,
        "data": stage_data,
        "d512": stage_d512,
        "decode": stage_decode,
        "host": stage_host,
        "syncs": stage_syncs,
    }
    torch.set_num_threads(params["threads"])
    baseline = rss_mb()
    reset_peak_memory(CPU)
    try:
        result = stages[stage](params)
    except UserError as err:  # a failure the user would see: the stage's finding, one line
        result = {"error": str(err)}
    result.update(rss_at_start_mb=baseline, peak_rss_mb=peak_memory_mb(CPU))
    print("RESULT " + json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
