"""``train(cfg, run_dir)``: subwords, batches, the training loop, validation, checkpoints, final evaluation.

The run directory follows design.md §2: ``spm/``, ``checkpoints/{best,last}.pt``, ``metrics.jsonl``,
``eval/{split}.*`` (the configured decoder, beam search by default), ``eval/greedy/{split}.*`` and ``plots/``.
"""

from __future__ import annotations

import json
import logging
import math
import shlex
import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import sentencepiece as spm
import torch
from tqdm import tqdm

from nmt import checkpoint
from nmt.average import average_checkpoints, select_checkpoints
from nmt.curves import read_curve
from nmt.data import Parallel, encode_pairs, iterate_batches, load_splits
from nmt.evaluate import save_results, score, translate
from nmt.loss import label_smoothed_cross_entropy
from nmt.plot import plot_npz
from nmt.schedule import SCHEDULE_KEYS, BudgetDecay, check_schedule, make_optimizer
from nmt.textio import atomic_write
from nmt.tokenizer import PAD_ID, Tokenizer, train_spm

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


def prepare_tokenizers(tok_cfg, train: Parallel, spm_dir: Path) -> tuple[Tokenizer, Tokenizer]:
    """Train SentencePiece on the training split (joint or one per side), or reuse models already in ``spm_dir``;
    with ``restrict_vocab`` each side keeps only the pieces its training text uses (the checkpoint stores the lists)."""
    names = ["joint", "joint"] if tok_cfg.joint else ["src", "tgt"]
    texts = {"joint": train.src + train.tgt, "src": train.src, "tgt": train.tgt}
    for name in set(names):
        path = spm_dir / f"{name}.model"
        if not path.is_file():
            log.info("training sentencepiece %s model (%s, %d pieces) on %d sentences", name, tok_cfg.model_type,
                     tok_cfg.vocab_size, len(texts[name]))
            train_spm(texts[name], path, tok_cfg.vocab_size, tok_cfg.model_type,
                      byte_fallback=tok_cfg.byte_fallback)
    src_tok, tgt_tok = Tokenizer.load(spm_dir / f"{names[0]}.model"), Tokenizer.load(spm_dir / f"{names[1]}.model")
    if tok_cfg.get("restrict_vocab"):
        src_tok, tgt_tok = src_tok.restricted(train.src), tgt_tok.restricted(train.tgt)
        log.info("vocabularies restricted to the pieces each side uses: source %d, target %d", len(src_tok),
                 len(tgt_tok))
    return src_tok, tgt_tok


def loss_fn(logits: torch.Tensor, tgt_out: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """Summed cross-entropy (nats) over non-pad target tokens: logits ``[B, T, V]``, tgt_out ``[B, T]``."""
    return label_smoothed_cross_entropy(logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1), label_smoothing,
                                        ignore_index=PAD_ID)


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


def train(cfg, run_dir: str | Path, overrides: list[str] | tuple = ()) -> dict:
    """Train, validate and evaluate one model as configured; return the final metrics.

    Resumes from ``cfg.train.resume`` (a checkpoint path), or from ``run_dir/checkpoints/last.pt`` when the
    run directory already holds one; the model, tokenizers and architecture then come from the checkpoint.
    ``overrides``: the command line's ``key=value`` overrides, repeated in the resume command printed after
    an interruption.

    Returns:
        a dict with ``valid_bleu`` (best greedy validation BLEU), per-split test/valid BLEU and chrF for
        greedy and the configured decoder, ``steps``, ``train_minutes``, ``run_dir`` and ``stopped`` (why
        training stopped). After SIGINT/SIGTERM there is no final evaluation and ``interrupted`` is True.
    """
    run_dir = Path(run_dir)
    check_schedule(cfg.train)  # before the corpus and tokenizers: a bad setting fails at once
    torch.manual_seed(cfg.seed)
    if cfg.get("threads"):
        torch.set_num_threads(cfg.threads)
    device = checkpoint.pick_device(cfg.device)
    resume = cfg.train.get("resume") or (run_dir / "checkpoints" / "last.pt")
    if Path(resume).is_dir() and (Path(resume) / "checkpoints" / "last.pt").is_file():  # a run folder
        resume = Path(resume) / "checkpoints" / "last.pt"
    payload = None
    if cfg.train.get("resume") or Path(resume).is_file():
        model, src_tok, tgt_tok, payload, cfg = resume_from(resume, cfg, run_dir, device)
        checkpoint.save_config(cfg, run_dir / ".hydra" / "config.yaml")  # the folder describes the model trained
        data_cfg = cfg.data
        splits = load_splits(data_cfg)
    else:
        data_cfg = cfg.data
        splits = load_splits(data_cfg)
        src_tok, tgt_tok = prepare_tokenizers(cfg.tokenizer, splits["train"], run_dir / "spm")
        model = checkpoint.build_model(cfg, len(src_tok), len(tgt_tok)).to(device)
    train_pairs = encode_pairs(splits["train"], src_tok, tgt_tok, data_cfg.max_len)
    alpha = cfg.tokenizer.get("sample_alpha") or 0.0

    def epoch_pairs(epoch: int):
        """The training pairs of one epoch: fixed, or freshly sampled segmentations (seeded by epoch)."""
        if not alpha:
            return train_pairs
        spm.set_random_generator_seed(cfg.seed + epoch)
        return encode_pairs(splits["train"], src_tok, tgt_tok, data_cfg.max_len, sample_alpha=alpha, quiet=True)
    valid_pairs = encode_pairs(splits["valid"], src_tok, tgt_tok)
    if alpha:
        log.info("subword regularization: a fresh sampled segmentation of the training data every epoch "
                 "(tokenizer.sample_alpha=%s)", alpha)
    log.info("model: %.2fM parameters, attention=%s, decoder=%s, device=%s; %d training pairs; run folder %s",
             sum(p.numel() for p in model.parameters()) / 1e6, type(model.decoder.attention).__name__,
             cfg.decoder.style, device, len(train_pairs), run_dir.resolve())
    optimizer, scheduler = make_optimizer(model, cfg)
    progress = Progress()
    if payload is not None:
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
    stop = train_loop(cfg, model, optimizer, scheduler, epoch_pairs, valid_pairs, splits["valid"],
                      (src_tok, tgt_tok), run_dir, device, progress, overrides)
    results = {"valid_bleu": progress.best_bleu, "steps": progress.step,
               "train_minutes": progress.train_seconds / 60, "run_dir": str(run_dir), "stopped": stop}
    if stop.startswith("interrupted"):
        return {**results, "interrupted": True}
    results.update(final_evaluation(cfg, splits, run_dir, device, progress.best_bleu))
    log.info("final: %s", json.dumps(results))
    log.info("done: test BLEU %s in %s (checkpoints/, eval/, plots/)",
             " / ".join(f"{results[k]:.2f} {k.split('_')[1]}" for k in results
                        if k.startswith("test_") and k.endswith("_bleu")) or "-", run_dir.resolve())
    return results


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
            log.warning("resuming %s: %s comes from the checkpoint, not from the command line: %s", path, key,
                        "; ".join(f"{name}={before} (command line: {now})" for name, before, now in changed))
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


@contextmanager
def stop_on_signals():
    """While active, SIGINT/SIGTERM set ``flag["signal"]`` so the loop can finish its step and save; a second
    signal aborts at once (KeyboardInterrupt). Outside the main thread, signals are left alone."""
    flag: dict = {"signal": None}
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum, _frame):
        if flag["signal"]:
            raise KeyboardInterrupt
        flag["signal"] = signal.Signals(signum).name
        log.warning("%s received: finishing the current step, then saving checkpoints/last.pt "
                    "(send it again to abort without saving)", flag["signal"])

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield flag
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def train_step(model, optimizer, batch, t) -> tuple[float, int]:
    """One update: teacher-forced loss (label-smoothed, per target token), backward, clipping, Adam.
    Returns the summed loss (nats) and the number of target tokens."""
    logits, _ = model(batch.src, batch.src_mask, batch.tgt_in)
    ntok = batch.num_tgt_tokens
    loss = loss_fn(logits, batch.tgt_out, t.label_smoothing)
    optimizer.zero_grad(set_to_none=True)
    (loss / ntok).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), t.clip)
    optimizer.step()
    return float(loss.detach()), ntok


def train_loop(cfg, model, optimizer, scheduler, epoch_pairs, valid_pairs, valid: Parallel, toks, run_dir, device,
               progress: Progress, overrides=()) -> str:
    """Update until max_steps / max_epochs / max_minutes / early stopping / a signal; validate every
    ``valid_every`` steps and at the stop. Batches of epoch e come from seed ``cfg.seed + e``, so a resumed
    run skips the batches already seen and continues with the same order. ``epoch_pairs(epoch)`` gives the
    encoded training pairs of an epoch. Returns why it stopped."""
    t = cfg.train
    start = time.monotonic() - progress.train_seconds
    window = {"tokens": 0, "loss": 0.0, "steps": 0, "start": time.monotonic()}
    # a progress bar on a terminal; sent to a file (nohup, a scheduler's log) it would be one endless line of
    # carriage returns, so there a plain log line every ``log_every`` steps replaces it
    bar = tqdm(total=t.max_steps, initial=progress.step, desc="train", unit="step", mininterval=2.0,
               disable=not sys.stderr.isatty())
    log_every = t.get("log_every") or 0
    model.train()

    def check(stop):
        progress.train_seconds = time.monotonic() - start
        if stop or progress.step % t.valid_every == 0:
            rate = window["tokens"] / max(time.monotonic() - window["start"], 1e-9)
            record = {"train_loss": window["loss"] / max(window["tokens"], 1), "tokens_per_sec": rate}
            stop = validate(cfg, model, optimizer, scheduler, valid_pairs, valid, toks, run_dir, device,
                            progress, record) or stop
            window.update(tokens=0, loss=0.0, steps=0, start=time.monotonic())
        return stop

    with stop_on_signals() as flag:
        while True:
            for batch in iterate_batches(epoch_pairs(progress.epoch), t.batch_tokens, shuffle=True, seed=cfg.seed + progress.epoch,
                                         skip=progress.batch_in_epoch):
                if isinstance(scheduler, BudgetDecay):
                    scheduler.update(progress.step, time.monotonic() - start)
                loss, ntok = train_step(model, optimizer, batch.to(device), t)
                progress.step += 1
                progress.batch_in_epoch += 1
                window.update(tokens=window["tokens"] + ntok, loss=window["loss"] + loss, steps=window["steps"] + 1)
                bar.update(1)
                tok_s = window["tokens"] / max(time.monotonic() - window["start"], 1e-9)
                if not bar.disable:
                    bar.set_postfix(epoch=progress.epoch, loss=f"{loss / ntok:.3f}", tok_s=f"{tok_s:.0f}",
                                    refresh=False)
                elif log_every and progress.step % log_every == 0:
                    log.info("step %d (epoch %d, %.1f min): train loss %.3f, %.0f tok/s, lr %.3g",
                             progress.step, progress.epoch, (time.monotonic() - start) / 60,
                             window["loss"] / max(window["tokens"], 1), tok_s, optimizer.param_groups[0]["lr"])
                if flag["signal"]:
                    bar.close()
                    return interrupted(cfg, model, optimizer, scheduler, toks, run_dir, progress, flag["signal"],
                                       time.monotonic() - start, overrides)
                stop = check(stop_reason(t, progress, time.monotonic() - start))
                if stop:
                    break
            else:
                progress.epoch += 1
                progress.batch_in_epoch = 0
                stop = stop_reason(t, progress, time.monotonic() - start)
                if stop and window["steps"]:
                    stop = check(stop)
            if stop:
                break
    bar.close()
    log.info("training stopped after %d steps (%d epochs, %.1f min): %s", progress.step, progress.epoch,
             progress.train_seconds / 60, stop)
    used = scheduler.used(progress.step, progress.train_seconds) if isinstance(scheduler, BudgetDecay) else 1.0
    if used < 1.0:
        log.warning("training stopped (%s) after %.0f%% of the learning-rate budget, at rate %.3g instead of "
                    "min_lr: set train.max_epochs=null / train.patience=null to let the decay finish", stop,
                    100 * used, optimizer.param_groups[0]["lr"])
    return stop


def interrupted(cfg, model, optimizer, scheduler, toks, run_dir: Path, progress: Progress, name: str,
                elapsed: float, overrides=()) -> str:
    """Save ``last.pt`` after a signal and print the command that resumes (the run's own command-line
    ``overrides`` repeated, so its budget and schedule carry over); returns the stop reason."""
    progress.train_seconds = elapsed
    save_state(run_dir / "checkpoints" / "last.pt", cfg, model, optimizer, scheduler, toks, progress)
    last = (run_dir / "checkpoints" / "last.pt").resolve()
    keep = [o for o in overrides if not o.startswith(("hydra.run.dir=", "train.resume="))]
    log.warning("%s: stopped at step %d and saved %s. Resume with:\n  python train.py %s", name, progress.step,
                last, shlex.join([*keep, f"train.resume={last}", f"hydra.run.dir={run_dir.resolve()}"]))
    return f"interrupted by {name}"


def save_state(path: Path, cfg, model, optimizer, scheduler, toks, progress: Progress) -> None:
    """A full training checkpoint: weights, optimizer, scheduler, progress and the torch RNG state."""
    checkpoint.save(path, model, cfg, *toks, optimizer=optimizer.state_dict(),
                    scheduler=scheduler.state_dict() if scheduler else None, progress=asdict(progress),
                    rng={"torch": torch.get_rng_state()})


def stop_reason(t, progress: Progress, elapsed: float) -> str | None:
    """Why training should stop now, or None."""
    if t.max_steps and progress.step >= t.max_steps:
        return f"max_steps={t.max_steps} reached"
    if t.max_epochs and progress.epoch >= t.max_epochs:
        return f"max_epochs={t.max_epochs} reached"
    if t.max_minutes and elapsed >= 60 * t.max_minutes:
        return f"max_minutes={t.max_minutes} reached"
    return None


def validate(cfg, model, optimizer, scheduler, valid_pairs, valid: Parallel, toks, run_dir, device,
             progress: Progress, record: dict) -> str | None:
    """Validation loss/perplexity and greedy BLEU; checkpoints; metrics.jsonl. Returns a stop reason or None."""
    valid_loss = validation_loss(model, valid_pairs, cfg.train.batch_tokens, device)
    bleu = greedy_bleu(cfg, model, toks, valid, device)
    model.train()
    record = {"step": progress.step, "epoch": progress.epoch, **record, "valid_loss": valid_loss,
              "valid_ppl": math.exp(min(valid_loss, 50)), "valid_bleu": bleu, "lr": optimizer.param_groups[0]["lr"],
              "elapsed_sec": round(progress.train_seconds, 1)}
    with open(run_dir / "metrics.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
    log.info("step %d: valid loss %.3f ppl %.2f BLEU %.2f (%.0f tok/s)", progress.step, valid_loss,
             record["valid_ppl"], bleu, record["tokens_per_sec"])
    improved = bleu > progress.best_bleu
    if improved:
        progress.best_bleu, progress.best_step, progress.bad_validations = bleu, progress.step, 0
    else:
        progress.bad_validations += 1
    if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
        scheduler.step(bleu)
    save_state(run_dir / "checkpoints" / "last.pt", cfg, model, optimizer, scheduler, toks, progress)
    if improved:
        save_state(run_dir / "checkpoints" / "best.pt", cfg, model, optimizer, scheduler, toks, progress)
    if cfg.train.get("keep_best"):
        keep_step_checkpoint(cfg, model, toks, run_dir, progress)
    if cfg.train.patience and progress.bad_validations >= cfg.train.patience:
        return f"no validation BLEU gain in {cfg.train.patience} validations (early stopping)"
    return None


def greedy_bleu(cfg, model, toks, split: Parallel, device) -> float:
    """Corpus BLEU of greedy translations of ``split`` (the validation criterion)."""
    hyps = translate(model, *toks, split.src, cfg.decode, device, beam_size=1)
    return score([h.text for h in hyps], split.tgt)["bleu"]


def keep_step_checkpoint(cfg, model, toks, run_dir: Path, progress: Progress) -> None:
    """Save weights-only ``checkpoints/step_N.pt`` and delete the step checkpoints that are no longer among the
    ``train.keep_best`` best by validation BLEU (the inputs of checkpoint averaging)."""
    ckpt_dir = run_dir / "checkpoints"
    checkpoint.save(ckpt_dir / f"step_{progress.step}.pt", model, cfg, *toks, progress=asdict(progress))
    keep = set(select_checkpoints(run_dir, best=cfg.train.keep_best))
    for path in ckpt_dir.glob("step_*.pt"):
        if path not in keep:
            path.unlink()


def final_checkpoint(cfg, valid: Parallel, run_dir: Path, device, best_bleu: float) -> tuple[Path, dict]:
    """The checkpoint to evaluate: ``best.pt``, or with ``train.average`` the mean of the kept step checkpoints
    (``averaged.pt``) when its greedy validation BLEU is at least best.pt's. Returns (path, facts to report)."""
    best = run_dir / "checkpoints" / "best.pt"
    if not (cfg.train.get("average") and (cfg.train.get("keep_best") or 0) > 1):
        return best, {}
    paths = select_checkpoints(run_dir, best=cfg.train.keep_best)
    if len(paths) < 2:
        log.info("only %d step checkpoint: nothing to average, evaluating best.pt", len(paths))
        return best, {}
    averaged = run_dir / "checkpoints" / "averaged.pt"
    average_checkpoints(paths, averaged)
    model, _, src_tok, tgt_tok, _ = checkpoint.load(averaged, device)
    bleu = greedy_bleu(cfg, model, (src_tok, tgt_tok), valid, device)
    use = bleu >= best_bleu
    log.info("average of %d checkpoints (%s): valid BLEU %.2f vs best.pt %.2f: evaluating %s", len(paths),
             ", ".join(p.stem for p in paths), bleu, best_bleu, averaged.name if use else best.name)
    return (averaged if use else best), {"averaged_valid_bleu": bleu, "averaged_steps": [p.stem for p in paths]}


def final_evaluation(cfg, splits: dict[str, Parallel], run_dir: Path, device, best_bleu: float = -1.0) -> dict:
    """Decode valid and test with the final checkpoint (best or averaged), greedy and the configured decoder;
    write eval/ and plots/."""
    path, results = final_checkpoint(cfg, splits["valid"], run_dir, device, best_bleu)
    results["final_checkpoint"] = path.name
    model, _, src_tok, tgt_tok, _ = checkpoint.load(path, device)
    decoders = {"greedy": 1} if cfg.decode.beam_size == 1 else {"greedy": 1, f"beam{cfg.decode.beam_size}": None}
    for split in ("valid", "test"):
        if split not in splits:
            continue
        for name, beam_size in decoders.items():
            hyps = translate(model, src_tok, tgt_tok, splits[split].src, cfg.decode, device, beam_size=beam_size)
            scores = score([h.text for h in hyps], splits[split].tgt)
            scores.update(beam_size=beam_size or cfg.decode.beam_size, length_penalty=cfg.decode.length_penalty,
                          attention=cfg.attention._target_.rsplit(".", 1)[-1], decoder_style=cfg.decoder.style,
                          checkpoint=str(path), split=split, decoder=name)
            main = name != "greedy" or len(decoders) == 1
            out = run_dir / "eval" / ("" if main else "greedy") / split
            save_results(out, hyps, scores)
            results[f"{split}_{name}_bleu"], results[f"{split}_{name}_chrf"] = scores["bleu"], scores["chrf"]
            results[f"{split}_{name}_bleu_lowercase"] = scores["bleu_lowercase"]
            results.setdefault("bleu_signature", scores["bleu_signature"])
            log.info("%s %s: %s", split, name, scores["bleu_detail"])
    if cfg.eval.plots and "test" in splits:
        plot_npz(run_dir / "eval" / "test.alignments.npz", range(min(cfg.eval.plots, len(splits["test"]))),
                 run_dir / "plots")
    return results
