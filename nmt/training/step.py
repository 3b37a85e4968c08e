"""One update: the teacher-forced loss of K batches (gradient accumulation), backward, clipping, Adam; under
several ranks the gradients are averaged by DistributedDataParallel, and under mixed precision the forward runs
in bf16 or fp16 (autocast) while the weights, the optimizer state and the checkpoints stay fp32.

The loss is normalised by the update's **global** target-token count: every rank's summed token loss is divided
by (all ranks' tokens / world size), and DDP's average over the ranks then gives ``sum of token losses / global
tokens``, the same update as one process taking all the batches.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch

from nmt.data.batches import Batch
from nmt.models.precision import FP32, Precision
from nmt.training.distributed import Distributed
from nmt.training.loss import loss_fn


def diverged(norm: torch.Tensor, loss: float, ntok: int, t, optimizer) -> FloatingPointError:
    """The error of a nan/inf gradient norm (the update is not applied)."""
    return FloatingPointError(f"training diverged: gradient norm {float(norm)}, loss {loss / ntok:.4g} nats per "
                              f"target token; this update was not applied. Train again, or resume from a checkpoint, "
                              f"with a lower train.lr (it is {t.lr:g}; the rate at this step was "
                              f"{optimizer.param_groups[0]['lr']:g})")


def batch_loss(model, batch: Batch, label_smoothing: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The teacher-forced loss of one batch: ``(objective, reported)``, here the same summed label-smoothed
    cross-entropy twice (:func:`nmt.training.agreement.joint_objective` is the joint training's)."""
    logits, _ = model(batch.src, batch.src_mask, batch.tgt_in)
    loss = loss_fn(logits.float(), batch.tgt_out, label_smoothing)
    return loss, loss


def train_step(model, optimizer, batches: Batch | list[Batch], t, dist: Distributed | None = None,
               precision: Precision = FP32, parameters=None, objective=batch_loss) -> tuple[float, int]:
    """One update from ``batches`` (this rank's K batches; one Batch is K=1): label-smoothed loss, backward of
    each batch (DDP's ``no_sync`` around the forward and backward of all but the last, so the gradients are
    all-reduced once), clipping to ``t.clip``, Adam. ``model`` may be the DDP wrapper; ``parameters`` are the
    weights to clip (default: the model's). ``objective(model, batch, label_smoothing)`` gives the summed loss to
    minimise and the one to report (:func:`batch_loss`). Returns this rank's summed reported loss (nats) and the
    update's global number of target tokens.

    Raises:
        FloatingPointError: for a gradient norm that is nan or inf (training diverged: a learning rate too high);
            this update is not applied (clipping would have spread the nan/inf into every weight). Under fp16 an
            inf norm is the scaler's overflow instead: the update is skipped and the scale lowered, as usual.
        nmt.training.distributed.DistributedError: when a peer rank died or did not answer in time.
    """
    batches = [batches] if isinstance(batches, Batch) else batches
    dist = dist or Distributed()
    local = sum(batch.num_tgt_tokens for batch in batches)
    ntok = dist.total(local)
    share = ntok / dist.world_size  # DDP averages over the ranks: sum / share / N = sum / ntok
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for i, batch in enumerate(batches):
        last = i == len(batches) - 1
        with (model.no_sync() if dist.active and not last else nullcontext()):
            with precision.autocast():
                minimised, loss = objective(model, batch, t.label_smoothing)
            scaled = minimised / share
            try:
                (precision.scaler.scale(scaled) if precision.scaler else scaled).backward()
            except RuntimeError as err:
                if dist.active and last:  # DDP's all-reduce runs inside this backward
                    raise dist.peer_failure("the gradient all-reduce", err) from None
                raise
        total += float(loss.detach())
    parameters = list(model.parameters()) if parameters is None else parameters
    if precision.scaler:
        precision.scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(parameters, t.clip)
    if precision.scaler:
        precision.scaler.step(optimizer)  # skipped on an overflow (inf norm)
        precision.scaler.update()
        return total, ntok
    if not torch.isfinite(norm):
        raise diverged(norm, total, ntok, t, optimizer)
    optimizer.step()
    return total, ntok
