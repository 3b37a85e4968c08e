"""Optimizer and learning-rate schedules: Adam with ``plateau`` (on validation BLEU), ``budget`` (linear decay over
the training budget, optionally only over its last part) or ``constant``; the checks that refuse bad settings
before any work is done.
"""

from __future__ import annotations

import logging

import torch

log = logging.getLogger(__name__)


class BudgetDecay:
    """Linear learning-rate decay over the training budget (Li et al. 2020, "Budgeted Training: Rethinking Deep
    Neural Network Training Under Resource Constraints", ICLR; its linear schedule): the rate stays at
    ``lr`` until the fraction ``start`` of the budget is used, then falls linearly to ``min_lr`` at its end.

    The budget is ``train.max_minutes`` (training wall time, validation included) and/or ``train.max_steps``;
    with both, the one closer to its end counts. The update after step k of a K-step budget uses
    ``lr - (lr - min_lr) k / K`` (so the last one is within (lr - min_lr) / K of min_lr; ``min_lr: null`` decays
    towards 0). The rate is a function of the step and the elapsed time only, so a resumed run with the same
    budget continues on the same schedule (no state to save); a changed budget moves the rate at once.

    Raises:
        ValueError: for the settings :func:`check_schedule` refuses.
    """

    def __init__(self, optimizer, t):
        check_schedule(t, warn=False)
        self.start = float(t.get("lr_decay_start") or 0.0)
        self.optimizer, self.lr, self.min_lr = optimizer, float(t.lr), float(t.min_lr or 0.0)
        self.max_steps, self.max_seconds = t.get("max_steps"), 60.0 * (t.get("max_minutes") or 0)

    def used(self, step: int, elapsed_sec: float) -> float:
        """The fraction of the budget used, in [0, 1]."""
        fractions = [step / self.max_steps] if self.max_steps else []
        fractions += [elapsed_sec / self.max_seconds] if self.max_seconds else []
        return min(max(fractions), 1.0)

    def rate(self, step: int, elapsed_sec: float) -> float:
        """The learning rate after ``step`` updates and ``elapsed_sec`` seconds of training."""
        decay = max(self.used(step, elapsed_sec) - self.start, 0.0) / (1.0 - self.start)
        return self.lr + (self.min_lr - self.lr) * decay

    def update(self, step: int, elapsed_sec: float) -> None:
        """Set the rate of every parameter group for the next update."""
        for group in self.optimizer.param_groups:
            group["lr"] = self.rate(step, elapsed_sec)

    def state_dict(self) -> dict:
        """Empty: the rate follows from the step and elapsed time that the checkpoint's progress keeps."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Nothing to restore (see :meth:`state_dict`)."""


SCHEDULE_KEYS = {  # the train.* settings that set the learning rate, per scheduler (a resume warns when they change)
    "plateau": ("lr_scheduler", "lr", "min_lr", "lr_factor", "lr_patience"),
    "budget": ("lr_scheduler", "lr", "min_lr", "lr_decay_start", "max_steps", "max_minutes"),
    "constant": ("lr_scheduler", "lr"),
}


SCHEDULERS = tuple(SCHEDULE_KEYS)


def check_schedule(t, warn: bool = True) -> None:
    """Check the learning-rate settings of ``cfg.train`` before any work is done; with ``warn``, also log the
    settings that work against each other (``lr_decay_start`` without the budget schedule; early stopping with
    it, which can end the run before the rate has decayed).

    Raises:
        ValueError: for an unknown ``lr_scheduler``; for ``budget`` without a positive ``max_minutes`` or
            ``max_steps``, with ``lr_decay_start`` not a number in [0, 1), or with ``min_lr`` above ``lr``.
    """
    if t.lr_scheduler not in SCHEDULERS:
        raise ValueError(f"train.lr_scheduler must be 'plateau', 'budget' or 'constant', got {t.lr_scheduler!r}")
    start = t.get("lr_decay_start") or 0.0
    if t.lr_scheduler != "budget":
        if start and warn:
            log.warning("train.lr_decay_start=%s is ignored: it applies to train.lr_scheduler=budget only", start)
        return
    if not (t.get("max_minutes") or 0) > 0 and not (t.get("max_steps") or 0) > 0:
        raise ValueError("train.lr_scheduler=budget decays the rate over the training budget: set a positive "
                         "train.max_minutes and/or train.max_steps (or use train.lr_scheduler=plateau)")
    if isinstance(start, bool) or not isinstance(start, (int, float)) or not 0.0 <= start < 1.0:
        raise ValueError(f"train.lr_decay_start is the fraction of the budget spent at the full rate before the "
                         f"decay begins: a number in [0, 1), got {start!r}")
    if (t.get("min_lr") or 0.0) > t.lr:
        raise ValueError(f"train.min_lr={t.min_lr} is above train.lr={t.lr}: the budget schedule decays from lr "
                         f"to min_lr, so min_lr must be smaller")
    if warn and t.get("patience"):
        log.warning("train.patience=%s: early stopping can end the run before the budget schedule has decayed the "
                    "rate (the decay is where it gains most); set train.patience=null to train for the whole "
                    "budget", t.patience)


FUSED_ADAM_ON_CPU = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 4)


def make_optimizer(model, cfg):
    """Adam (PyTorch's fused kernel, one pass over all parameters, where torch has it) and the configured learning-rate schedule:
    ``plateau`` (multiply by lr_factor when validation BLEU stops rising), ``budget`` (:class:`BudgetDecay`,
    linear decay over max_minutes / max_steps) or ``constant``.

    Raises:
        ValueError: for another ``train.lr_scheduler`` name.
    """
    # the fused kernel runs on CPU from torch 2.4 (and on CUDA before); older versions get the multi-tensor one
    kernel = "fused" if FUSED_ADAM_ON_CPU or all(p.is_cuda for p in model.parameters()) else "foreach"
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.train.lr, **{kernel: True})
    if cfg.train.lr_scheduler == "plateau":
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, mode="max", factor=cfg.train.lr_factor, patience=cfg.train.lr_patience,
            min_lr=cfg.train.min_lr or 0.0)  # null = no floor, as for the budget schedule
    elif cfg.train.lr_scheduler == "budget":
        scheduler = BudgetDecay(optimizer, cfg.train)
    elif cfg.train.lr_scheduler == "constant":
        scheduler = None
    else:
        check_schedule(cfg.train)  # raises for the unknown name
    return optimizer, scheduler
