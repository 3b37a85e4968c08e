"""The training loop: updates until a stop condition (``max_steps``, ``max_epochs``, ``max_minutes``, early
stopping, a signal), validating every ``valid_every`` steps.
"""

from __future__ import annotations

import logging
import shlex
import time
from pathlib import Path

import torch

from nmt.data.batches import iterate_batches
from nmt.data.corpus import Parallel
from nmt.training.ema import ExponentialMovingAverage
from nmt.training.loss import loss_fn
from nmt.training.meter import Meter
from nmt.training.schedule import BudgetDecay
from nmt.training.signals import stop_on_signals
from nmt.training.state import Progress, save_state
from nmt.training.validation import patience_spent, validate

log = logging.getLogger(__name__)


def train_step(model, optimizer, batch, t) -> tuple[float, int]:
    """One update: teacher-forced loss (label-smoothed, per target token), backward, clipping, Adam.
    Returns the summed loss (nats) and the number of target tokens.

    Raises:
        FloatingPointError: for a gradient norm (or loss) that is nan or inf (training diverged: a learning rate
            too high); this update is not applied (clipping would have spread the nan/inf into every weight).
    """
    logits, _ = model(batch.src, batch.src_mask, batch.tgt_in)
    ntok = batch.num_tgt_tokens
    loss = loss_fn(logits, batch.tgt_out, t.label_smoothing)
    optimizer.zero_grad(set_to_none=True)
    (loss / ntok).backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), t.clip)
    if not torch.isfinite(norm):
        raise FloatingPointError(f"training diverged: gradient norm {float(norm)}, loss "
                                 f"{float(loss.detach()) / ntok:.4g} nats per target token; this update was not "
                                 f"applied. Train again, or resume from a checkpoint, with a lower train.lr (it is "
                                 f"{t.lr:g}; the rate at this step was {optimizer.param_groups[0]['lr']:g})")
    optimizer.step()
    return float(loss.detach()), ntok


def train_loop(cfg, model, optimizer, scheduler, epoch_pairs, valid_pairs, valid: Parallel, toks, run_dir, device,
               progress: Progress, overrides=(), ema: ExponentialMovingAverage | None = None) -> str:
    """Update until max_steps / max_epochs / max_minutes / early stopping / a signal; validate every
    ``valid_every`` steps and at the stop. Batches of epoch e come from seed ``cfg.seed + e``, so a resumed
    run skips the batches already seen and continues with the same order. ``epoch_pairs(epoch)`` gives the
    encoded training pairs of an epoch. With ``ema`` the average follows every update, and validation and
    checkpoints use it. Returns why it stopped."""
    t = cfg.train
    start = time.monotonic() - progress.train_seconds
    meter = Meter(t, progress)
    model.train()

    def check(stop):
        progress.train_seconds = time.monotonic() - start
        if stop or progress.step % t.valid_every == 0:
            stop = validate(cfg, model, optimizer, scheduler, valid_pairs, valid, toks, run_dir, device,
                            progress, meter.record() if meter.steps else {}, ema) or stop
            meter.reset()  # validation time is not training time
        return stop

    if stop := stop_reason(t, progress, progress.train_seconds) or patience_spent(t, progress):  # resumed at the end
        if progress.validated_step != progress.step:  # stopped by a signal on its last step: validate it now
            stop = check(stop)
        log.info("nothing left to train at step %d: %s", progress.step, stop)
        meter.bar.close()
        return stop
    with stop_on_signals() as flag:
        while True:
            for batch in iterate_batches(epoch_pairs(progress.epoch), t.batch_tokens, shuffle=True,
                                         seed=cfg.seed + progress.epoch, skip=progress.batch_in_epoch):
                if isinstance(scheduler, BudgetDecay):
                    scheduler.update(progress.step, time.monotonic() - start)
                try:
                    loss, ntok = train_step(model, optimizer, batch.to(device), t)
                except FloatingPointError as err:
                    meter.bar.close()  # on a terminal, the error line would land on the progress bar's
                    raise FloatingPointError(f"step {progress.step + 1}: {err}") from None
                progress.step += 1
                if ema is not None:
                    ema.update()
                progress.batch_in_epoch += 1
                meter.update(loss, ntok, progress, (time.monotonic() - start) / 60, optimizer.param_groups[0]["lr"])
                if flag["signal"]:
                    break
                stop = check(stop_reason(t, progress, time.monotonic() - start))
                if stop:
                    break
            else:
                progress.epoch += 1
                progress.batch_in_epoch = 0
                stop = stop_reason(t, progress, time.monotonic() - start)
                if stop and meter.steps:
                    stop = check(stop)
            if stop or flag["signal"]:
                break
        if flag["signal"]:  # after a step, or during the last validation: no final evaluation
            meter.bar.close()
            return interrupted(cfg, model, optimizer, scheduler, toks, run_dir, progress, flag["signal"],
                               time.monotonic() - start, overrides, ema)
    meter.bar.close()
    log.info("training stopped after %d steps (%d epochs, %.1f min): %s", progress.step, progress.epoch,
             progress.train_seconds / 60, stop)
    used = scheduler.used(progress.step, progress.train_seconds) if isinstance(scheduler, BudgetDecay) else 1.0
    if used < 1.0:
        log.warning("training stopped (%s) after %.0f%% of the learning-rate budget, at rate %.3g instead of "
                    "min_lr: set train.max_epochs=null / train.patience=null to let the decay finish", stop,
                    100 * used, optimizer.param_groups[0]["lr"])
    return stop


def interrupted(cfg, model, optimizer, scheduler, toks, run_dir: Path, progress: Progress, name: str,
                elapsed: float, overrides=(), ema: ExponentialMovingAverage | None = None) -> str:
    """Save ``last.pt`` (with ``ema``: the average as its model, the raw weights to resume from) after a signal and
    print the command that resumes (the run's own command-line ``overrides`` repeated, so its budget and schedule
    carry over); returns the stop reason."""
    progress.train_seconds = elapsed
    save_state(run_dir / "checkpoints" / "last.pt", cfg, model, optimizer, scheduler, toks, progress, ema)
    last = (run_dir / "checkpoints" / "last.pt").resolve()
    keep = [o for o in overrides if not o.startswith(("hydra.run.dir=", "train.resume="))]
    log.warning("%s: stopped at step %d and saved %s. Resume with:\n  python train.py %s", name, progress.step,
                last, shlex.join([*keep, f"train.resume={last}", f"hydra.run.dir={run_dir.resolve()}"]))
    return f"interrupted by {name}"


def stop_reason(t, progress: Progress, elapsed: float) -> str | None:
    """Why training should stop now, or None."""
    if t.max_steps and progress.step >= t.max_steps:
        return f"max_steps={t.max_steps} reached"
    if t.max_epochs and progress.epoch >= t.max_epochs:
        return f"max_epochs={t.max_epochs} reached"
    if t.max_minutes and elapsed >= 60 * t.max_minutes:
        return f"max_minutes={t.max_minutes} reached"
    return None
