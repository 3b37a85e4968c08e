"""Training state: where a run stands (:class:`Progress`), full checkpoints (``last.pt``/``best.pt``: weights,
optimizer, scheduler, progress, RNG) and resuming from them.

A resumed run continues the same model on the same data: its architecture, tokenizers and corpus come from the
checkpoint (``FROM_CHECKPOINT``), only the training settings from the command line.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from nmt import checkpoint
from nmt.curves import read_curve
from nmt.schedule import SCHEDULE_KEYS, BudgetDecay
from nmt.textio import atomic_write

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


def save_state(path: Path, cfg, model, optimizer, scheduler, toks, progress: Progress) -> None:
    """A full training checkpoint: weights, optimizer, scheduler, progress and the torch RNG state."""
    checkpoint.save(path, model, cfg, *toks, optimizer=optimizer.state_dict(),
                    scheduler=scheduler.state_dict() if scheduler else None, progress=asdict(progress),
                    rng={"torch": torch.get_rng_state()})


FROM_CHECKPOINT = ("model", "attention", "decoder", "tokenizer", "data")  # what a resumed run cannot change


def resume_from(path, cfg, run_dir: Path, device):
    """Model, tokenizers and data config from a checkpoint to resume; its SentencePiece models are copied to
    ``run_dir/spm``.

    The architecture and the corpus (``data``, with its paths already absolute) come from the checkpoint's own
    config, so a resumed run trains on the same data; a different one on the command line is ignored with a
    warning, and so does a changed learning-rate schedule. Resuming into another run folder copies the
    checkpoint's ``best.pt`` and ``step_N.pt`` along, and its run's ``metrics.jsonl`` records up to the
    checkpoint's step, so the final evaluation and averaging still see them.
    Returns ``(model, src_tok, tgt_tok, payload, cfg)``: ``cfg`` is the command line's config with those groups
    (``FROM_CHECKPOINT``) taken from the checkpoint, so the checkpoints, logs and scores of the resumed run
    describe the model it trains.

    Raises:
        FileNotFoundError / nmt.checkpoint.CheckpointError: as :func:`nmt.checkpoint.load`, and for a checkpoint
            that holds weights only (``step_N.pt``, ``averaged.pt``): resume from ``last.pt`` (or ``best.pt``).
    """
    model, ckpt_cfg, src_tok, tgt_tok, payload = checkpoint.load(path, device)
    missing = [key for key in ("optimizer", "progress", "rng") if key not in payload]
    if missing:
        raise checkpoint.CheckpointError(
            f"{path} holds weights only (no {', '.join(missing)}), so training cannot continue from it: resume from "
            f"the run's checkpoints/last.pt (or best.pt), or start a new run")
    for key in FROM_CHECKPOINT:
        if changed := checkpoint.differences(ckpt_cfg.get(key), cfg.get(key), key):
            log.warning("resuming %s: %s comes from the checkpoint, not from this run's settings: %s", path, key,
                        "; ".join(f"{name}={before} (this run: {now})" for name, before, now in changed))
    for key in SCHEDULE_KEYS.get(ckpt_cfg.train.get("lr_scheduler"), SCHEDULE_KEYS["budget"]):
        before, now = ckpt_cfg.train.get(key), cfg.train.get(key)
        if before != now:
            log.warning("resuming %s: train.%s was %s when it was saved and is %s now; the learning-rate schedule "
                        "changes from here (repeat the original train.* settings to continue it unchanged)",
                        path, key, before, now)
    source_dir, target_dir = Path(path).resolve().parent, (run_dir / "checkpoints").resolve()
    if source_dir != target_dir:  # resuming into a new folder: bring the best checkpoints along
        target_dir.mkdir(parents=True, exist_ok=True)
        for kept in [source_dir / "best.pt", *sorted(source_dir.glob("step_*.pt"))]:
            if kept.is_file() and not (target_dir / kept.name).exists():
                checkpoint.write_payload(target_dir / kept.name, checkpoint.load_payload(kept))
        # and the validations up to the checkpoint's step: averaging ranks the copied step_N.pt by them, and the
        # new run's learning curve continues the old one
        source_metrics, target_metrics = source_dir.parent / "metrics.jsonl", run_dir / "metrics.jsonl"
        if source_metrics.is_file() and source_metrics.read_text(encoding="utf-8").strip() \
                and not target_metrics.exists():
            records = [r for r in read_curve(source_dir.parent).records if r["step"] <= payload["progress"]["step"]]
            atomic_write(target_metrics, "".join(json.dumps(r) + "\n" for r in records))
    spm_dir = run_dir / "spm"
    spm_dir.mkdir(parents=True, exist_ok=True)
    for name, tok in (("src", src_tok), ("tgt", tgt_tok)):
        if not (spm_dir / f"{name}.model").is_file():
            atomic_write(spm_dir / f"{name}.model", tok.model_proto)
    return model.train(), src_tok, tgt_tok, payload, checkpoint.adopt(cfg, ckpt_cfg, FROM_CHECKPOINT)


def restore(payload: dict, optimizer, scheduler) -> Progress:
    """Load the optimizer, scheduler and torch RNG state of a full checkpoint's ``payload`` (as returned by
    :func:`resume_from`) into the new run; returns its :class:`Progress`."""
    optimizer.load_state_dict(payload["optimizer"])
    if scheduler is not None and payload.get("scheduler"):
        scheduler.load_state_dict(payload["scheduler"])
    progress = Progress(**payload["progress"])
    torch.set_rng_state(payload["rng"]["torch"].cpu())
    log.info("resumed at step %d (epoch %d, batch %d of that epoch)", progress.step, progress.epoch,
             progress.batch_in_epoch)
    if isinstance(scheduler, BudgetDecay):
        log.info("budget schedule: %.0f%% of the budget used, learning rate %.3g from here",
                 100 * scheduler.used(progress.step, progress.train_seconds),
                 scheduler.rate(progress.step, progress.train_seconds))
    return progress
