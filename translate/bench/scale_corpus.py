"""Write an IWSLT2017-sized stand-in corpus from real text, as a local release folder.

    python -m translate.bench.scale_corpus --pairs 206112 --out /tmp/iwslt-scale
    python -m translate.train experiment=iwslt2017 data.path=/tmp/iwslt-scale runtime.device=cpu

A cost, memory and failure-mode stand-in, NOT a training set for quality: its lines repeat
Multi30k's 29,000 captions over and over, so a model trained on it learns captions, and its
scores say nothing about TED talks. It exists so that every stage around the GPU (tokenizer,
encoding, batching, the training loop's host side, validation, test decoding, DDP start-up) can
be run at IWSLT2017's real size where the real training split cannot be downloaded.

- train: ``--pairs`` lines (IWSLT2017's 206,112 by default), each 1..k consecutive Multi30k
  training pairs joined by a space, cycling over the captions as often as needed;
- validation: the real IWSLT2017 dev set (dev2010, 888 pairs) copied as it is;
- test: ``--test-pairs`` lines (8,079, as tst2010..tst2015 joined) built like train, from their
  own seeded draws and starting half way through the captions.

How many captions a line joins: each line draws a target length from the real dev set's German
lengths (seeded), then takes consecutive captions while that brings its German length closer to
the target (at least one; :func:`group_captions`). So the lines' length distribution follows
the dev set's, in whitespace-separated WORDS of the German (source) side; the table printed at
the end puts mean, median, 95th and 99th percentile and maximum (German and English) beside the
target's. The German side is held to: mean within 3%, median within one word, 95th and 99th
percentile within 5%, maximum at most the target's (a line never grows past the longest target
unless one caption is longer). Lines shorter than one caption cannot be made, so the shortest
tenth of the target comes out a few words longer (and others a little shorter for the mean).

The folder is what ``data=iwslt2017 data.path=DIR`` reads (DIR/de-en/train.tags.de-en.*,
IWSLT17.TED.dev2010.de-en.*.xml, IWSLT17.TED.tst2010..2015.de-en.*.xml), written by
:func:`translate.data.iwslt_write.write_release`. The output depends only on the inputs,
``--seed`` and the sizes; the first N training lines are the same for any ``--pairs`` >= N, so
folders of 50k and 100k pairs are prefixes of the full one.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from translate.cli import run_plain_command
from translate.data.iwslt import TEST_SETS
from translate.data.iwslt_write import write_release
from translate.data.sources import check_aligned, find_file, read_jsonl, read_lines
from translate.errors import EXIT_USER_ERROR, UserError, debug_enabled
from translate.io import check_output_folder, make_folder

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"
IWSLT_TRAIN_PAIRS = 206_112
IWSLT_TEST_PAIRS = 8_079
# Bound on --pairs/--test-pairs, checked before anything is allocated: about 24x IWSLT2017's
# training split, a few GB of text in memory (1e9 asked numpy for 7.45 GiB at once).
MAX_PAIRS = 5_000_000
LANGS = ("de", "en")
# About one TED talk per 110 training lines in the release (a <talkid> line heads each).
TALK_LINES = 110
STATS = ("mean", "median", "p95", "p99", "max")
# How much of the running excess length steers the next line's target (group_captions).
EXCESS_FEEDBACK = 0.1


def word_counts(lines: Sequence[str]) -> np.ndarray:
    return np.fromiter((len(s.split()) for s in lines), np.int64, len(lines))


def length_stats(counts: np.ndarray) -> dict[str, float]:
    """Mean, median, 95th and 99th percentile and maximum of ``counts``."""
    p50, p95, p99 = np.percentile(counts, [50, 95, 99])
    return {
        "mean": float(counts.mean()),
        "median": float(p50),
        "p95": float(p95),
        "p99": float(p99),
        "max": float(counts.max()),
    }


def group_captions(
    caption_words: np.ndarray, targets: np.ndarray, lines: int, rng, start: int = 0
) -> list[tuple[int, int]]:
    """``(first caption, k)`` of each of ``lines`` lines. Each line draws a target length from
    ``targets`` and takes consecutive captions (cycling; at least one) while each brings it
    closer to that target less a tenth of the running excess (the words all lines so far have
    over their targets), never past the longest target. Without that feedback every line
    shorter than a caption would raise the mean (by 6% on Multi30k against the IWSLT dev set);
    with it the mean stays on target. Caption ``i`` has ``caption_words[i]`` words."""
    n, longest = len(caption_words), int(targets.max())
    groups, pos, excess = [], start % n, 0.0
    for target in rng.choice(targets, size=lines).tolist():
        goal = target - EXCESS_FEEDBACK * excess
        k, total = 1, int(caption_words[pos])
        while True:
            longer = total + int(caption_words[(pos + k) % n])
            if longer > longest or abs(longer - goal) >= abs(total - goal):
                break
            k, total = k + 1, longer
        excess += total - target
        groups.append((pos, k))
        pos = (pos + k) % n
    return groups


def join_groups(captions: Sequence[str], groups: list[tuple[int, int]]) -> list[str]:
    n = len(captions)
    return [" ".join(captions[(first + j) % n] for j in range(k)) for first, k in groups]


def build_splits(
    captions: dict[str, list[str]],
    dev: dict[str, list[str]],
    pairs: int,
    test_pairs: int,
    seed: int,
) -> dict[str, dict[str, list[str]]]:
    """``{"train" | "validation" | "test": {lang: lines}}``: joined captions whose German
    length follows ``dev``'s, and ``dev`` itself."""
    words = word_counts(captions["de"])
    targets = word_counts(dev["de"])
    train = group_captions(words, targets, pairs, np.random.default_rng([seed, 0]))
    test = group_captions(
        words, targets, test_pairs, np.random.default_rng([seed, 1]), start=len(words) // 2
    )
    return {
        "train": {lang: join_groups(captions[lang], train) for lang in LANGS},
        "validation": {lang: list(dev[lang]) for lang in LANGS},
        "test": {lang: join_groups(captions[lang], test) for lang in LANGS},
    }


def read_captions(folder: Path) -> dict[str, list[str]]:
    """Multi30k's training pairs, ``train.{de,en}[.gz]`` in ``folder``."""
    paths = [find_file(folder, f"train.{lang}") for lang in LANGS]
    columns = {lang: read_lines(path) for lang, path in zip(LANGS, paths)}
    check_aligned(columns, paths, "lines")
    empty = sum(not (a and b) for a, b in zip(*columns.values()))
    if empty:
        raise UserError(f"{folder}: {empty} training pairs have an empty side; use Multi30k")
    return columns


def read_dev(path: Path) -> dict[str, list[str]]:
    """The IWSLT2017 dev set: ``{"translation": {"de": ..., "en": ...}}`` JSON lines."""
    # Checked here, in the user's words: read_jsonl looks for <name>.jsonl[.gz] beside it.
    if not path.name.endswith((".jsonl", ".jsonl.gz")):
        raise UserError(f"--dev {path}: not JSON lines; pass a .jsonl or .jsonl.gz file")
    if not path.is_file():
        raise UserError(f"--dev {path} does not exist; pass the IWSLT2017 dev set (.jsonl)")
    name = path.name.removesuffix(".gz").removesuffix(".jsonl")
    records = read_jsonl(path.parent, name, LANGS)["translation"]
    return {lang: [r[lang] for r in records] for lang in LANGS}


def stats_rows(splits: dict[str, dict[str, list[str]]]) -> list[dict]:
    """One row per statistic: the target's (dev) and the generated splits', words per line."""
    columns = {
        f"{role}_{lang}": length_stats(word_counts(splits[split][lang]))
        for role, split in (("target", "validation"), ("train", "train"), ("test", "test"))
        for lang in LANGS
    }
    return [{"stat": stat, **{k: v[stat] for k, v in columns.items()}} for stat in STATS]


def print_stats(rows: list[dict]) -> None:
    from translate.bench import common  # the benchmarks' table; here, as it loads torch

    cols = [("stat", "words/line", "")]
    for role in ("target", "train", "test"):
        cols += [(f"{role}_{lang}", f"{role} {lang}", ".1f") for lang in LANGS]
    common.print_table(rows, cols, title="Length (whitespace words per line); target = dev set")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m translate.bench.scale_corpus", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", type=Path, required=True, help="folder to write (data.path)")
    parser.add_argument("--pairs", type=int, default=IWSLT_TRAIN_PAIRS, help="training lines")
    parser.add_argument("--test-pairs", type=int, default=IWSLT_TEST_PAIRS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--multi30k", type=Path, default=SHARED / "multi30k", metavar="DIR")
    parser.add_argument(
        "--dev",
        type=Path,
        default=SHARED / "iwslt2017-de-en" / "validation.jsonl",
        help="the real IWSLT2017 dev set, JSON lines (the length target and the dev split)",
    )
    args = parser.parse_args(argv)
    if not 1 <= args.pairs <= MAX_PAIRS or not len(TEST_SETS) <= args.test_pairs <= MAX_PAIRS:
        parser.error(
            f"--pairs must be in 1..{MAX_PAIRS:,} and --test-pairs in "
            f"{len(TEST_SETS)}..{MAX_PAIRS:,} ({len(TEST_SETS)} test sets)"
        )
    return args


def make(args: argparse.Namespace) -> list[dict]:
    """Read, build and write; the length table's rows. ``--out`` must be new or empty: a
    non-empty folder may be a real release, whose files have these names."""
    check_output_folder(args.out, "--out")
    splits = build_splits(
        read_captions(args.multi30k), read_dev(args.dev), args.pairs, args.test_pairs, args.seed
    )
    folder = write_release(make_folder(args.out, "--out"), splits, talk_lines=TALK_LINES)
    sizes = ", ".join(f"{name} {len(cols['de']):,}" for name, cols in splits.items())
    print(f"wrote {folder} ({sizes} pairs)")
    return stats_rows(splits)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        rows = make(args)
    except UserError as err:
        if debug_enabled():
            raise
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    print_stats(rows)
    return 0


if __name__ == "__main__":
    run_plain_command(main)
