"""Validation: perplexity and greedy BLEU every ``train.valid_every`` steps, metrics.jsonl, ``best.pt``,
``step_N.pt`` and ``last.pt``, early stopping; and, when training (re)starts, forgetting what an attempt stopped
between its metrics record and its ``last.pt`` (killed, a full disk) wrote after the step it continues from.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path

import torch

from nmt.data import textio
from nmt.data.batches import iterate_batches
from nmt.data.corpus import Parallel
from nmt.data.textio import atomic_write, remove_stale_temporaries, write_error
from nmt.decoding.scoring import greedy_bleu
from nmt.models import checkpoint
from nmt.training.average import select_checkpoints
from nmt.training.ema import ExponentialMovingAverage
from nmt.training.gold import GoldSet, describe
from nmt.training.loss import loss_fn
from nmt.training.state import Progress, save_state

log = logging.getLogger(__name__)


# the loss terms of other objectives in a validation's log line: metrics.jsonl key -> label
TERM_LABELS = {"guided_term": "guided term", "rdrop_term": "R-Drop term"}  # guided alignment, train.rdrop_alpha


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
             rank_rngs: list | None = None, board=None, gold: GoldSet | None = None,
             agreement=None) -> str | None:
    """Validation loss/perplexity and greedy BLEU (and, with ``gold``, AER on the gold alignment set:
    :mod:`nmt.training.gold`); checkpoints; metrics.jsonl. Returns a stop reason or None.

    With ``agreement`` (:class:`nmt.training.reverse.Agreement`, ``train.agreement``) the record also gets the
    reverse model's figures, ``best.pt`` and ``last.pt`` its weights, and ``reverse/checkpoints/best.pt`` is
    written with ``best.pt``.

    ``best.pt`` and the step checkpoint are written before ``last.pt``, so the best BLEU that ``last.pt``
    records is on disk even when the process is killed between the writes; the time the checkpoints record
    includes this validation (the budget counts it), so a resumed budget schedule continues where it was.
    With ``ema`` the average of the weights is validated and is the model of ``best.pt``, ``step_N.pt`` and
    ``last.pt`` (``best.pt`` and ``last.pt`` also keep the raw weights to resume from).

    Raises:
        nmt.data.textio.WriteError: naming the file (``metrics.jsonl`` or a checkpoint) that could not be written,
            a full disk for example; the checkpoints written before are intact, and the same command resumes
            from ``last.pt`` (:func:`forget_unsaved` drops this validation's record and step checkpoint then)."""
    began = time.monotonic()
    with ema.applied() if ema is not None else nullcontext():
        valid_loss = validation_loss(model, valid_pairs, cfg.train.batch_tokens, device)
        bleu = greedy_bleu(model, *toks, valid.src, valid.tgt, cfg.decode, device, cfg.data.tgt_lang)
        alignment, pair = {}, None
        if gold is not None:  # eval.gold
            forced = gold.force(model, toks, device)
            alignment, pair = gold.score_forced(forced), (gold, forced)
        if agreement is not None:  # train.agreement: the reverse model's figures (and the pair's, with eval.gold)
            alignment.update(agreement.validate(cfg, valid_pairs, valid, device, pair))
    model.train()
    progress.train_seconds += time.monotonic() - began  # the budget counts validation: one clock for every figure
    record = {"step": progress.step, "epoch": progress.epoch, **record, "valid_loss": valid_loss,
              "valid_ppl": math.exp(min(valid_loss, 50)), "valid_bleu": bleu, **alignment,
              "lr": optimizer.param_groups[0]["lr"], "elapsed_sec": round(progress.train_seconds, 1)}
    append_record(run_dir / "metrics.jsonl", record)
    if board is not None:  # train.tensorboard: the same figures (nmt.training.tensorboard.Board)
        board.validation(record)
    terms = "".join(f", {label} {record[key]:.3f}" for key, label in TERM_LABELS.items() if key in record)
    log.info("step %d: valid loss %.3f ppl %.2f BLEU %.2f%s%s (%.0f tok/s)", progress.step, valid_loss,
             record["valid_ppl"], bleu, describe(record), terms, record.get("tokens_per_sec", 0.0))
    improved = bleu > progress.best_bleu
    if improved:
        progress.best_bleu, progress.best_step, progress.bad_validations = bleu, progress.step, 0
    else:
        progress.bad_validations += 1
    if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
        scheduler.step(bleu)
    progress.validated_step = progress.step
    extra = agreement.state() if agreement is not None else None
    if improved:  # train.best_optimizer=false: weights only (resuming uses last.pt)
        save_state(run_dir / "checkpoints" / "best.pt", cfg, model,
                   optimizer if cfg.train.get("best_optimizer", True) else None, scheduler, toks, progress, ema,
                   rank_rngs, extra)
        if agreement is not None:
            agreement.save_best(run_dir, progress)
    if cfg.train.get("keep_best"):
        keep_step_checkpoint(cfg, model, toks, run_dir, progress, ema)
    save_state(run_dir / "checkpoints" / "last.pt", cfg, model, optimizer, scheduler, toks, progress, ema,
               rank_rngs, extra)
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


def append_record(path: Path, record: dict) -> None:
    """Append one JSON line to ``metrics.jsonl``, whole or not at all: a write that fails leaves the file as it was.

    Raises:
        nmt.data.textio.WriteError: naming the file, when it cannot be written (a full disk, ...).
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    except OSError as err:
        raise write_error(path, err, "its earlier records are intact") from None
    try:
        size = os.fstat(fd).st_size
        try:
            textio.write_file(fd, (json.dumps(record) + "\n").encode("utf-8"), path)
            os.fsync(fd)
        except OSError:
            os.ftruncate(fd, size)  # no line cut short for the next record to be glued to
            raise
    except OSError as err:
        raise write_error(path, err, "its earlier records are intact") from None
    finally:
        os.close(fd)


def forget_unsaved(run_dir: Path, progress: Progress) -> None:
    """Before training (re)starts at ``progress.step`` in ``run_dir`` (rank 0 alone): remove what an earlier
    attempt wrote there after that step without reaching its next ``last.pt`` (it was killed, or the disk was
    full): ``metrics.jsonl`` records of later steps and a last line cut short, the ``step_N.pt`` of later steps,
    and the temporary files of writes that never reached their rename. Training repeats those steps and
    validates them again, so each validation is recorded once and averaging ranks each step checkpoint once."""
    step, gone = progress.step, []
    for folder, recursive in ((run_dir, False), (run_dir / "checkpoints", False), (run_dir / "eval", True)):
        gone += [str(p.relative_to(run_dir)) for p in remove_stale_temporaries(folder, recursive)]
    if gone:
        log.info("removed %d temporary file(s) of writes that did not finish: %s", len(gone), ", ".join(gone))
    dropped = []
    if later := forget_records(run_dir / "metrics.jsonl", step):
        steps = ", ".join(str(s) for s in later if s != "?")
        what = ([f"the records of steps {steps}"] if steps else []) + (["a last line cut short"] if "?" in later else [])
        dropped.append(f"metrics.jsonl: {' and '.join(what)}")
    for path in sorted((run_dir / "checkpoints").glob("step_*.pt")):
        number = path.stem.split("_")[1]
        if number.isdigit() and int(number) > step:
            path.unlink()
            dropped.append(f"checkpoints/{path.name}")
    if dropped:
        log.warning("training continues at step %d in %s: removed what an earlier attempt wrote after step %d "
                    "without saving checkpoints/last.pt: %s (those steps are trained and validated again)", step,
                    run_dir, step, "; ".join(dropped))


def forget_records(path: Path, step: int) -> list:
    """Rewrite ``metrics.jsonl`` without its records after ``step`` and without a last line cut short (removed
    when no record is left); returns the steps of the records dropped (``"?"`` for a line cut short)."""
    if not path.is_file():
        return []
    text = path.read_text(encoding="utf-8")
    kept, later = [], []
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line) if line.strip() else None
        except json.JSONDecodeError:
            if number == len(lines):  # no newline after it: the write was cut short
                later.append("?")
                continue
            record = None  # not a record of ours: kept as it is
        if isinstance(record, dict) and isinstance(record.get("step"), int) and record["step"] > step:
            later.append(record["step"])
        elif line.strip():
            kept.append(line + "\n")
    if later and kept:
        atomic_write(path, "".join(kept))
    elif later:
        path.unlink()
    return later
