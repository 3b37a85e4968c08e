"""Training state: where a run stands (:class:`Progress`), full checkpoints (``last.pt``/``best.pt``: weights,
optimizer, scheduler, progress, RNG), the moving average, and putting a saved state back.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from nmt.models import checkpoint
from nmt.training.ema import ExponentialMovingAverage
from nmt.training.schedule import BudgetDecay

log = logging.getLogger(__name__)


@dataclass
class Progress:
    """Where training stands; saved in checkpoints as plain data."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    best_bleu: float = -1.0
    best_step: int = 0
    bad_validations: int = 0
    train_seconds: float = 0.0
    validated_step: int = 0  # the step of the last validation (a resume at a stop validates unless it was done)
    world_size: int = 1  # the ranks that trained it (batch_in_epoch counts the batches of all ranks together)


def rng_states(dist) -> list | None:
    """Every rank's torch RNG state ``[5056]`` uint8 (rank order) under several ranks, so that a resume on the
    same number of ranks continues each rank's dropout sequence; None on one rank. Every rank must call it."""
    return dist.gather(torch.get_rng_state()) if dist.active else None


def save_state(path: Path, cfg, model, optimizer, scheduler, toks, progress: Progress,
               ema: ExponentialMovingAverage | None = None, rank_rngs: list | None = None,
               extra: dict | None = None) -> None:
    """A full training checkpoint: weights, optimizer, scheduler, progress and the torch RNG states (CPU, and
    every CUDA device's when CUDA is in use, so dropout continues its sequence after a resume on a GPU).

    With ``ema`` (``train.ema_decay``) the checkpoint's ``model`` is the average of the weights, the one validated
    and translated, ``train_weights`` the raw weights that training continues from, and ``ema_updates`` how many
    updates the average has followed (:func:`resume_from` puts them back). ``optimizer=None`` leaves the optimizer
    state out (``train.best_optimizer=false``: about a third of the size; a resume from it starts Adam afresh).
    ``extra``: more entries to store (plain data and tensors), e.g. the reverse model of ``train.agreement``."""
    rng = {"torch": torch.get_rng_state()}
    if rank_rngs is not None:
        rng["ranks"] = rank_rngs
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    state = {"optimizer": optimizer.state_dict() if optimizer is not None else None,
             "scheduler": scheduler.state_dict() if scheduler else None,
             "progress": asdict(progress), "rng": rng}
    state.update(extra or {})
    if ema is not None:
        state.update(weights=ema.averaged_state(model), train_weights=model.state_dict(), ema_updates=ema.updates)
    checkpoint.save(path, model, cfg, *toks, **state)


def moving_average(t, model, payload: dict | None) -> ExponentialMovingAverage | None:
    """The moving average of the weights for ``t.ema_decay`` (``cfg.train``; None when it is null): after a resume
    from a checkpoint written with one, it continues the saved average (``payload["averaged_weights"]``, see
    :func:`resume_from`), else it starts from the model's weights with a fresh warm-up.

    Raises:
        ValueError: for a decay outside [0.5, 1).
    """
    if t.get("ema_decay") is None:
        return None
    saved = (payload or {}).get("averaged_weights")
    return ExponentialMovingAverage(model, t.ema_decay, start=saved,
                                    updates=payload.get("ema_updates", 0) if saved is not None else 0)


def restore(payload: dict, optimizer, scheduler, t, dist=None) -> Progress:
    """Load the optimizer, scheduler and torch RNG states of a full checkpoint's ``payload`` (as returned by
    :func:`resume_from`) into the new run; returns its :class:`Progress`.

    ``t`` is this run's ``cfg.train``: where it changes the schedule, the change applies from here, as the
    resume warning says. A plateau schedule keeps what it counted (best BLEU, validations without a gain) but
    takes this run's ``lr_factor``, ``lr_patience`` and ``min_lr``; a new ``train.lr`` (or a new schedule) sets
    the rate to it (the budget schedule sets the rate at every step anyway).
    """
    if payload.get("optimizer") is not None:
        optimizer.load_state_dict(payload["optimizer"])
    else:  # a best.pt written with train.best_optimizer=false
        log.warning("the checkpoint holds no optimizer state (train.best_optimizer=false): Adam's moment estimates "
                    "start afresh from here")
    saved = (payload.get("config") or {}).get("train") or {}
    same_schedule = saved.get("lr_scheduler") == t.lr_scheduler
    if scheduler is not None and payload.get("scheduler") and same_schedule:
        ours = {key: getattr(scheduler, key) for key in ("factor", "patience", "min_lrs", "eps")
                if hasattr(scheduler, key)}  # ReduceLROnPlateau's settings, from this run's config
        scheduler.load_state_dict(payload["scheduler"])  # (its load_state_dict overwrites them with the saved ones)
        scheduler.__dict__.update(ours)
    if t.lr_scheduler != "budget" and (saved.get("lr") != t.lr or not same_schedule):
        for group in optimizer.param_groups:
            group["lr"] = t.lr
        log.info("learning rate set to train.lr=%s from here", t.lr)
    # a checkpoint from before validated_step was kept was written by a validation, or after a signal
    progress = Progress(**{"validated_step": payload["progress"].get("step", 0), **payload["progress"]})
    restore_rng(payload["rng"], dist, progress)
    log.info("resumed at step %d (epoch %d, batch %d of that epoch)", progress.step, progress.epoch,
             progress.batch_in_epoch)
    if isinstance(scheduler, BudgetDecay):
        log.info("budget schedule: %.0f%% of the budget used, learning rate %.3g from here",
                 100 * scheduler.used(progress.step, progress.train_seconds),
                 scheduler.rate(progress.step, progress.train_seconds))
    return progress


def restore_rng(rng: dict, dist, progress: Progress) -> None:
    """Put back the RNG states of a checkpoint: this rank's own under several ranks when the checkpoint was
    written by as many (``rng["ranks"]``), else rank 0's saved state on rank 0 and a fresh seed elsewhere
    (warned: the run continues with the new share, but not as an uninterrupted run would). The ranks of the
    checkpoint and of this run are compared through ``progress.world_size``, which is set to this run's."""
    world, rank = (dist.world_size, dist.rank) if dist is not None else (1, 0)
    ranks = rng.get("ranks")
    if world > 1 and ranks is not None and len(ranks) == world:
        torch.set_rng_state(ranks[rank].cpu())
    elif rank == 0:
        torch.set_rng_state(rng["torch"].cpu())
    if progress.world_size != world and rank == 0:
        log.warning("resuming on %d rank(s) a run trained on %d: each rank takes its new share of the same batch "
                    "order from here, but dropout's random numbers differ from an uninterrupted run",
                    world, progress.world_size)
    progress.world_size = world
    if rng.get("cuda") and torch.cuda.is_available() and len(rng["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([state.cpu() for state in rng["cuda"]])
