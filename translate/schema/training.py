"""The ``optim`` and ``trainer`` groups: the optimiser recipe and how a training run goes."""

from __future__ import annotations

from dataclasses import dataclass

from translate.errors import UserError
from translate.nn.config import doc, fraction, non_negative, positive


@dataclass(frozen=True)
class OptimSettings:
    lr: float = doc(
        "peak learning rate of Adam, reached after warmup_steps and then decayed as 1/sqrt(step)",
        "per update",
        check=positive,
    )
    betas: list = doc(
        "Adam's decay rates of the gradient's mean and square", "pair", "[b1, b2], each in [0, 1)"
    )
    eps: float = doc(
        "Adam's epsilon, added to the root of the squared-gradient average",
        "number",
        check=positive,
    )
    weight_decay: float = doc(
        "weight decay, decoupled from the gradient (AdamW; fairseq's Adam): each update "
        "shrinks every weight by lr * weight_decay of itself",
        "factor",
        "; 0 = off",
        check=non_negative,
    )
    warmup_steps: int = doc(
        "updates of linear learning-rate warm-up",
        "updates",
        "; 0 = a constant rate",
        check=non_negative,
    )
    cooldown: float = doc(
        "share of the training budget (trainer.max_steps or max_minutes, whichever ends "
        "first) over whose end the learning rate falls linearly to zero",
        "fraction",
        "; 0 = no cooldown",
        check=fraction,
    )
    label_smoothing: float = doc(
        "share of the target probability spread over the whole vocabulary",
        "fraction",
        check=fraction,
    )
    clip_norm: float = doc(
        "largest gradient L2 norm; larger gradients are scaled down",
        "norm",
        "; 0 = no clipping",
        check=non_negative,
    )
    cooldown_patience: int | None = doc(
        "validations without a new lowest dev loss after which the cooldown starts at once, "
        "over cooldown times the updates done, and training ends with it (a machine that "
        "trains more than its recipe needs stops overfitting)",
        "validations",
        "; null = the cooldown follows the budget only",
        check=positive,
        default=None,
    )

    def validate(self) -> None:
        if len(self.betas) != 2 or not all(0.0 <= float(b) < 1.0 for b in self.betas):
            raise UserError(f"optim.betas={self.betas} must be two numbers in [0, 1)")
        if self.cooldown_patience is not None and self.cooldown == 0:
            raise UserError(
                f"optim.cooldown_patience={self.cooldown_patience} needs a cooldown: set "
                "optim.cooldown (e.g. 0.2) or optim.cooldown_patience=null"
            )


@dataclass(frozen=True)
class TrainerSettings:
    compile: bool = doc("torch.compile the model", "flag", "true | false")
    max_steps: int = doc(
        "updates to train for; training stops at whichever limit comes first",
        "updates",
        check=positive,
    )
    max_epochs: int = doc("passes over the training split", "epochs", check=positive)
    max_minutes: float | None = doc(
        "wall-clock budget of the training loop", "minutes", "; null = no limit", check=positive
    )
    accumulate_grad_batches: int = doc(
        "batches whose gradients add up to one update", "batches", check=positive
    )
    log_every_n_steps: int = doc(
        "how often the loss and rates are logged", "updates", check=positive
    )
    val_every_n_steps: int = doc(
        "how often the dev loss and dev BLEU are measured", "updates", check=positive
    )
    val_bleu_sentences: int | None = doc(
        "dev BLEU during training on this fixed prefix of the dev split",
        "sentences",
        "; null = all",
        check=positive,
    )
    val_beam_size: int = doc(
        "beam of the dev BLEU during training (the final test decodes with decode.*)",
        "hypotheses",
        "; 1 = greedy",
        check=positive,
    )
    early_stopping_patience: int | None = doc(
        "validations without a dev BLEU gain before training stops",
        "validations",
        "; null = off",
        check=positive,
    )
    checkpoint_every_n_steps: int = doc(
        "how often a step checkpoint is written", "updates", check=positive
    )
    keep_last_checkpoints: int = doc(
        "step checkpoints kept, the newest", "checkpoints", check=positive
    )
    average_last_n: int = doc(
        "at the end, average the newest N step checkpoints into averaged.pt; the test split is "
        "scored with it if its dev BLEU beats best.pt",
        "checkpoints",
        " (0: off), <= trainer.keep_last_checkpoints",
        check=non_negative,
    )
    max_bad_steps: int = doc(
        "NaN or infinite losses in a row before the run stops", "updates", check=positive
    )
    resume: bool | str = doc(
        "continue from the newest checkpoint in <run_dir>/checkpoints/ that loads (each one "
        "there must be this experiment's). true: one must be there (a sweep job without one "
        "starts); auto: continue a run that is there, start where the dir holds none; false: "
        "start, refusing a dir that holds a run",
        "mode",
        "true | false | auto",
        mechanics=True,
    )
    overwrite: bool = doc(
        "a fresh run into a dir that holds another run's checkpoints or results removes them "
        "first (else it stops)",
        "flag",
        "true | false",
        mechanics=True,
    )
    latency_sentences: int = doc(
        "test sentences the batch-1 latency is measured on", "sentences", check=positive
    )
    progress_bar: bool = doc("show a progress bar", "flag", "true | false", mechanics=True)
    attention_heatmaps: bool = doc(
        "every head's attention on one dev pair to TensorBoard (group viz, one image per layer "
        "and attention kind, drawn for its Images tab), at the validations "
        "heatmap_every_n_validations picks",
        "flag",
        "true | false",
        mechanics=True,
    )
    heatmap_every_n_validations: int = doc(
        "draw the heatmaps at every Nth validation and at the last (each drawing takes a "
        "second or so per layer and attention kind)",
        "validations",
        check=positive,
        mechanics=True,
    )
    deterministic: bool = doc(
        "torch's deterministic kernels (torch.use_deterministic_algorithms); an operation "
        "without one stops the run. The same weights again need the same code, CPU family, "
        "thread count and a step budget with or without it (docs/training.md, Reproducibility)",
        "flag",
        "true | false",
    )
    average_around_best: bool = doc(
        "when best.pt is older than the newest trainer.average_last_n step checkpoints (the "
        "dev BLEU fell since), average the average_last_n around it instead; the step "
        "checkpoints near the best are kept for it (nothing to do when average_last_n is 0)",
        "switch",
        "true | false",
    )

    def validate(self) -> None:
        if self.resume not in (True, False, "auto"):
            raise UserError(
                f"trainer.resume={self.resume} is unknown; choose one of true, false, auto"
            )
        if self.average_last_n > self.keep_last_checkpoints:
            raise UserError(
                f"trainer.average_last_n={self.average_last_n} must be <= "
                f"trainer.keep_last_checkpoints={self.keep_last_checkpoints}: only that many "
                "step checkpoints are kept; raise trainer.keep_last_checkpoints or lower "
                "trainer.average_last_n"
            )
