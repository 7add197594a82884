"""The training application end to end on the sample corpus, shrunk to seconds."""

from __future__ import annotations

import json
import re
import shutil

import pytest
import torch
from conftest import (
    SHORT_DECODE,
    TINY,
    assert_one_line_error,
    compose_config,
    run_cli,
    short_config,
)
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from translate.checkpoint import load_checkpoint
from translate.data.batching import collate
from translate.evaluate import evaluate
from translate.schema import ModelSettings, OptimSettings
from translate.schema.commands import TranslateCommand
from translate.settings import command_settings
from translate.train import train
from translate.training.optim import Schedule
from translate.training.step import Trainer
from translate.translate import translate_lines

RESULT_KEYS = {
    "heads",
    "d_model",
    "layers",
    "params",
    "attention_impl",
    "precision",
    "device",
    "steps",
    "train_minutes",
    "tokens_per_s",
    "peak_mem_mb",
    "dev_bleu",
    "bleu",
    "bleu_greedy",
    "chrf",
    "sacrebleu_signature",
    "beam_size",
    "latency_ms",
    "sentences_per_s",
}


def test_quickstart_config_is_the_sample_recipe():
    cfg = compose_config("train", ["experiment=quickstart"])
    assert cfg.data.source == "sample" and cfg.model.num_heads == cfg.heads == 4
    default = compose_config("train", [])
    assert default.data.source == "iwslt2017" and default.model.d_model == 512
    assert default.model.num_heads == 8 and default.model.num_encoder_layers == 2
    assert compose_config("train", ["heads=16"]).model.num_heads == 16


def test_train_writes_results_checkpoints_and_tensorboard(trained_run):
    run, results = trained_run
    on_disk = json.loads((run / "results.json").read_text())
    assert set(on_disk) >= RESULT_KEYS and on_disk == results
    assert results["steps"] == 8 and results["heads"] == 2 and results["params"] > 0
    assert results["attention_impl"] == "sdpa" and results["device"] == "cpu"
    assert results["precision"] == "32" and results["precision_reason"] == "runtime.precision=32"
    assert results["provenance"]["cpu_bf16_units"] in ("amx", "avx512_bf16", "none")
    assert "tok:13a" in results["sacrebleu_signature"]
    assert (run / "checkpoints" / "last.pt").is_file() and (
        run / "checkpoints" / "best.pt"
    ).is_file()
    hyps = (run / "test.hyp.txt").read_text().splitlines()
    assert len(hyps) == 200
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"images": 0})
    events.Reload()
    tags = events.Tags()
    for scalar in ("train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s", "dev/loss",
                   "dev/ppl", "dev/bleu", "dev/chrf"):  # fmt: skip
        assert scalar in tags["scalars"], scalar
    assert [e.step for e in events.Scalars("dev/bleu")] == [4, 8]
    heatmaps = {f"viz/attention/{kind}/layer{i}" for kind in ("encoder_self", "decoder_self",
                "decoder_cross") for i in (0, 1)}  # fmt: skip
    assert set(tags["images"]) == heatmaps  # one image per layer and kind
    # Drawn at the last validation only (the default draws every 10th), and listed after every
    # scalar group: TensorBoard's Time Series tab sorts groups by name and opens the first two.
    assert {e.step for tag in heatmaps for e in events.Images(tag)} == {8}
    groups = {kind: {tag.split("/")[0] for tag in tags[kind]} for kind in ("scalars", "images")}
    assert max(groups["scalars"]) < min(groups["images"])
    assert "_hparams_/session_start_info" in events.PluginTagToContent("hparams")


def test_without_heatmaps_a_run_logs_everything_else(tmp_path, cache_dir):
    """trainer.attention_heatmaps=false (the tests' tiny runs) draws no figure; the scalars
    and the HParams row are written as before."""
    run = tmp_path / "run"
    train(short_config(run, cache_dir, *SHORT_DECODE))
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"images": 0})
    events.Reload()
    assert events.Tags()["images"] == []
    assert [e.step for e in events.Scalars("dev/bleu")] == [2, 4]
    assert "_hparams_/session_start_info" in events.PluginTagToContent("hparams")


def test_checkpoint_is_self_contained(trained_run):
    run, results = trained_run
    ckpt = load_checkpoint(run / "checkpoints" / "last.pt")
    assert ckpt["step"] == 8 and ckpt["config"]["heads"] == 2
    for key in ("optimizer", "scheduler", "scaler", "rng", "tokenizer", "progress"):
        assert key in ckpt


def test_evaluate_reproduces_the_training_bleu(trained_run, tmp_path):
    run, results = trained_run
    cfg = compose_config(
        "evaluate",
        [
            f"checkpoint={results['checkpoint']}",
            f"output_dir={tmp_path}",
            "decode=greedy",
            *SHORT_DECODE,
        ],
    )
    scores = evaluate(cfg)
    assert scores["bleu"] == pytest.approx(results["bleu"], abs=1e-9)
    assert (tmp_path / "hyp.txt").read_text() == (run / "test.hyp.txt").read_text()


def test_evaluate_decodes_as_the_run_decoded_unless_told(trained_run, tmp_path, capsys):
    """Before, evaluate used conf/decode/beam.yaml (beam 5, 1.5 x source + 10), not the run's
    settings, and scored the same checkpoint differently from the run."""
    run, results = trained_run
    base = [f"checkpoint={results['checkpoint']}"]
    scores = evaluate(compose_config("evaluate", [*base, f"output_dir={tmp_path / 'a'}"]))
    assert scores["bleu"] == pytest.approx(results["bleu"], abs=1e-9)
    assert (tmp_path / "a" / "hyp.txt").read_text() == (run / "test.hyp.txt").read_text()
    said = capsys.readouterr().out
    assert "decode: beam 1, length penalty 1.0, at most 0.0 x source + 4 tokens (as the run " in (
        said
    )
    told = [*base, f"output_dir={tmp_path / 'b'}", "decode.max_len_b=2"]
    scores = evaluate(compose_config("evaluate", told))
    assert "(as the run decoded, but max_len_b=2 from the command line)" in capsys.readouterr().out
    decode = scores["decode"]
    assert (decode["beam_size"], decode["max_len_a"], decode["max_len_b"]) == (1, 0.0, 2)


def test_a_beam_run_also_records_its_greedy_bleu(tiny_train_cfg, trained_run, tmp_path):
    """results.json keeps the greedy BLEU next to the beam's (None when decoding is greedy)."""
    assert trained_run[1]["bleu_greedy"] is None and trained_run[1]["beam_size"] == 1
    results = train(tiny_train_cfg("trainer.max_steps=4", "decode.beam_size=3", *SHORT_DECODE))
    assert results["beam_size"] == 3
    overrides = [f"checkpoint={results['checkpoint']}", f"output_dir={tmp_path}", "decode=greedy"]
    greedy = evaluate(compose_config("evaluate", [*overrides, *SHORT_DECODE]))
    assert results["bleu_greedy"] == pytest.approx(greedy["bleu"], abs=1e-9)


def test_translate_keeps_one_line_per_input_line(trained_run, capsys):
    run, results = trained_run
    overrides = [f"checkpoint={results['checkpoint']}", "decode=greedy", *SHORT_DECODE]
    cfg = compose_config("translate", overrides)
    lines = ["Der Hund schläft.", "", "   ", "Die Frau liest 📚 ein Buch. Привет", "Hund " * 80]
    out = translate_lines(command_settings(TranslateCommand, cfg), lines)
    assert len(out) == len(lines)
    assert out[1] == "" and out[2] == ""
    assert all("\n" not in line for line in out)
    assert "truncat" in capsys.readouterr().err


def test_loss_falls_when_overfitting_a_handful_of_pairs():
    torch.manual_seed(0)
    model = ModelSettings(32, 2, 1, 1, 64, 0.0, 0.0, 0.0, "relu", True, "manual").build(40, 0)
    optim = OptimSettings(3e-3, [0.9, 0.98], 1e-9, 0.0, 0, 0.0, 0.0, 1.0)
    trainer = Trainer(model, optim, torch.device("cpu"), "32", pad_id=0)
    g = torch.Generator().manual_seed(0)
    pairs = [
        (
            i,
            torch.randint(4, 40, (5,), generator=g).tolist(),
            torch.randint(4, 40, (4,), generator=g).tolist(),
        )
        for i in range(6)
    ]
    batch = collate(pairs)
    losses = [trainer.step([batch]).loss for _ in range(60)]
    assert losses[-1] < 0.1 * losses[0]


def test_gradient_accumulation_equals_one_large_batch():
    def fresh():
        torch.manual_seed(0)
        model = ModelSettings(16, 2, 1, 1, 32, 0.0, 0.0, 0.0, "relu", True, "manual").build(30, 0)
        # eps=1 keeps Adam's first step smooth in the gradient (with a tiny eps it is ~sign(g),
        # which turns rounding noise on near-zero gradients into whole-lr differences).
        optim = OptimSettings(1e-3, [0.9, 0.98], 1.0, 0.0, 0, 0.0, 0.1, 0.0)
        return Trainer(model, optim, torch.device("cpu"), "32", pad_id=0)

    g = torch.Generator().manual_seed(1)
    pairs = [
        (
            i,
            torch.randint(4, 30, (3 + i,), generator=g).tolist(),
            torch.randint(4, 30, (2 + i,), generator=g).tolist(),
        )
        for i in range(4)
    ]
    whole, split = fresh(), fresh()
    whole.step([collate(pairs)])
    split.step([collate(pairs[:2]), collate(pairs[2:])])
    for a, b in zip(whole.model.parameters(), split.model.parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_weight_decay_is_decoupled_and_without_it_the_update_is_adams():
    """A weight without gradient shrinks by lr * weight_decay of itself (AdamW; an L2 penalty
    in the gradient would move it by about lr, Adam's normalised step); with no decay the
    update is plain Adam's, bit for bit."""
    from translate.training.optim import make_optimizer

    def stepped(weight_decay: float, cls=None) -> tuple[torch.Tensor, torch.Tensor]:
        torch.manual_seed(0)
        used, idle = torch.nn.Parameter(torch.randn(8)), torch.nn.Parameter(torch.ones(8))
        optim = OptimSettings(1e-2, [0.9, 0.98], 1e-9, weight_decay, 0, 0.0, 0.0, 0.0)
        opt = make_optimizer([used, idle], optim)[0] if cls is None else cls([used, idle], 1e-2)
        for _ in range(3):
            (used**2).sum().backward()
            idle.grad = torch.zeros(8)
            opt.step()
            opt.zero_grad(set_to_none=False)
        return used.detach(), idle.detach()

    _, idle = stepped(0.1)
    assert torch.allclose(idle, torch.full((8,), (1 - 1e-2 * 0.1) ** 3))
    ours, theirs = (
        stepped(0.0)[0],
        stepped(0.0, lambda p, lr: torch.optim.Adam(p, lr, (0.9, 0.98), 1e-9))[0],
    )
    assert torch.equal(ours, theirs)


def test_inverse_sqrt_schedule_warms_up_then_decays():
    f = Schedule(100)
    assert f(0) == pytest.approx(0.01) and f(99) == pytest.approx(1.0)
    assert f(399) == pytest.approx(0.5) and Schedule(0)(1000) == 1.0


def test_cooldown_falls_linearly_to_zero_over_the_end_of_the_step_budget():
    plain, cool = Schedule(100), Schedule(100, cooldown=0.25, max_steps=1600)
    assert all(cool(s) == plain(s) for s in range(0, 1201, 50))  # untouched before 1,200
    assert cool(1400) == pytest.approx(plain(1400) * 0.5)
    assert 0 < cool(1599) < 0.01 * plain(1599)  # the last update still learns, a little
    assert cool(1600) == 0.0 and Schedule(100, cooldown=0.25)(1600) == plain(1600)


def test_cooldown_under_a_clock_follows_the_clock_not_the_steps():
    """A machine twice as fast cools down after twice the updates: the share of the budget
    used is the larger of the steps' and the seconds'."""
    cool = Schedule(0, cooldown=0.5, max_steps=100_000, max_minutes=10)
    cool.seconds = 4.5 * 60
    assert cool(300) == 1.0
    cool.seconds = 7.5 * 60
    assert cool(300) == pytest.approx(0.5) and cool(600) == pytest.approx(0.5)
    cool.seconds = 10 * 60
    assert cool(300) == 0.0


def test_optim_cooldown_reaches_the_optimizer(tiny_train_cfg, tmp_path):
    """A run with a cooldown ends on a zero learning rate (the next update's, in last.pt)
    and trains at the full rate before its cooldown starts."""
    common = ["optim.cooldown=0.5", "optim.warmup_steps=0", "trainer.checkpoint_every_n_steps=3"]
    common += ["trainer.val_every_n_steps=3", "trainer.keep_last_checkpoints=2"]
    train(tiny_train_cfg(*common, "trainer.max_steps=6", run_dir=tmp_path / "a"))
    last = load_checkpoint(tmp_path / "a" / "checkpoints" / "last.pt")
    assert last["optimizer"]["param_groups"][0]["lr"] == 0.0
    step_3 = load_checkpoint(tmp_path / "a" / "checkpoints" / "step_00000003.pt")
    # Update 4 (3 of 6 done, the cooldown is the last 3): still the full rate.
    assert step_3["optimizer"]["param_groups"][0]["lr"] == pytest.approx(tiny_train_cfg().optim.lr)


# Short decodes: an untrained model decodes to the length limit, and the test split's BLEU is
# compared, not read.
RESUMED = ["trainer.val_every_n_steps=3", "model.dropout=0.1", "trainer.keep_last_checkpoints=2"]
RESUMED += SHORT_DECODE


@pytest.fixture(scope="module")
def straight_and_stopped(tmp_path_factory, cache_dir):
    """``(results, run dir)`` of an uninterrupted 6-update run, and the dir of the same run
    stopped after 3: trained once for both resume modes, which each resume a copy of it."""
    root = tmp_path_factory.mktemp("resume")

    def run(name: str, steps: int):
        base = [*TINY, f"run_dir={root / name}", f"data.cache_dir={cache_dir}", *RESUMED]
        return train(compose_config("train", [*base, f"trainer.max_steps={steps}"]))

    straight = run("a", 6)
    run("b", 3)
    return straight, root / "a", root / "b"


@pytest.mark.parametrize("mode", ["true", "auto"])
def test_resume_matches_an_uninterrupted_run(straight_and_stopped, tiny_train_cfg, tmp_path, mode):
    straight, straight_dir, stopped = straight_and_stopped
    run = shutil.copytree(stopped, tmp_path / "b")
    first = load_checkpoint(run / "checkpoints" / "last.pt")
    lr_at_3 = first["optimizer"]["param_groups"][0]["lr"]
    resumed = train(
        tiny_train_cfg(*RESUMED, "trainer.max_steps=6", f"trainer.resume={mode}", run_dir=run)
    )
    assert resumed["steps"] == 6
    a = load_checkpoint(straight_dir / "checkpoints" / "last.pt")
    b = load_checkpoint(run / "checkpoints" / "last.pt")
    for name, tensor in a["model"].items():
        torch.testing.assert_close(b["model"][name], tensor, msg=name)
    # The learning-rate curve continues: the resumed run's first update used step 3's lr.
    warmup = OmegaConf.to_container(tiny_train_cfg().optim)["warmup_steps"]
    peak = tiny_train_cfg().optim.lr
    assert lr_at_3 == pytest.approx(peak * Schedule(warmup)(3))
    assert resumed["bleu"] == pytest.approx(straight["bleu"])
    assert len(list((run / "checkpoints").glob("step_*.pt"))) == 2


@pytest.mark.parametrize(
    "override,message",
    [
        ("heads=3", "model.d_model=32 is not divisible by heads=3"),
        ("heads=0", "heads=0 must be >= 1"),
        ("model.attention_impl=flash", "model.attention_impl=flash is unknown"),
        ("runtime.precision=fp16", "fp16 needs a CUDA GPU"),
        ("runtime.precision=int8", "runtime.precision=int8 is unknown"),
        ("model.d_ff=-5", "model.d_ff=-5 must be > 0"),
    ],
)
def test_config_errors_are_one_readable_line(tiny_train_cfg, override, message):
    from translate.errors import UserError

    with pytest.raises(UserError) as err:
        train(tiny_train_cfg(override))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_sequence_loss_equals_torch_cross_entropy():
    from translate.nn.loss import sequence_loss

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=g)
    target = torch.randint(1, 11, (3, 5), generator=g)
    target[0, 3:] = 0
    for eps in (0.0, 0.1):
        loss, nll = sequence_loss(logits, target, pad_id=0, label_smoothing=eps)
        ref = torch.nn.functional.cross_entropy(
            logits.view(-1, 11), target.view(-1), ignore_index=0, label_smoothing=eps,
            reduction="sum",
        )  # fmt: skip
        torch.testing.assert_close(loss, ref)
        plain = torch.nn.functional.cross_entropy(
            logits.view(-1, 11), target.view(-1), ignore_index=0, reduction="sum"
        )
        torch.testing.assert_close(nll, plain)


def test_the_first_lines_say_what_the_run_does(tiny_train_cfg, monkeypatch, caplog):
    from translate.training import loop

    monkeypatch.setattr(loop, "ETA_AFTER_STEPS", 2)  # 200 updates in a real run
    threads = torch.get_num_threads()
    with caplog.at_level("INFO", logger="translate.training"):
        try:
            overrides = ("heads=1", "runtime.num_threads=1", "trainer.max_steps=4")
            train(tiny_train_cfg(*overrides, "trainer.val_every_n_steps=4"))
        finally:
            torch.set_num_threads(threads)  # runtime.num_threads is process-wide
    text = caplog.text
    assert "parameters, 1 head, d_model 32" in text
    assert "device: CPU (cpu, 1 thread), precision 32" in text
    assert re.search(r"sdpa kernels: \w+ for causal self-attention, \w+ with padding masks", text)
    assert "1,024 tokens per side x 1 accumulated = 1,024 padded tokens/update" in text
    assert re.search(
        r"step 2: [\d.]+ steps/s, [\d,]+ tokens/s; .* ends in about \d+:\d\d:\d\d", text
    )


def test_several_processes_under_torchrun_are_refused_in_one_line(tmp_path, monkeypatch):
    """Data-parallel training was removed (issue 38): under torchrun --nproc_per_node=2 each
    process would train the same model alone into the same run dir."""
    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun sets it, with RANK and LOCAL_RANK
    monkeypatch.setenv("RANK", "0")
    run = tmp_path / "run"
    proc = run_cli("translate.train", "experiment=quickstart", f"hydra.run.dir={run}")
    assert_one_line_error(
        proc,
        "multi-process training is not supported (WORLD_SIZE=2, set by torchrun)",
        "start python -m translate.train once per GPU",
        "one job per GPU",
    )
    assert not run.exists()


def test_a_run_cut_short_by_its_clock_says_so_last(tiny_train_cfg, tmp_path, caplog):
    overrides = ["trainer.max_minutes=0.001", "trainer.max_steps=100000"]
    with caplog.at_level("INFO", logger="translate"):
        results = train(tiny_train_cfg(*overrides))
    messages = [r.getMessage() for r in caplog.records]
    assert messages[-1].startswith("training ended on its clock (trainer.max_minutes=0.001) after")
    assert f"{results['steps']:,} of trainer.max_steps=100,000 updates" in messages[-1]
    assert f"results: {tmp_path / 'run' / 'results.json'}" in messages[-2]


def test_the_last_epoch_ends_the_run_with_a_validation_and_a_checkpoint(tiny_train_cfg, tmp_path):
    """max_epochs stops at the end of an epoch whose last update neither validation nor
    checkpointing had on its schedule: the run still validates and saves there."""
    never = ["trainer.val_every_n_steps=1000", "trainer.checkpoint_every_n_steps=1000"]
    epoch = ["trainer.max_epochs=1", "trainer.max_steps=1000", "data.max_tokens=4096"]
    results = train(tiny_train_cfg(*epoch, *never, *SHORT_DECODE))
    steps, run = results["steps"], tmp_path / "run"
    assert results["epochs_completed"] == 1 and 0 < steps < 1000
    assert load_checkpoint(run / "checkpoints" / "last.pt")["step"] == steps
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("dev/loss")] == [steps]
