"""The budget ladder (``python -m translate.bench.ladder``): its plan of runs, its report of a
quick ladder, and that the same command again trains nothing. No assertion on the numbers:
BLEU after seconds of training on a shared CPU means nothing."""

from __future__ import annotations

import json

import pytest
from conftest import SHORT_DECODE, TINY, snapshot

from translate.bench import ladder
from translate.errors import UserError

# TINY without the keys the ladder sets itself, validating often enough to draw a curve, with
# short decodes (an untrained model decodes to the length limit).
SMALL = [o for o in TINY if o.partition("=")[0] not in ladder.OWN_KEYS]
SMALL += ["trainer.val_every_n_steps=20", *SHORT_DECODE]


def trained(run_dir):
    """What training and scoring write, byte for byte: not the log and the .hydra/ record
    that every command in the dir adds to."""
    kept = ("checkpoints/", "tensorboard/", "results.json", "test.hyp.txt")
    return {k: v for k, v in snapshot(run_dir).items() if k.startswith(kept)}


def test_default_plan_is_three_rungs_with_two_seeds_at_13_minutes():
    args = ladder.parse_args([])
    assert args.experiment == "multi30k_cpu"
    assert ladder.rungs(args) == [(6.5, 1), (13.0, 1), (13.0, 2), (26.0, 1)]
    assert [ladder.rung_name(m, s) for m, s in ladder.rungs(args)][:2] == [
        "min6.5_seed1",
        "min13_seed1",
    ]
    command = ladder.train_command(args, 13.0, 2)
    assert command[1:] == [
        "-m", "translate.train", "experiment=multi30k_cpu", "trainer.max_minutes=13", "seed=2",
        "hydra.run.dir='outputs/ladder/multi30k_cpu/min13_seed2'", "trainer.resume=auto",
        "trainer.progress_bar=false",
    ]  # fmt: skip


def test_quick_is_quickstart_at_tiny_rungs_under_the_users_overrides():
    args = ladder.parse_args(["--quick", "trainer.val_every_n_steps=5"])
    assert (args.experiment, ladder.rungs(args)) == ("quickstart", [(0.1, 1), (0.2, 1)])
    assert args.overrides == ["trainer.val_every_n_steps=25", "trainer.val_every_n_steps=5"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["experiment=quickstart"], "experiment is the ladder's to set"),
        (["seed=3"], "seed is the ladder's to set"),
        (["--minutes", "6.5,13", "--extra-seeds", "26=2"], "26 is not one of --minutes"),
        (["--extra-seeds", "13"], "is not <minutes>=<seed>"),
        (["--minutes", "0,13"], "must be >="),
    ],
)
def test_bad_options_stop_before_any_run(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        ladder.parse_args(argv)
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


def row(minutes, seed, bleu, losses):
    curve = [{"step": 100 * (i + 1), "dev_loss": loss} for i, loss in enumerate(losses)]
    lowest = min(losses)
    return {"minutes": minutes, "seed": seed, "bleu": bleu, "dev_curve": curve,
            "last_dev_loss_above_min": losses[-1] - lowest}  # fmt: skip


def test_summary_flags_a_rising_dev_loss_and_a_longest_rung_below_the_previous():
    rows = [
        row(6.5, 1, 38.8, [3.0, 2.5, 2.4]),
        row(13, 1, 37.0, [3.0, 2.3, 2.35]),
        row(13, 2, 37.2, [3.0, 2.3, 2.305]),  # within the tolerance
        row(26, 1, 36.0, [3.0, 2.3, 2.6]),
    ]
    summary = ladder.summarize(rows, [6.5, 13, 26])
    assert summary["bleu_min13"] == pytest.approx(37.1)
    assert summary["dev_loss_rose_min6.5"] is False
    assert summary["dev_loss_rose_min13"] is True  # one of its seeds rose
    assert summary["longest_below_previous"] is True


def test_a_stopped_rung_stops_the_ladder_with_its_signal(capsys):
    with pytest.raises(SystemExit) as stop:
        ladder.stop_on_signal("min13_seed1", ladder.Path("out/min13_seed1"), [], 130)
    assert stop.value.code == 130
    err = capsys.readouterr().err
    assert err.startswith("error: stopped by SIGINT at min13_seed1")
    assert "run the same command again to resume" in err
    ladder.stop_on_signal("min13_seed1", ladder.Path("x"), [], 0)  # a finished rung goes on


def test_a_failed_rung_is_one_line_naming_the_training_error(tmp_path):
    argv = ["--quick", "--out", str(tmp_path / "ladder"), "model.nope=3"]
    with pytest.raises(UserError, match=r"min0\.1_seed1: .* exited 2: unknown key model\.nope"):
        ladder.main(argv)


def test_quick_ladder_reports_every_rung_and_a_rerun_trains_nothing(tmp_path, cache_dir, capsys):
    out, report = tmp_path / "ladder", tmp_path / "ladder.json"
    # Rungs of 0.6 and 1.2 s: a clock budget ends a run after its step in progress, so each
    # trains at least one update however loaded the machine.
    argv = ["--quick", "--minutes", "0.01,0.02", "--out", str(out), "--json", str(report)]
    argv += [*SMALL, f"data.cache_dir={cache_dir}"]
    ladder.main(argv)
    written = json.loads(report.read_text())
    assert written["command"].startswith("python -m translate.bench.ladder --quick")
    rows = written["rows"]
    assert [r["rung"] for r in rows] == ["min0.01_seed1", "min0.02_seed1"]
    for r in rows:
        assert r["steps"] > 0 and r["precision"] == "32" and not r["skipped"]
        assert r["dev_curve"] and all(
            {"step", "dev_loss", "dev_bleu"} <= set(p) for p in r["dev_curve"]
        )
        assert r["dev_curve"][-1]["step"] == r["steps"]  # the run validates as it stops
        assert isinstance(r["bleu"], float) and isinstance(r["bleu_greedy"], float)
        assert r["scored_checkpoint"] in ("best", "averaged", "last")
    assert set(written["summary"]) == {
        "bleu_min0.01", "bleu_min0.02", "dev_loss_rose_min0.01", "dev_loss_rose_min0.02",
        "longest_below_previous",
    }  # fmt: skip
    assert "min0.02_seed1: finished" in capsys.readouterr().out

    before = {r["rung"]: trained(out / r["rung"]) for r in rows}
    again = ladder.main(argv)
    assert all(r["skipped"] for r in again["rows"])
    assert [r["steps"] for r in again["rows"]] == [r["steps"] for r in rows]
    assert {r["rung"]: trained(out / r["rung"]) for r in rows} == before  # nothing trained
    said = capsys.readouterr().out
    assert "min0.01_seed1: skipped, finished before" in said and "training" not in said
