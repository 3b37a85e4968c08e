"""Text files in and out, strictly: what a line is, what an encoding error says, and atomic writes.

Lines are split on ``\n`` only. A ``\r`` right before a line end (or the end of the file) is dropped, so
``\r\n`` counts as ``\n``; a lone ``\r``, U+2028, U+2029 or U+0085 inside a line stays inside it (Python's
``str.splitlines`` would split there and shift every later line). A UTF-8 byte-order mark at the start of a file
is dropped. Files ending in ``.gz`` are decompressed; ``-`` is stdin.

Files are written through a temporary file beside the final name, fsynced, then renamed (:func:`atomic_write`;
:class:`StagedWrites` for several files that are replaced together or not at all), so a crash, a signal or a full
disk never leaves a half-written file under the final name; a failed write is a :class:`WriteError` that names
the file and what to do.
"""

from __future__ import annotations

import errno
import gzip
import os
import re
import signal
import sys
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path


class TextFileError(ValueError):
    """A text file that cannot be read as UTF-8 lines (or a file that cannot be written: :class:`WriteError`); the
    message names the file, line and what to do."""


class WriteError(TextFileError, OSError):
    """A file that could not be written: a full disk, a quota, a read-only file system, no permission. The message
    names the file and what to do; ``errno``, ``strerror`` and ``filename`` are set as in an ``OSError``. It is an
    ``OSError`` and a :class:`TextFileError`, so the entry points report it in one line."""

    def __init__(self, message: str, path: str | Path, cause: OSError):
        super().__init__(message)
        self.errno, self.strerror, self.filename = cause.errno, cause.strerror, str(path)

    def __str__(self) -> str:
        return str(self.args[0])


# what to do after a failed write, by the system's error number ({folder}: the folder of the file)
WRITE_HINTS = {
    errno.ENOSPC: "free some space on that disk (df -h {folder}) or write elsewhere",
    errno.EDQUOT: "your disk quota is used up: free some space within it (quota -s) or write elsewhere",
    errno.EROFS: "{folder} is on a read-only file system: write elsewhere",
    errno.EACCES: "you have no permission to write in {folder}: write elsewhere or change its permissions",
    errno.EPERM: "you have no permission to write in {folder}: write elsewhere or change its permissions",
    errno.EFBIG: "the file is larger than that file system allows: write elsewhere",
}
TEMPORARY = re.compile(r"^\..+\.[A-Za-z0-9_]{8}\.tmp$")  # .NAME.XXXXXXXX.tmp, tempfile.mkstemp's names of ours


def counted(number: int, noun: str) -> str:
    """``"1 line"``, ``"2 lines"``: a count with its noun in the singular or plural (an ``s`` added)."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


def file_named(value):
    """An absolute path string as the file it names (``/a/../b`` -> ``/b``, links followed), for comparing or
    printing settings; any other value (a relative path, a number, None) unchanged."""
    return os.path.realpath(value) if isinstance(value, str) and value.startswith("/") else value


def read_lines(path: str | Path, key: str | None = None) -> list[str]:
    """Read a UTF-8 text file (plain, ``.gz``, or ``-`` for stdin) into lines without their line ends; ``key`` (the
    setting that named the file, e.g. ``input``) is named in the error for a missing file. All of it at once:
    :func:`iter_lines` reads the same lines one at a time.

    Returns:
        one string per line; a final line without ``\\n`` counts, a file ending in ``\\n`` has no extra empty line.

    Raises:
        FileNotFoundError: naming the path (a folder is not a file; a pipe such as ``<(zcat f.gz)`` or
            ``/dev/stdin`` is read like a file).
        TextFileError: for bytes that are not UTF-8, naming the file, the 1-based line number and the byte, for
            a ``.gz`` file that does not decompress, and for a file that cannot be read (no permission).
    """
    return list(iter_lines(path, key))


def iter_lines(path: str | Path, key: str | None = None) -> Iterator[str]:
    """The lines of :func:`read_lines`, one at a time: the file (plain, ``.gz``, or ``-`` for stdin) is read
    as a stream, so memory stays at one line and a read buffer whatever the file's size.

    A missing file or a folder is refused at the call; the other errors come while iterating, when the line (or
    the gzip data) that causes them is reached, so lines before a bad one have been yielded by then.

    Raises:
        FileNotFoundError: naming the path, at the call (a missing file, a folder).
        TextFileError: while iterating, with the messages of :func:`read_lines` (bytes that are not UTF-8,
            with file, line and byte; a ``.gz`` file that does not decompress; a file that cannot be read).
    """
    if str(path) != "-":
        path = Path(path)
        if path.is_dir():
            raise FileNotFoundError(f"{f'{key}=' if key else ''}{path} is a folder, not a file")
        if not path.exists():
            raise FileNotFoundError(f"{key}={path}: file not found" if key else f"file not found: {path}")
    return _stream_lines(path, key)


def _stream_lines(path: str | Path, key: str | None) -> Iterator[str]:
    stdin = str(path) == "-"
    try:
        raw_file = sys.stdin.buffer if stdin else open(path, "rb")  # noqa: SIM115 (closed below)
    except OSError as err:  # no permission, an I/O error: named, not a traceback
        raise TextFileError(f"{f'{key}=' if key else ''}{path}: cannot be read ({err.strerror or err})") from None
    try:
        gz = not stdin and Path(path).suffix == ".gz"
        handle = gzip.GzipFile(fileobj=raw_file, mode="rb") if gz else raw_file
        for number, raw in enumerate(handle, start=1):  # binary lines end at b"\n" only
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
                if not raw:  # a file holding only the mark has no line
                    return
            if raw.endswith(b"\n"):
                raw = raw[:-1]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
            yield _decode(raw, number, path)
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:  # not gzip, truncated, damaged deflate data
        raise TextFileError(f"{path}: not a readable gzip file ({err}); check the file, or drop the .gz "
                            "suffix if it is plain text") from None
    except OSError as err:
        raise TextFileError(f"{f'{key}=' if key else ''}{path}: cannot be read ({err.strerror or err})") from None
    finally:
        if not stdin:
            raw_file.close()


def _decode(raw: bytes, number: int, path: str | Path) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        source = "utf-16" if number == 1 and raw[:2] in (b"\xff\xfe", b"\xfe\xff") else "latin1"  # its BOM
        name, fixed = ("stdin", f"iconv -f {source} -t utf-8") if str(path) == "-" else \
            (path, f"iconv -f {source} -t utf-8 {path} > fixed.txt")
        raise TextFileError(
            f"{name}: line {number}: byte 0x{raw[err.start]:02x} at column {err.start + 1} is not valid UTF-8; "
            f"re-encode the file as UTF-8 (for example: {fixed})"
        ) from None


def check_writable(path: str | Path, key: str, folder: bool = False) -> None:
    """Before any work: can :func:`atomic_write` write the file ``path`` (or, with ``folder``, create files in the
    folder ``path``), which the setting ``key`` names? Missing folders on the way are fine (they are created).

    The folder check creates and removes a temporary file there, so it also holds for root and for read-only or
    virtual file systems, where permission bits alone say yes.

    Raises:
        TextFileError: naming the setting, when something on the way is a file rather than a folder, or when the
            folder that would hold it (or an existing non-regular file such as a pipe) is not writable.
    """
    if str(path) == "-":
        return
    if not folder and os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path):
        if not os.access(path, os.W_OK):  # /dev/null, /dev/stdout (a pipe's realpath does not exist), a FIFO
            raise TextFileError(f"{key}={path}: no permission to write to it")
        return
    target = Path(os.path.realpath(path))
    parent = target if folder else target.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise TextFileError(f"{key}={path}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise TextFileError(f"{key}={path}: no permission to write in {parent}")
    # os.access says yes to root everywhere, and knows nothing of read-only or virtual file systems (/sys, /proc,
    # a read-only mount): only creating a file there tells. TemporaryFile leaves no name behind (O_TMPFILE, or
    # a file unlinked as soon as it is made).
    try:
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as err:
        raise TextFileError(f"{key}={path}: cannot create files in {parent} ({err.strerror}); choose another "
                            "folder") from err


def write_error(path: str | Path, err: OSError, outcome: str = "no file was replaced") -> WriteError:
    """The :class:`WriteError` for ``err`` while writing ``path``: the file, the system's reason, what to do, and
    ``outcome`` (what is on disk now)."""
    hint = WRITE_HINTS.get(err.errno, "check that disk and folder").format(folder=Path(path).parent)
    return WriteError(f"cannot write {path}: {err.strerror or err}: {hint}, then run the command again ({outcome})",
                      path, err)


def write_file(fd: int, payload: bytes, path: str | Path) -> None:
    """Write all of ``payload`` to the open file ``fd``: the one place where the bytes of :func:`atomic_write` and
    :class:`StagedWrites` reach a file (``path``, the final name they are for, lets a fault-injection test pick
    a file's write)."""
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view):]


class StagedWrites:
    """Files written together or not at all (``with StagedWrites() as files: files.add(...); files.commit()``).

    :meth:`add` writes each file to a temporary file beside its final name (``.NAME.XXXXXXXX.tmp``, fsynced);
    :meth:`commit` renames them all into place, holding SIGINT and SIGTERM back meanwhile (they arrive right
    after), so that no signal leaves some renamed and others not. Leaving the ``with`` block without the commit
    (an error, a signal) removes the temporary files: no final name was touched. ``-`` (stdout) and what exists
    but is not a regular file (``/dev/null``, ``/dev/stdout``, a named pipe) cannot be replaced: they are written
    directly, at the commit, after the renames. A symbolic link is followed (its target is replaced).

    Raises (from :meth:`add` and :meth:`commit`):
        WriteError: naming the file that could not be written (a full disk, a quota, a read-only file system, no
            permission) or renamed.
    """

    def __init__(self):
        self.staged: list[tuple[str, Path, str]] = []  # (temporary file, final file, the name as given)
        self.direct: list[tuple[str, str | bytes]] = []

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        for tmp, _, _ in self.staged:
            Path(tmp).unlink(missing_ok=True)
        self.staged = []

    def add(self, path: str | Path, data: str | bytes) -> None:
        """Write ``data`` (text as UTF-8) to a temporary file for ``path`` (its folders are created)."""
        if str(path) == "-" or (os.path.exists(path) and not os.path.isfile(path)):  # before realpath: /dev/stdout
            self.direct.append((str(path), data))  # on a pipe resolves to a name that does not exist
            return
        payload = data.encode("utf-8") if isinstance(data, str) else data
        target = Path(os.path.realpath(path))
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
            self.staged.append((tmp, target, str(path)))  # removed on leaving the block, whatever happens next
            with os.fdopen(fd, "wb") as handle:
                umask = os.umask(0)
                os.umask(umask)
                os.fchmod(handle.fileno(), 0o666 & ~umask)  # mkstemp creates 0600; give the mode open() would
                write_file(handle.fileno(), payload, path)
                os.fsync(handle.fileno())
        except OSError as err:
            raise write_error(path, err) from None

    def commit(self) -> None:
        """Rename every temporary file to its final name, then write the direct ones (stdout, devices, pipes)."""
        held = hasattr(signal, "pthread_sigmask")
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM}) if held else None
        try:
            for done, (tmp, target, named) in enumerate(self.staged):
                try:
                    os.replace(tmp, target)
                except OSError as err:
                    raise write_error(named, err, f"{done} of the {len(self.staged)} files written together were "
                                                  "replaced before it") from None
            self.staged = []
        finally:
            if held:
                signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        for path, data in self.direct:
            if path == "-":
                sys.stdout.write(data if isinstance(data, str) else data.decode("utf-8"))
                sys.stdout.flush()
            else:
                with open(path, "wb") as handle:
                    handle.write(data.encode("utf-8") if isinstance(data, str) else data)


def atomic_write(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder, fsync and rename, so that a
    reader (or a crash) never sees a half-written file. ``-`` writes text to stdout.

    A symbolic link is followed (the file it points to is replaced, the link stays); something that exists but
    is not a regular file (``/dev/null``, ``/dev/stdout``, a named pipe) is written to directly, never replaced.

    Raises:
        WriteError: naming the file, when it cannot be written (a full disk, a quota, a read-only file system,
            no permission); what was under that name is left as it was, and no temporary file stays.
    """
    write_together({path: data})


def write_together(files: dict) -> None:
    """Write every ``{path: data}`` of ``files`` or none (:class:`StagedWrites`): each to a temporary file first,
    then all renamed into place, so a failure or a signal on any of them replaces none.

    Raises:
        WriteError: naming the file that could not be written; no file was replaced, no temporary file stays.
    """
    with StagedWrites() as staged:
        for path, data in files.items():
            staged.add(path, data)
        staged.commit()


def remove_stale_temporaries(folder: str | Path, recursive: bool = False) -> list[Path]:
    """Remove the temporary files (``.NAME.XXXXXXXX.tmp``) that writes killed before their rename left in
    ``folder`` (and its subfolders with ``recursive``); only while no other process writes there. Returns them."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [p for p in (folder.rglob(".*.tmp") if recursive else folder.glob(".*.tmp"))
             if TEMPORARY.match(p.name) and p.is_file()]
    for path in found:
        path.unlink(missing_ok=True)
    return found
