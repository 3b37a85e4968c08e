"""SIGINT/SIGTERM during training: finish the current step, save ``last.pt``, print the resume command.
"""

from __future__ import annotations

import logging
import signal
import threading
from contextlib import contextmanager

log = logging.getLogger(__name__)


@contextmanager
def stop_on_signals(abort_on_second: bool = True):
    """While active, SIGINT/SIGTERM set ``flag["signal"]`` so the loop can finish its step and save; a second
    signal aborts at once (KeyboardInterrupt) when ``abort_on_second``. Under torchrun it is not (a Ctrl-C
    reaches every worker from the terminal and again from torchrun, which ends them itself after its grace
    period). Outside the main thread, signals are left alone."""
    flag: dict = {"signal": None}
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum, _frame):
        if flag["signal"]:
            if abort_on_second:
                raise KeyboardInterrupt
            return
        flag["signal"] = signal.Signals(signum).name
        log.warning("%s received: finishing the current step, then saving checkpoints/last.pt "
                    "(send it again to abort without saving)", flag["signal"])

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield flag
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
