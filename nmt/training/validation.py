"""Validation: perplexity and greedy BLEU every ``train.valid_every`` steps, metrics.jsonl, ``best.pt``,
``step_N.pt`` and ``last.pt``, early stopping.
"""

from __future__ import annotations

import json
import logging
import math
import time
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path

import torch

from nmt.data.batches import iterate_batches
from nmt.data.corpus import Parallel
from nmt.decoding.scoring import greedy_bleu
from nmt.models import checkpoint
from nmt.training.average import select_checkpoints
from nmt.training.ema import ExponentialMovingAverage
from nmt.training.loss import loss_fn
from nmt.training.state import Progress, save_state

log = logging.getLogger(__name__)


@torch.no_grad()
def validation_loss(model, pairs, batch_tokens: int, device) -> float:
    """Mean per-token cross-entropy (nats, no label smoothing) of ``pairs`` under teacher forcing."""
    model.eval()
    total, tokens = 0.0, 0
    for batch in iterate_batches(pairs, batch_tokens, shuffle=False):
        batch = batch.to(device)
        logits, _ = model(batch.src, batch.src_mask, batch.tgt_in)
        total += float(loss_fn(logits, batch.tgt_out))
        tokens += batch.num_tgt_tokens
    model.train()
    return total / max(tokens, 1)


def validate(cfg, model, optimizer, scheduler, valid_pairs, valid: Parallel, toks, run_dir, device,
             progress: Progress, record: dict, ema: ExponentialMovingAverage | None = None,
             rank_rngs: list | None = None) -> str | None:
    """Validation loss/perplexity and greedy BLEU; checkpoints; metrics.jsonl. Returns a stop reason or None.

    ``best.pt`` and the step checkpoint are written before ``last.pt``, so the best BLEU that ``last.pt``
    records is on disk even when the process is killed between the writes; the time the checkpoints record
    includes this validation (the budget counts it), so a resumed budget schedule continues where it was.
    With ``ema`` the average of the weights is validated and is the model of ``best.pt``, ``step_N.pt`` and
    ``last.pt`` (``best.pt`` and ``last.pt`` also keep the raw weights to resume from)."""
    began = time.monotonic()
    with ema.applied() if ema is not None else nullcontext():
        valid_loss = validation_loss(model, valid_pairs, cfg.train.batch_tokens, device)
        bleu = greedy_bleu(model, *toks, valid.src, valid.tgt, cfg.decode, device, cfg.data.tgt_lang)
    model.train()
    record = {"step": progress.step, "epoch": progress.epoch, **record, "valid_loss": valid_loss,
              "valid_ppl": math.exp(min(valid_loss, 50)), "valid_bleu": bleu, "lr": optimizer.param_groups[0]["lr"],
              "elapsed_sec": round(progress.train_seconds, 1)}
    with open(run_dir / "metrics.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
    log.info("step %d: valid loss %.3f ppl %.2f BLEU %.2f (%.0f tok/s)", progress.step, valid_loss,
             record["valid_ppl"], bleu, record.get("tokens_per_sec", 0.0))
    improved = bleu > progress.best_bleu
    if improved:
        progress.best_bleu, progress.best_step, progress.bad_validations = bleu, progress.step, 0
    else:
        progress.bad_validations += 1
    if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
        scheduler.step(bleu)
    progress.validated_step = progress.step
    progress.train_seconds += time.monotonic() - began
    if improved:
        save_state(run_dir / "checkpoints" / "best.pt", cfg, model, optimizer, scheduler, toks, progress, ema,
                   rank_rngs)
    if cfg.train.get("keep_best"):
        keep_step_checkpoint(cfg, model, toks, run_dir, progress, ema)
    save_state(run_dir / "checkpoints" / "last.pt", cfg, model, optimizer, scheduler, toks, progress, ema,
               rank_rngs)
    return patience_spent(cfg.train, progress)


def patience_spent(t, progress: Progress) -> str | None:
    """The early-stopping reason once ``train.patience`` validations in a row brought no BLEU gain, else None."""
    if t.patience and progress.bad_validations >= t.patience:
        return f"no validation BLEU gain in {t.patience} validations (early stopping)"
    return None


def keep_step_checkpoint(cfg, model, toks, run_dir: Path, progress: Progress,
                         ema: ExponentialMovingAverage | None = None) -> None:
    """Save weights-only ``checkpoints/step_N.pt`` (the moving average of the weights with ``ema``) and delete the
    step checkpoints that are no longer among the ``train.keep_best`` best by validation BLEU (the inputs of
    checkpoint averaging)."""
    ckpt_dir = run_dir / "checkpoints"
    checkpoint.save(ckpt_dir / f"step_{progress.step}.pt", model, cfg, *toks,
                    weights=None if ema is None else ema.averaged_state(model), progress=asdict(progress))
    keep = set(select_checkpoints(run_dir, best=cfg.train.keep_best))
    for path in ckpt_dir.glob("step_*.pt"):
        if path not in keep:
            path.unlink()
