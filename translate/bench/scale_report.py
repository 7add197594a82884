"""The rehearsal's summary and tables (``translate/bench/scale.py``), from its stage sections:
the goals' numbers, one line per stage, where a host update's time goes, the value reads per
update, and how each data stage's time grows with the corpus."""

from __future__ import annotations

import math

from translate.bench import common


def _get(done: dict, *keys):
    """``done[k1][k2]...``, or None where a stage did not run or failed."""
    node = done
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def growth(scaling: dict, stage: str, key: str) -> list[tuple[int, int, float]]:
    """``(pairs, next pairs, exponent)``: time ~ pairs ** exponent between consecutive sizes
    (1: linear; above: the stage's cost grows faster than its input)."""
    sizes = sorted(int(n) for n in scaling if n.isdigit())
    out = []
    for a, b in zip(sizes, sizes[1:]):
        ta, tb = _get(scaling, str(a), stage, key), _get(scaling, str(b), stage, key)
        if ta and tb:
            out.append((a, b, math.log(tb / ta) / math.log(b / a)))
    return out


def summarize(done: dict) -> dict:
    peaks = [
        _get(done, *path, "peak_rss_mb")
        for path in (("tokenizer", "all"), ("tokenizer", "sampled"), ("data", "cold"))
    ]
    scaling = done.get("scaling") or {}
    exponents = [e for s, k in (("tokenizer", "train_s"), ("data", "load_s"))
                 for *_, e in growth(scaling, s, k)]  # fmt: skip
    builds = {s: _get(done, s, "tokenizer_builds") for s in ("ddp", "sweep")}
    return {
        "first_update_cold_s": _get(done, "start", "cold", "first_update_s"),
        "start_to_training_cached_s": _get(done, "start", "cached", "setup_done_at_s"),
        "first_update_cached_s": _get(done, "start", "cached", "first_update_s"),
        "data_peak_rss_mb": max((p for p in peaks if p is not None), default=None),
        "tokenizer_train_s": _get(done, "tokenizer", "all", "train_s"),
        "data_load_cold_s": _get(done, "data", "cold", "load_s"),
        "data_load_cached_s": _get(done, "data", "cached", "load_s"),
        "d512_tokens_per_s": _get(done, "d512", "tokens_per_s"),
        "host_updates_per_s": _get(done, "host", "updates_per_s"),
        "host_loop_updates_per_s": _get(done, "host", "loop_updates_per_s"),
        "syncs_per_update": _get(done, "syncs", "syncs_per_update"),
        "ops_per_update": _get(done, "syncs", "ops_per_update"),
        "dispatch_floor_updates_per_s": _get(done, "syncs", "dispatch_floor_updates_per_s"),
        "valid_greedy_ms_per_sentence": _decode_ms(done, "valid", 1),
        "test_beam5_ms_per_sentence": _decode_ms(done, "test", 5),
        "ddp_rank1_wait_s": _get(done, "ddp", "rank_waits_s", "1"),
        "ddp_tokenizer_builds": None if builds["ddp"] is None else float(builds["ddp"]),
        "sweep_tokenizer_builds": None if builds["sweep"] is None else float(builds["sweep"]),
        "scaling_worst_exponent": max(exponents, default=None),
    }


def _decode_ms(done: dict, role: str, beam: int) -> float | None:
    runs = _get(done, "decode", role, "runs") or []
    return next((r["ms_per_sentence"] for r in runs if r["beam"] == beam), None)


def _stage_rows(done: dict) -> list[dict]:
    rows = []

    def add(stage, seconds, node, notes):
        if node is not None:
            error = node.get("error")
            peak = node.get("peak_rss_mb")
            rows.append({"stage": stage, "s": seconds, "peak": peak, "notes": error or notes})

    for name in ("all", "sampled"):
        t = _get(done, "tokenizer", name) or {}
        dev = t.get("dev_subwords_per_sentence") or {}
        notes = ", ".join(f"{k} {v:.2f}" for k, v in dev.items())
        size = t.get("input_sentence_size")
        add(
            f"tokenizer, sample {size or 'all'}",
            t.get("train_s"),
            t or None,
            f"dev subwords: {notes}",
        )
    for name in ("cold", "cached"):
        d = _get(done, "data", name) or {}
        notes = (
            f"bucketing {d.get('bucket_s', 0):.2f} s, {d.get('batches_per_epoch')} batches, "
            f"cache {d.get('encoded_mb', 0) + d.get('tokenizer_mb', 0):.0f} MiB"
        )
        add(f"data, {name}", d.get("load_s"), d or None, notes)
    for name in ("cold", "cached"):
        s = _get(done, "start", name) or {}
        notes = f"setup done at {common.fmt(s.get('setup_done_at_s'))} s"
        add(f"command to 1st update, {name}", s.get("first_update_s"), s or None, notes)
    d = done.get("d512")
    if d:
        notes = (
            f"{common.fmt(d.get('tokens_per_s'), '.0f')} tokens/s, checkpoint save "
            f"{common.fmt(d.get('checkpoint_save_s'))} s"
        )
        add("d512, s/update", d.get("s_per_update"), d, notes)
    for role in ("valid", "test"):
        node = _get(done, "decode", role)
        if node is None:
            continue
        for r in node.get("runs") or [{"beam": "-", "error": node.get("error")}]:
            notes = (
                f"{node.get('sentences')} sentences, {common.fmt(r.get('ms_per_sentence'))} "
                f"ms/sentence, output {common.fmt(r.get('mean_output_len'))} tokens"
            )
            add(f"decode {role}, beam {r['beam']}", r.get("seconds"), {**node, **r}, notes)
    for stage in ("ddp", "sweep"):
        c = done.get(stage)
        if c:
            notes = (
                f"exit {c.get('returncode')}, tokenizer built {c.get('tokenizer_builds')}x, "
                f"waits {c.get('rank_waits_s') or c.get('lock_waits_s')} "
                f"(limit {c.get('wait_limit') or '-'})"
            )
            add(stage, c.get("seconds"), c, notes)
    return rows


def print_tables(done: dict) -> None:
    cols = [("stage", "stage", ""), ("s", "seconds", ".3g"), ("peak", "peak RSS MiB", ".0f")]
    common.print_table(_stage_rows(done), cols + [("notes", "notes", "")], title="\nStages")
    host = done.get("host") or {}
    if host.get("rows"):
        title = (
            f"\nHost side, tiny model at {host.get('max_tokens')} tokens/batch: "
            f"{common.fmt(host.get('updates_per_s'))} updates/s, "
            f"{common.fmt(host.get('loop_updates_per_s'))} without the step"
        )
        cols = [("part", "part", ""), ("ms_per_update", "ms/update", ".3g")]
        cols += [("share", "share", ".1%"), ("inside", "inside", "")]
        common.print_table(host["rows"], cols, title=title)
    syncs = done.get("syncs") or {}
    if syncs.get("rows"):
        title = (
            f"\nValue reads and copies per update ({syncs.get('syncs_per_update')} synchronise "
            f"on CUDA); {syncs.get('ops_per_update')} operators/update at "
            f"{common.fmt(syncs.get('dispatch_us_per_op'))} us to dispatch"
        )
        cols = [("op", "op", ""), ("where", "where", ""), ("per_update", "per update", ".3g")]
        common.print_table(syncs["rows"], cols + [("sync_on_cuda", "sync on CUDA", "")], title)
    _print_scaling(done.get("scaling") or {})


def _pairs(item: tuple[str, dict]) -> int:
    return int(item[0])


def _print_scaling(scaling: dict) -> None:
    if not scaling:
        return
    rows = [
        {
            "pairs": int(n),
            "tok_s": _get(node, "tokenizer", "train_s"),
            "tok_peak": _get(node, "tokenizer", "peak_rss_mb"),
            "data_s": _get(node, "data", "load_s"),
            "data_peak": _get(node, "data", "peak_rss_mb"),
            "error": _get(node, "tokenizer", "error") or _get(node, "data", "error"),
        }
        for n, node in sorted((kv for kv in scaling.items() if kv[0].isdigit()), key=_pairs)
    ]
    cols = [("pairs", "pairs", ""), ("tok_s", "tokenizer s", ".3g")]
    cols += [("tok_peak", "peak MiB", ".0f"), ("data_s", "data s", ".3g")]
    cols += [("data_peak", "peak MiB", ".0f"), ("error", "error", "")]
    exps = [
        f"{stage} {a}->{b}: {e:.2f}"
        for stage, key in (("tokenizer", "train_s"), ("data", "load_s"))
        for a, b, e in growth(scaling, stage, key)
    ]
    common.print_table(rows, cols, title="\nScaling; time ~ pairs^e: " + "; ".join(exps))
