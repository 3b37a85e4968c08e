"""The run folder's lock: one training command at a time in a run folder.

``train.py`` takes it before it writes anything into its run folder (its ``.hydra/`` record included) and keeps
it until it ends, so a second command into a folder where a run is training is refused at once, naming the
process that holds it, instead of training beside it (two records per step in ``metrics.jsonl``, one run's
checkpoints overwriting the other's).

The lock is an operating-system advisory lock (``fcntl.flock``) on ``RUN/train.lock``, a small JSON file that
says who holds it (process id, host, start time, command). The operating system releases it when the process
ends, however it ends: a run killed with SIGKILL leaves the file behind, unlocked, and the next command takes
it. A run that ends normally removes it. On a platform without ``fcntl`` (Windows) the file is created
exclusively instead: a killed run's file then stays and must be deleted by hand (the refusal says so). On a
file system that refuses locks (some network mounts) the run goes on unlocked, with a warning.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

log = logging.getLogger(__name__)

LOCK_NAME = "train.lock"
BUSY = (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK)  # flock's "another process holds it"


class RunFolderBusy(RuntimeError):
    """Another process holds the run folder's lock: the message names the folder, the holder (process id, host,
    start time, command) and what to do."""


class RunLock:
    """A held run-folder lock (:func:`lock_run_folder`); :meth:`release` gives it back. ``path`` is None when the
    file system refused locks and the run goes on unlocked."""

    def __init__(self, path: Path | None, fd: int | None):
        self.path, self.fd = path, fd

    def release(self) -> None:
        """Remove the lock file (while still holding it, and only if it is still this lock's file) and unlock;
        a second call does nothing."""
        if self.fd is None:
            return
        try:
            if self.path is not None and _same_file(self.fd, self.path):
                self.path.unlink()
        except OSError:
            pass  # the folder went away: nothing to remove
        os.close(self.fd)  # closing the file releases the flock
        self.fd = None


def lock_run_folder(run_dir: str | Path, command: str = "") -> RunLock:
    """Take the lock of ``run_dir`` (created if missing) for this process, recording its id, host, start time and
    ``command`` in ``run_dir/train.lock``.

    Raises:
        RunFolderBusy: when another live process holds it (a message naming the folder, the holder and what to
            do: wait for it, or choose another ``hydra.run.dir``).
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_NAME
    record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                         "started": time.strftime("%Y-%m-%d %H:%M:%S"), "command": command}) + "\n"
    if fcntl is None:
        return _exclusive(path, record)
    for _ in range(10):  # a holder that ends meanwhile removes the file it locked: lock the new one
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno in BUSY:
                raise RunFolderBusy(busy_message(path)) from None
            log.warning("%s: this file system refused a lock (%s): the run goes on without one, so make sure no "
                        "other command trains in %s meanwhile", path, err, run_dir)
            return RunLock(None, None)
        if _same_file(fd, path):
            os.ftruncate(fd, 0)
            os.write(fd, record.encode("utf-8"))
            return RunLock(path, fd)
        os.close(fd)
    raise RunFolderBusy(busy_message(path))


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the open file ``fd`` (not removed or replaced since it was opened)."""
    try:
        mine, now = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (mine.st_dev, mine.st_ino) == (now.st_dev, now.st_ino)


def _exclusive(path: Path, record: str) -> RunLock:
    """Without ``fcntl``: the lock is the file itself, created only if absent (removed by :meth:`RunLock.release`).

    Raises:
        RunFolderBusy: the file exists (its holder runs, or was killed and left it: then delete it).
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise RunFolderBusy(busy_message(path) + f". If that process no longer runs (it was killed), delete "
                            f"{path} and run the command again") from None
    os.write(fd, record.encode("utf-8"))
    return RunLock(path, fd)


def holder(path: Path) -> str:
    """Who holds the lock file ``path``, as its record says: ``pid P on host H, started T (command)``."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        text = f"pid {record['pid']} on host {record['host']}, started {record['started']}"
        command = str(record.get("command") or "")
        return text + (f" ({command[:300]}{'...' if len(command) > 300 else ''})" if command else "")
    except (OSError, ValueError, KeyError, TypeError):  # being written this instant, or not ours
        return "a process that has not written its record yet"


def busy_message(path: Path) -> str:
    """The refusal for a run folder whose lock ``path`` another process holds: the folder, the holder, and what
    to do."""
    return (f"run folder {path.parent} is in use: another training run holds its lock {path}: {holder(path)}. "
            "Wait until it ends, or choose another folder (hydra.run.dir=...; for a sweep, hydra.sweep.dir=...)")
