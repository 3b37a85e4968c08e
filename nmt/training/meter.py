"""The training meter: loss and target tokens/s since the last validation, as a progress bar or log lines.
"""

from __future__ import annotations

import logging
import sys
import time

from tqdm import tqdm

from nmt.training.state import Progress

log = logging.getLogger(__name__)


class Meter:
    """Training loss (nats per target token) and target tokens/s since the last validation, shown as a progress
    bar on a terminal; sent to a file (nohup, a scheduler's log) a bar would be one endless line of carriage
    returns, so there a plain log line every ``train.log_every`` steps replaces it."""

    def __init__(self, t, progress: Progress, enabled: bool = True):
        self.bar = tqdm(total=t.max_steps, initial=progress.step, desc="train", unit="step", mininterval=2.0,
                        disable=not (enabled and sys.stderr.isatty()))
        self.log_every = (t.get("log_every") or 0) if enabled else 0
        self.reset()

    def reset(self) -> None:
        """Start a new window (after a validation)."""
        self.tokens, self.loss_tokens, self.loss, self.steps, self.start = 0, 0, 0.0, 0, time.monotonic()

    def rate(self) -> float:
        """Target tokens/s in the window."""
        return self.tokens / max(time.monotonic() - self.start, 1e-9)

    def update(self, loss: float, ntok: int, progress: Progress, minutes: float, lr: float,
               tokens: int | None = None) -> None:
        """Count one step of ``ntok`` target tokens with summed ``loss``; refresh the bar or log a line.
        ``tokens``: the step's target tokens over all ranks (default ``ntok``), the unit of tokens/s."""
        self.tokens, self.loss, self.steps = self.tokens + (ntok if tokens is None else tokens), self.loss + loss, \
            self.steps + 1
        self.loss_tokens += ntok
        self.bar.update(1)
        if not self.bar.disable:
            self.bar.set_postfix(epoch=progress.epoch, loss=f"{loss / ntok:.3f}", tok_s=f"{self.rate():.0f}",
                                 refresh=False)
        elif self.log_every and progress.step % self.log_every == 0:
            log.info("step %d (epoch %d, %.1f min): train loss %.3f, %.0f tok/s, lr %.3g", progress.step,
                     progress.epoch, minutes, self.loss / max(self.loss_tokens, 1), self.rate(), lr)

    def record(self) -> dict:
        """The window's figures for metrics.jsonl."""
        return {"train_loss": self.loss / max(self.loss_tokens, 1), "tokens_per_sec": self.rate()}
