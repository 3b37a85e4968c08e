"""Each rank's share of an epoch, and the validation outcome that rank 0 shares with the others.

Every rank computes the same length-bucketed batch order from the seed and the epoch
(:func:`nmt.data.batches.iterate_batches`), cuts it into groups of ``accum_steps x world_size`` consecutive
batches, one group per update, and takes every ``world_size``-th batch of each group from its rank on. A group's
batches are neighbours in the length-sorted order (similar lengths), so the ranks of an update finish their
share at about the same time. So one
process with ``accum_steps=2`` and two processes with ``accum_steps=1`` make the same updates from the same
batches, and every rank takes the same number of updates per epoch. The batches that fill no group (drawn at random) are
left out of that epoch (and said so in the log); they are other batches the next time.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import asdict

import torch

from nmt.data.batches import Batch, iterate_batches
from nmt.training.distributed import Distributed

log = logging.getLogger(__name__)


class UpdateBatches:
    """The batches of each update for this rank: ``accum_steps`` batches of ``batch_tokens`` padded tokens.

    Raises:
        ValueError: for ``accum_steps`` that is not a whole number >= 1.
    """

    def __init__(self, batch_tokens: int, accum_steps: int, dist: Distributed):
        if isinstance(accum_steps, bool) or not isinstance(accum_steps, int) or accum_steps < 1:
            raise ValueError(f"train.accum_steps={accum_steps} must be a whole number of batches per update >= 1")
        self.batch_tokens, self.accum, self.dist = batch_tokens, accum_steps, dist
        self.group = accum_steps * dist.world_size  # batches of all ranks per update
        self.left_out = 0
        self.told = False

    def epoch(self, pairs, seed: int, skip: int) -> Iterator[list[Batch]]:
        """This rank's batches of each update of one epoch (batch order from ``seed``), after the first ``skip``
        batches of the epoch (all ranks' together: a resumed epoch)."""
        current: list[Batch] = []
        self.left_out = 0
        for batch in iterate_batches(pairs, self.batch_tokens, shuffle=True, seed=seed, skip=skip, group=self.group):
            current.append(batch)
            if len(current) == self.group:
                yield current[self.dist.rank::self.dist.world_size]
                current = []
        self.left_out = len(current)

    def log_left_out(self, epoch: int) -> None:
        """Say (once per run) that the epoch's last batches did not fill an update and were left out."""
        if self.left_out and not self.told:
            log.info("epoch %d: its last %d batch(es) did not fill an update of %d batches (train.accum_steps=%d x "
                     "%d rank(s)) and were left out of it; every epoch shuffles anew, so they are other batches "
                     "each time (said once)", epoch, self.left_out, self.group, self.accum, self.dist.world_size)
            self.told = True


def share_validation(dist: Distributed, progress, optimizer, scheduler, stop: str | None) -> str | None:
    """After rank 0's validation: its progress (best BLEU, validations without a gain, training time), learning
    rates, plateau-schedule state and stop reason on every rank, so that all continue, or stop, alike.
    Returns the stop reason (unchanged on one rank)."""
    if not dist.active:
        return stop
    plateau = isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
    shared = dist.share({"progress": asdict(progress), "lrs": [group["lr"] for group in optimizer.param_groups],
                         "scheduler": scheduler.state_dict() if plateau else None, "stop": stop},
                        what="receiving rank 0's validation")
    if not dist.is_main:
        for key, value in shared["progress"].items():
            setattr(progress, key, value)
        for group, lr in zip(optimizer.param_groups, shared["lrs"]):
            group["lr"] = lr
        if plateau:
            scheduler.load_state_dict(shared["scheduler"])
    return shared["stop"]
