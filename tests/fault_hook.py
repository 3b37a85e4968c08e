"""A fault injected into a ``python train.py`` or ``python translate.py`` subprocess of the tests, at a chosen
moment instead of after a guessed sleep.

:func:`install` copies this file as ``sitecustomize.py`` into a folder and returns the environment that puts
that folder on the subprocess's ``PYTHONPATH``; Python imports it at start-up, and it reads ``NMT_FAULT``, a
JSON object:

``at``      the function to wrap, ``"module:attribute"`` (looked up in that module's namespace, where the
            code under test finds it at call time), e.g. ``"nmt.training.validation:greedy_bleu"``.
``call``    the 1-based call that triggers (default 1); with ``path``, counting only the writes of files whose
            name contains it (``at`` must then be ``nmt.data.textio:write_file``, which gets the path).
``do``      ``kill`` (SIGKILL to itself: no handler, no clean-up, as a power cut or the OOM killer),
            ``SIGINT`` / ``SIGTERM`` (sent to itself, then the call goes on: the handler decides), or
            ``ENOSPC`` (raise ``OSError(ENOSPC)``, a full disk).

A write (``path`` given) writes half of its bytes before the fault, so the fault lands inside a file's write.
"""

from __future__ import annotations

import errno
import importlib
import json
import os
import shutil
import signal
from pathlib import Path


def install(folder: Path, fault: dict, env: dict | None = None) -> dict:
    """Put this file in ``folder`` as ``sitecustomize.py``; returns ``env`` (default ``os.environ``) with that
    folder first on ``PYTHONPATH`` and ``NMT_FAULT`` set to ``fault``."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(__file__, folder / "sitecustomize.py")
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), env.get("PYTHONPATH")]))
    env["NMT_FAULT"] = json.dumps(fault)
    return env


def _act(action: str) -> None:
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action in ("SIGINT", "SIGTERM"):
        os.kill(os.getpid(), getattr(signal, action))
    elif action == "ENOSPC":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    else:
        raise ValueError(f"NMT_FAULT: unknown action {action!r}")


def _wrap(fault: dict) -> None:
    module_name, _, name = fault["at"].partition(":")
    module = importlib.import_module(module_name)
    original = getattr(module, name)
    seen = {"calls": 0}
    wanted, action, part = int(fault.get("call", 1)), fault["do"], fault.get("path")

    def wrapper(*args, **kwargs):
        if part is not None and part not in Path(str(args[2])).name:  # write_file(fd, payload, path)
            return original(*args, **kwargs)
        seen["calls"] += 1
        if seen["calls"] != wanted:
            return original(*args, **kwargs)
        if part is not None:  # half of the file's bytes reach the disk first
            original(args[0], args[1][: len(args[1]) // 2], args[2])
            _act(action)
            return original(args[0], args[1][len(args[1]) // 2:], args[2])
        _act(action)
        return original(*args, **kwargs)

    setattr(module, name, wrapper)


if os.environ.get("NMT_FAULT") and __name__ == "sitecustomize":
    _wrap(json.loads(os.environ["NMT_FAULT"]))
