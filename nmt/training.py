"""``train(cfg, run_dir)``: subwords, batches, the training loop, validation and checkpoints, then the final
evaluation (:mod:`nmt.final`). Resuming and the saved training state live in :mod:`nmt.state`.

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
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from dataclasses import asdict
from pathlib import Path

import sentencepiece as spm
import torch
from tqdm import tqdm

from nmt import checkpoint
from nmt.average import select_checkpoints
from nmt.data import Parallel, encode_pairs, iterate_batches, load_splits
from nmt.ema import DECAY_MEANING, ExponentialMovingAverage
from nmt.evaluate import check_decoding, greedy_bleu
from nmt.final import final_evaluation
from nmt.loss import label_smoothed_cross_entropy
from nmt.schedule import BudgetDecay, check_schedule, make_optimizer
from nmt.state import Progress, moving_average, restore, resume_from, save_state
from nmt.textio import atomic_write
from nmt.tokenizer import PAD_ID, Tokenizer, train_spm

log = logging.getLogger(__name__)


SPM_SETTINGS = ("vocab_size", "model_type", "joint", "byte_fallback")  # what a SentencePiece model is trained with


def prepare_tokenizers(tok_cfg, train: Parallel, spm_dir: Path) -> tuple[Tokenizer, Tokenizer]:
    """Train SentencePiece on the training split (joint or one per side), or reuse models already in ``spm_dir``;
    with ``restrict_vocab`` each side keeps only the pieces its training text uses (the checkpoint stores the lists).

    The settings the models were trained with go to ``spm_dir/settings.json``.

    Raises:
        ValueError: when models already in ``spm_dir`` (from an earlier attempt in the same run folder) were trained
            with other settings (``settings.json``) than ``tok_cfg``.
    """
    names = ["joint", "joint"] if tok_cfg.joint else ["src", "tgt"]
    texts = {"joint": train.src + train.tgt, "src": train.src, "tgt": train.tgt}
    wanted = {key: tok_cfg.get(key) for key in SPM_SETTINGS}
    record = spm_dir / "settings.json"
    if record.is_file() and any((spm_dir / f"{name}.model").is_file() for name in names):
        used = json.loads(record.read_text(encoding="utf-8"))
        if differ := [f"{key}={used.get(key)} (this run: {wanted[key]})" for key in SPM_SETTINGS
                      if used.get(key) != wanted[key]]:
            raise ValueError(f"{spm_dir} holds SentencePiece models of an earlier attempt in this run folder, trained "
                             f"with tokenizer.{', tokenizer.'.join(differ)}: delete that spm/ folder or use a new "
                             "run folder")
    for name in set(names):
        path = spm_dir / f"{name}.model"
        if not path.is_file():
            log.info("training sentencepiece %s model (%s, %d pieces) on %d sentences", name, tok_cfg.model_type,
                     tok_cfg.vocab_size, len(texts[name]))
            train_spm(texts[name], path, tok_cfg.vocab_size, tok_cfg.model_type,
                      byte_fallback=tok_cfg.byte_fallback)
            atomic_write(record, json.dumps(wanted) + "\n")
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


# Numeric settings checked before any work: key -> (whole number?, smallest allowed, null allowed?)
NUMERIC_SETTINGS = {
    "seed": (True, None, False),
    "tokenizer.vocab_size": (True, 1, False), "tokenizer.sample_alpha": (False, 0.0, True),
    "model.emb_size": (True, 1, False), "model.hidden_size": (True, 2, False),
    "model.encoder_layers": (True, 1, False), "model.decoder_layers": (True, 1, False),
    "model.dropout": (False, 0.0, False), "model.source_word_dropout": (False, 0.0, False),
    "model.target_word_dropout": (False, 0.0, False),
    "train.batch_tokens": (True, 1, False), "train.lr": (False, 0.0, False), "train.clip": (False, 0.0, False),
    "train.label_smoothing": (False, 0.0, False), "train.lr_factor": (False, 0.0, False),
    "train.ema_decay": (False, 0.5, True),
    "train.lr_patience": (True, 0, False), "train.min_lr": (False, 0.0, True), "train.max_steps": (True, 1, True),
    "train.max_epochs": (True, 1, True), "train.max_minutes": (False, 0.0, True), "train.valid_every": (True, 1, False),
    "train.log_every": (True, 0, True), "train.patience": (True, 0, True), "train.keep_best": (True, 0, True),
    "data.max_len": (True, 1, False), "data.train_limit": (True, 1, True), "data.eval_limit": (True, 1, True),
    "eval.plots": (True, 0, True),
}
POSITIVE = ("train.lr", "train.clip", "train.lr_factor", "train.max_minutes")  # 0 would silently train nothing
# (clip 0 zeroes gradients); a limit of 0 would silently mean none (the stop test reads 0 as unset)
LIMITS = ("train.max_steps", "train.max_epochs", "train.max_minutes")
MAY_BE_INF = ("train.clip",)  # clip=inf: no clipping; any other nan or inf trains on NaN
HINTS = {"train.ema_decay": f" (or null: no average): {DECAY_MEANING}"}
BELOW_ONE = ("model.dropout", "model.source_word_dropout", "model.target_word_dropout", "train.label_smoothing",
             "train.lr_factor", "train.ema_decay")  # probabilities; factors that must shrink


def _parses_as_number(text: str) -> bool:
    """Whether ``text`` reads as a finite float (``"0.9"``, ``"1e-4"``; not ``"nan"``)."""
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def check_numbers(cfg) -> None:
    """Refuse a numeric setting of ``NUMERIC_SETTINGS`` that is not a finite number (``train.max_minutes=one``,
    nan, inf: ``train.lr=inf`` trained on NaN for the whole budget), not a whole number where one is needed
    (``1e5`` is one), or below its smallest value, before any corpus or SentencePiece work. Keys missing from
    ``cfg`` are skipped. ``POSITIVE`` keys must be above 0, ``BELOW_ONE`` keys below 1.

    Raises:
        ValueError: naming the key, the value given and what it takes.
    """
    for key, (whole, low, nullable) in NUMERIC_SETTINGS.items():
        value = cfg
        for part in key.split("."):
            value = value.get(part, ...) if value is not ... else ...
        if value is ... or (value is None and nullable):
            continue
        kind = "a whole number" if whole else "a number"
        if whole and isinstance(value, float) and value.is_integer():
            value = int(value)  # 1e5 on the command line
        infinite_allowed = key in MAY_BE_INF and value == math.inf
        if isinstance(value, float) and not whole and not math.isfinite(value) and not infinite_allowed:
            either = " (or null: no limit)" if key in LIMITS else " (or null)" if nullable else ""
            raise ValueError(f"{key}={value} must be a finite number{either}")
        if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)):
            quoted = isinstance(value, str) and _parses_as_number(value)  # train.lr="'0.001'": a string
            shown, hint = (repr(value), ("; it is text: give it without quotes (or wrap an ${oc.env:...} in "
                                        "${oc.decode:...})")) if quoted else (value, "")
            either = " (or null)" if nullable else ""
            raise ValueError(f"{key}={shown} must be {kind}{either}{hint}")  # noqa: TRY004 (a setting, not a type)
        extra = (" (or null: no limit)" if key in LIMITS else "") + HINTS.get(key, "")
        if key in POSITIVE and value <= 0:  # before the lower bound: -3 is refused as 0 is, "must be above 0"
            raise ValueError(f"{key}={value} must be above 0{extra}")
        if low is not None and value < low:
            raise ValueError(f"{key}={value} must be {kind} >= {low}{extra}")
        if key in BELOW_ONE and value >= 1:
            raise ValueError(f"{key}={value} must be below 1{HINTS.get(key, '')}")


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

    Raises (each with a message that names the setting or file; ``train.py`` prints it in one line):
        ValueError: a setting out of range (``check_numbers``, ``check_schedule``, ``check_decoding``), or
            SentencePiece models of an earlier attempt in ``run_dir`` trained with other settings.
        nmt.data.DataError: a corpus or ``data.extra_train`` entry that cannot be read as configured.
        nmt.checkpoint.CheckpointError: a checkpoint to resume from that is unreadable or of another model.
        FileNotFoundError, nmt.textio.TextFileError: a corpus file that is missing or not UTF-8 text.
        FloatingPointError: training diverged (a nan or inf gradient, see :func:`train_step`); names the step.
    """
    run_dir = Path(run_dir)
    check_numbers(cfg)  # before the corpus and tokenizers: a bad setting fails at once
    check_schedule(cfg.train)
    check_decoding(cfg.decode.beam_size, 1, "decode.beam_size", cfg.decode)
    torch.manual_seed(cfg.seed)
    checkpoint.set_threads(cfg.get("threads"))
    device = checkpoint.pick_device(cfg.device)
    cfg, splits, model, toks, payload = start_or_resume(cfg, run_dir, device, overrides)
    train_pairs, epoch_pairs = training_pairs(cfg, splits["train"], toks)
    valid_pairs = encode_pairs(splits["valid"], *toks)
    log.info("model: %.2fM parameters, attention=%s, decoder=%s, device=%s; %d training pairs; run folder %s",
             sum(p.numel() for p in model.parameters()) / 1e6, type(model.decoder.attention).__name__,
             cfg.decoder.style + ("" if model.decoder.input_feeding else " without input feeding"), device,
             len(train_pairs), run_dir.resolve())
    optimizer, scheduler = make_optimizer(model, cfg)
    ema = moving_average(cfg.train, model, payload)
    if ema is not None:
        log.info("moving average of the weights (train.ema_decay=%s): validation and the model in every checkpoint "
                 "are the average; best.pt and last.pt also keep the raw weights to resume from", cfg.train.ema_decay)
    progress = Progress() if payload is None else restore(payload, optimizer, scheduler, cfg.train)
    stop = train_loop(cfg, model, optimizer, scheduler, epoch_pairs, valid_pairs, splits["valid"], toks, run_dir,
                      device, progress, overrides, ema)
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


def start_or_resume(cfg, run_dir: Path, device, overrides=()):
    """The config, splits, model, tokenizers and checkpoint payload of the run: resumed from ``train.resume``
    (a checkpoint, or a run folder with ``checkpoints/last.pt``) or from ``run_dir/checkpoints/last.pt`` when it
    exists (:func:`nmt.state.resume_from`; ``payload`` holds the optimizer, progress and RNG state), else a new
    model with SentencePiece models trained on the training split (``payload`` None).

    Returns:
        ``(cfg, splits, model, (src_tok, tgt_tok), payload)``; after a resume ``cfg`` holds the checkpoint's
        model, attention, decoder, tokenizer and data settings, and ``.hydra/config.yaml`` is rewritten to them.

    Raises:
        FileNotFoundError / nmt.checkpoint.CheckpointError: for a resume checkpoint that is missing or unusable.
    """
    resume = cfg.train.get("resume") or (run_dir / "checkpoints" / "last.pt")
    if Path(resume).is_dir() and (Path(resume) / "checkpoints" / "last.pt").is_file():  # a run folder
        resume = Path(resume) / "checkpoints" / "last.pt"
    if cfg.train.get("resume") or Path(resume).is_file():
        model, src_tok, tgt_tok, payload, cfg = resume_from(resume, cfg, run_dir, device, overrides)
        checkpoint.save_config(cfg, run_dir / ".hydra" / "config.yaml")  # the folder describes the model trained
        return cfg, load_splits(cfg.data), model, (src_tok, tgt_tok), payload
    with torch.random.fork_rng(devices=[]):  # a bad architecture setting (decoder.style=...) fails before any work;
        checkpoint.build_model(cfg, 8, 8)      # the RNG is left as it was, so the model's initialisation is unchanged
    splits = load_splits(cfg.data)
    src_tok, tgt_tok = prepare_tokenizers(cfg.tokenizer, splits["train"], run_dir / "spm")
    model = checkpoint.build_model(cfg, len(src_tok), len(tgt_tok)).to(device)
    return cfg, splits, model, (src_tok, tgt_tok), None


def training_pairs(cfg, train: Parallel, toks) -> tuple[list, Callable[[int], list]]:
    """The encoded training pairs (best segmentation, at most ``data.max_len`` pieces a side) and the function
    that gives the pairs of epoch e: those same pairs, or with ``tokenizer.sample_alpha`` > 0 (subword
    regularization, Kudo 2018; BPE-dropout, Provilkov et al. 2020) a fresh sampled segmentation seeded by
    ``seed + e``."""
    pairs = encode_pairs(train, *toks, cfg.data.max_len)
    alpha = cfg.tokenizer.get("sample_alpha") or 0.0
    if not alpha:
        return pairs, lambda epoch: pairs
    log.info("subword regularization: a fresh sampled segmentation of the training data every epoch "
             "(tokenizer.sample_alpha=%s)", alpha)

    def epoch_pairs(epoch: int) -> list:
        spm.set_random_generator_seed(cfg.seed + epoch)
        return encode_pairs(train, *toks, cfg.data.max_len, sample_alpha=alpha, quiet=True)
    return pairs, epoch_pairs


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


class Meter:
    """Training loss (nats per target token) and target tokens/s since the last validation, shown as a progress
    bar on a terminal; sent to a file (nohup, a scheduler's log) a bar would be one endless line of carriage
    returns, so there a plain log line every ``train.log_every`` steps replaces it."""

    def __init__(self, t, progress: Progress):
        self.bar = tqdm(total=t.max_steps, initial=progress.step, desc="train", unit="step", mininterval=2.0,
                        disable=not sys.stderr.isatty())
        self.log_every = t.get("log_every") or 0
        self.reset()

    def reset(self) -> None:
        """Start a new window (after a validation)."""
        self.tokens, self.loss, self.steps, self.start = 0, 0.0, 0, time.monotonic()

    def rate(self) -> float:
        """Target tokens/s in the window."""
        return self.tokens / max(time.monotonic() - self.start, 1e-9)

    def update(self, loss: float, ntok: int, progress: Progress, minutes: float, lr: float) -> None:
        """Count one step of ``ntok`` target tokens with summed ``loss``; refresh the bar or log a line."""
        self.tokens, self.loss, self.steps = self.tokens + ntok, self.loss + loss, self.steps + 1
        self.bar.update(1)
        if not self.bar.disable:
            self.bar.set_postfix(epoch=progress.epoch, loss=f"{loss / ntok:.3f}", tok_s=f"{self.rate():.0f}",
                                 refresh=False)
        elif self.log_every and progress.step % self.log_every == 0:
            log.info("step %d (epoch %d, %.1f min): train loss %.3f, %.0f tok/s, lr %.3g", progress.step,
                     progress.epoch, minutes, self.loss / max(self.tokens, 1), self.rate(), lr)

    def record(self) -> dict:
        """The window's figures for metrics.jsonl."""
        return {"train_loss": self.loss / max(self.tokens, 1), "tokens_per_sec": self.rate()}


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


def validate(cfg, model, optimizer, scheduler, valid_pairs, valid: Parallel, toks, run_dir, device,
             progress: Progress, record: dict, ema: ExponentialMovingAverage | None = None) -> str | None:
    """Validation loss/perplexity and greedy BLEU; checkpoints; metrics.jsonl. Returns a stop reason or None.

    ``best.pt`` and the step checkpoint are written before ``last.pt``, so the best BLEU that ``last.pt``
    records is on disk even when the process is killed between the writes; the time the checkpoints record
    includes this validation (the budget counts it), so a resumed budget schedule continues where it was.
    With ``ema`` the average of the weights is validated and is the model of ``best.pt``, ``step_N.pt`` and
    ``last.pt`` (``best.pt`` and ``last.pt`` also keep the raw weights to resume from)."""
    began = time.monotonic()
    with ema.applied() if ema is not None else nullcontext():
        valid_loss = validation_loss(model, valid_pairs, cfg.train.batch_tokens, device)
        bleu = greedy_bleu(model, *toks, valid.src, valid.tgt, cfg.decode, device)
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
        save_state(run_dir / "checkpoints" / "best.pt", cfg, model, optimizer, scheduler, toks, progress, ema)
    if cfg.train.get("keep_best"):
        keep_step_checkpoint(cfg, model, toks, run_dir, progress, ema)
    save_state(run_dir / "checkpoints" / "last.pt", cfg, model, optimizer, scheduler, toks, progress, ema)
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
