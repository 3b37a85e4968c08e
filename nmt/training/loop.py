"""The training loop: updates until a stop condition (``max_steps``, ``max_epochs``, ``max_minutes``, early
stopping, a signal), validating every ``valid_every`` steps.

Under several ranks (:mod:`nmt.training.distributed`) every rank runs this loop over its share of the same batch
order; the stop decisions are taken together after every update (a signal on any rank, the longest wall time),
and rank 0 alone validates, writes checkpoints and logs, then shares the validation's outcome.
"""

from __future__ import annotations

import logging
import math
import os
import shlex
import signal
import sys
import time
from collections import deque
from pathlib import Path

from nmt.data.corpus import Parallel
from nmt.models.precision import FP32, Precision
from nmt.settings import command_name, override
from nmt.training.distributed import Distributed
from nmt.training.ema import ExponentialMovingAverage
from nmt.training.gold import load_gold
from nmt.training.meter import Meter
from nmt.training.schedule import BudgetDecay
from nmt.training.shards import UpdateBatches, share_validation
from nmt.training.signals import stop_on_signals
from nmt.training.state import Progress, rng_states, save_state
from nmt.training.step import batch_loss, train_step
from nmt.training.tensorboard import Board
from nmt.training.validation import forget_unsaved, patience_spent, validate

log = logging.getLogger(__name__)

DIVERGENCE_WINDOW = 20  # updates whose mean training loss decides a divergence that stays finite


def train_loop(cfg, model, optimizer, scheduler, epoch_pairs, valid_pairs, valid: Parallel, toks, run_dir, device,
               progress: Progress, overrides=(), ema: ExponentialMovingAverage | None = None,
               dist: Distributed | None = None, forward=None, precision: Precision = FP32, agreement=None,
               objective=None) -> str:
    """Update until max_steps / max_epochs / max_minutes / early stopping / a signal; validate every
    ``valid_every`` steps and at the stop. Batches of epoch e come from seed ``cfg.seed + e``, so a resumed
    run skips the batches already seen and continues with the same order. ``epoch_pairs(epoch)`` gives the
    encoded training pairs of an epoch. With ``ema`` the average follows every update, and validation and
    checkpoints use it. ``forward`` is the module the updates run through (the DDP wrapper of ``model`` under
    several ranks; with ``agreement``, :class:`nmt.training.reverse.Agreement` of ``train.agreement``, the joint
    module of both directions, and the reverse model's figures and weights join validation and checkpoints).
    ``objective``: the loss of a batch (:func:`nmt.training.step.batch_loss` by default; the guided alignment's
    :class:`nmt.training.guided.GuidedObjective`, R-Drop's :class:`nmt.training.rdrop.RDropObjective`).
    Before it starts, what an earlier attempt in ``run_dir`` wrote after ``progress.step`` without
    reaching its next ``last.pt`` is removed (:func:`nmt.training.validation.forget_unsaved`). Returns why it
    stopped.

    Raises:
        FloatingPointError: training diverged (naming the step).
        nmt.data.textio.WriteError: a checkpoint or ``metrics.jsonl`` that could not be written (a full disk),
            naming it; the checkpoint that was there is intact and the same command resumes from it.
    """
    run = _Run(cfg, model, optimizer, scheduler, valid_pairs, valid, toks, run_dir, device, progress, ema,
               dist or Distributed(), forward or model, precision, agreement, objective)
    t = cfg.train
    if run.dist.is_main:  # what an attempt killed after its last checkpoint wrote about later steps
        forget_unsaved(run_dir, progress)
    if stop := stop_reason(t, progress, progress.train_seconds) or patience_spent(t, progress):  # resumed at the end
        if progress.validated_step != progress.step:  # stopped by a signal on its last step: validate it now
            stop = run.check(stop)
        log.info("nothing left to train at step %d: %s", progress.step, stop)
        run.meter.bar.close()
        run.board.close()
        return stop
    with stop_on_signals(abort_on_second=not run.dist.active) as flag:
        stop, received = None, None
        while not (stop or received):
            stop, received = run.epoch(epoch_pairs(progress.epoch), flag)
        received = received or run.agree(flag)  # a signal during the last validation (every rank asks)
        run.meter.bar.close()
        run.board.close()
        if received:  # after a step, or during the last validation: no final evaluation
            return interrupted(cfg, model, optimizer, scheduler, toks, run_dir, progress, received,
                               time.monotonic() - run.start, overrides, ema, run.dist, agreement)
    return finished(stop, progress, scheduler, optimizer)


class _Run:
    """The state of one training loop: the clock, the meter, this rank's batches, and the agreement of the
    ranks after every update."""

    def __init__(self, cfg, model, optimizer, scheduler, valid_pairs, valid, toks, run_dir, device, progress,
                 ema, dist: Distributed, forward, precision: Precision, agreement=None, objective=None):
        self.cfg, self.t, self.model, self.optimizer, self.scheduler = cfg, cfg.train, model, optimizer, scheduler
        self.valid_pairs, self.valid, self.toks, self.run_dir, self.device = valid_pairs, valid, toks, run_dir, device
        self.progress, self.ema, self.dist, self.forward, self.precision = progress, ema, dist, forward, precision
        self.agreement = agreement  # train.agreement: the reverse model's side (forward is then the joint module)
        self.objective = objective or (agreement.objective if agreement is not None else batch_loss)
        self.start = time.monotonic() - progress.train_seconds
        self.meter = Meter(self.t, progress, enabled=dist.is_main)
        self.board = Board(run_dir, bool(self.t.get("tensorboard")) and dist.is_main)  # train.tensorboard
        self.gold = load_gold(cfg) if dist.is_main else None  # eval.gold: AER at every validation
        self.updates = UpdateBatches(self.t.batch_tokens, self.t.get("accum_steps") or 1, dist)
        self.elapsed = progress.train_seconds  # the longest of the ranks' clocks at the last agreement
        self.recent = deque(maxlen=DIVERGENCE_WINDOW)  # (summed loss, target tokens) of this rank's last updates
        self.window_loss = 0.0  # their loss per token, the highest over the ranks at the last agreement
        self.uniform = math.log(len(toks[1]))  # nats per token of a uniform guess over the target vocabulary
        self.parameters = list(forward.parameters())  # the model's, or both directions' with train.agreement
        forward.train()

    def check(self, stop: str | None) -> str | None:
        """Validate (rank 0) at the interval or at a stop, and share the outcome; returns the stop reason."""
        progress = self.progress
        progress.train_seconds = time.monotonic() - self.start
        if stop or progress.step % self.t.valid_every == 0:
            rngs = rng_states(self.dist)
            terms = self.objective.window() if hasattr(self.objective, "window") else {}  # guided_term, rdrop_term
            if self.dist.is_main:
                stop = validate(self.cfg, self.model, self.optimizer, self.scheduler, self.valid_pairs, self.valid,
                                self.toks, self.run_dir, self.device, progress,
                                {**self.meter.record(), **terms} if self.meter.steps else {}, self.ema, rngs,
                                self.board, self.gold, self.agreement) or stop
            stop = share_validation(self.dist, progress, self.optimizer, self.scheduler, stop)
            self.meter.reset()  # validation time is not training time
        return stop

    def agree(self, flag) -> str | None:
        """The signal any rank received (None if none); ``self.elapsed`` becomes the longest elapsed time and
        ``self.window_loss`` the highest recent training loss of the ranks."""
        elapsed = time.monotonic() - self.start
        loss = sum(l for l, _ in self.recent) / max(1, sum(n for _, n in self.recent))
        if not self.dist.active:
            self.elapsed, self.window_loss = elapsed, loss
            return flag["signal"]
        number, self.elapsed, self.window_loss = self.dist.maximum(
            [signal.Signals[flag["signal"]].value if flag["signal"] else 0, elapsed, loss])
        return signal.Signals(int(number)).name if number else None

    def check_divergence(self) -> None:
        """Stop a run whose training loss has run away while staying finite: over the last updates it averaged
        more than twice the loss of a uniform guess (every rank decides on the same, shared figure).

        Raises:
            FloatingPointError: naming the step, the loss, the bound and ``train.lr``.
        """
        if len(self.recent) == DIVERGENCE_WINDOW and self.window_loss > 2 * self.uniform:
            self.meter.bar.close()
            raise FloatingPointError(
                f"step {self.progress.step}: training diverged: the training loss averaged {self.window_loss:.4g} "
                f"nats per target token over the last {DIVERGENCE_WINDOW} updates, more than twice that of a "
                f"uniform guess (ln {len(self.toks[1])} = {self.uniform:.2f}). Train again, or resume from an "
                f"earlier checkpoint, with a lower train.lr (it is {self.t.lr:g}; the rate at this step was "
                f"{self.optimizer.param_groups[0]['lr']:g})")

    def update(self, batches) -> None:
        """One update from this rank's batches; counts it in the progress, the average and the meter."""
        progress, scheduler = self.progress, self.scheduler
        if isinstance(scheduler, BudgetDecay):  # one clock for every rank: the rate must be the same
            scheduler.update(progress.step, self.elapsed if self.dist.active else time.monotonic() - self.start)
        try:
            loss, ntok = train_step(self.forward, self.optimizer, [b.to(self.device) for b in batches], self.t,
                                    self.dist, self.precision, self.parameters, self.objective)
        except FloatingPointError as err:
            self.meter.bar.close()  # on a terminal, the error line would land on the progress bar's
            raise FloatingPointError(f"step {progress.step + 1}: {err}") from None
        progress.step += 1
        local = sum(b.num_tgt_tokens for b in batches)
        self.recent.append((loss, local))
        if self.ema is not None:
            self.ema.update()
        progress.batch_in_epoch += self.updates.group
        lr = self.optimizer.param_groups[0]["lr"]
        self.meter.update(loss, local, progress, (time.monotonic() - self.start) / 60, lr, tokens=ntok)
        self.board.training(progress.step, loss / max(local, 1), lr, self.meter.rate())

    def epoch(self, pairs, flag) -> tuple[str | None, str | None]:
        """Train on the rest of the current epoch; returns ``(stop reason, signal name)``, both None when the
        epoch ended without either."""
        progress = self.progress
        for batches in self.updates.epoch(pairs, self.cfg.seed + progress.epoch, progress.batch_in_epoch):
            self.update(batches)
            if received := self.agree(flag):
                return None, received
            self.check_divergence()
            if stop := self.check(stop_reason(self.t, progress, self.elapsed)):
                return stop, None
        self.updates.log_left_out(progress.epoch)
        progress.epoch += 1
        progress.batch_in_epoch = 0
        stop = stop_reason(self.t, progress, time.monotonic() - self.start)
        if stop and self.meter.steps:
            stop = self.check(stop)
        return stop, None


def finished(stop: str, progress: Progress, scheduler, optimizer) -> str:
    """Log why training stopped (and a budget schedule left unfinished); returns ``stop``."""
    log.info("training stopped after %d steps (%d full epoch%s, %.1f min): %s", progress.step, progress.epoch,
             "" if progress.epoch == 1 else "s", progress.train_seconds / 60, stop)
    used = scheduler.used(progress.step, progress.train_seconds) if isinstance(scheduler, BudgetDecay) else 1.0
    if used < 1.0:
        log.warning("training stopped (%s) after %.0f%% of the learning-rate budget, at rate %.3g instead of "
                    "min_lr: set train.max_epochs=null / train.patience=null to let the decay finish", stop,
                    100 * used, optimizer.param_groups[0]["lr"])
    return stop


def interrupted(cfg, model, optimizer, scheduler, toks, run_dir: Path, progress: Progress, name: str,
                elapsed: float, overrides=(), ema: ExponentialMovingAverage | None = None,
                dist: Distributed | None = None, agreement=None) -> str:
    """Save ``last.pt`` (with ``ema``: the average as its model, the raw weights to resume from; with
    ``agreement``: the reverse model too; rank 0 alone, with every rank's RNG state) after a signal and print the
    command that resumes (the run's own command-line ``overrides`` repeated, so its budget and schedule carry
    over); returns the stop reason."""
    dist = dist or Distributed()
    progress.train_seconds = elapsed
    rngs = rng_states(dist)
    if not dist.is_main:  # stay until last.pt is written: a launcher ends every rank once one has exited
        dist.barrier("waiting for rank 0 to save last.pt")
        return f"interrupted by {name}"
    save_state(run_dir / "checkpoints" / "last.pt", cfg, model, optimizer, scheduler, toks, progress, ema, rngs,
               agreement.state() if agreement is not None else None)
    dist.barrier("waiting for the other ranks after saving last.pt")
    last = (run_dir / "checkpoints" / "last.pt").resolve()
    keep = resume_overrides(overrides)
    command = shlex.join([*keep, override("train.resume", last), override("hydra.run.dir", run_dir.resolve())])
    where = (f" (on each of the {machines(dist)} machines, RENDEZVOUS being its --node_rank and rendezvous "
             "options as at the start)") if machines(dist) > 1 else ""
    log.warning("%s: stopped at step %d and saved %s. Resume with%s:\n  %s %s", name, progress.step, last, where,
                launcher(dist), command)
    return f"interrupted by {name}"


def machines(dist: Distributed) -> int:
    """How many machines the run's ranks are on: torchrun's ``GROUP_WORLD_SIZE`` (1 without torchrun)."""
    return int(os.environ.get("GROUP_WORLD_SIZE") or 1) if dist.active else 1


def launcher(dist: Distributed) -> str:
    """The start of the command that ran this training, for its printed resume command: ``nmt-train``,
    ``python -m nmt.train`` or ``python PATH/train.py`` with the path as it was typed (so the command also works
    from another folder), each after ``torchrun --nproc_per_node N`` (as ``-m nmt.train`` or the script) when
    torchrun started it; on several machines ``torchrun --nnodes M --nproc_per_node N RENDEZVOUS``, as the
    machines' rendezvous options (``--node_rank``, ``--master_addr`` or ``--rdzv_endpoint``) are not known here."""
    installed = command_name("train.py", "nmt-train") == "nmt-train"
    script = ["-m", "nmt.train"] if installed or Path(sys.argv[0]).parent.name == "nmt" else [sys.argv[0]]
    if (nodes := machines(dist)) > 1:
        per_node = int(os.environ.get("LOCAL_WORLD_SIZE") or dist.world_size // nodes)
        return f"torchrun --nnodes {nodes} --nproc_per_node {per_node} RENDEZVOUS {shlex.join(script)}"
    if dist.active:
        return f"torchrun --nproc_per_node {dist.world_size} {shlex.join(script)}"
    return "nmt-train" if installed else f"python {shlex.join(script)}"


def resume_overrides(overrides) -> list[str]:
    """The command-line ``overrides`` that the printed resume command repeats: all but the run folder and
    ``train.resume`` (it names them anew) and ``train.init`` (the resumed run continues from last.pt, whose config
    keeps where it started; with both set the command would be refused)."""
    return [o for o in overrides if not o.lstrip("+").startswith(("hydra.run.dir=", "train.resume=", "train.init="))]


def stop_reason(t, progress: Progress, elapsed: float) -> str | None:
    """Why training should stop now, or None."""
    if t.max_steps and progress.step >= t.max_steps:
        return f"max_steps={t.max_steps} reached"
    if t.max_epochs and progress.epoch >= t.max_epochs:
        return f"max_epochs={t.max_epochs} reached"
    if t.max_minutes and elapsed >= 60 * t.max_minutes:
        return f"max_minutes={t.max_minutes} reached"
    return None
