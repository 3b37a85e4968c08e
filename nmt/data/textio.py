"""Text files in and out, strictly: what a line is, what an encoding error says, and atomic writes.

Lines are split on ``\n`` only. A ``\r`` right before a line end (or the end of the file) is dropped, so
``\r\n`` counts as ``\n``; a lone ``\r``, U+2028, U+2029 or U+0085 inside a line stays inside it (Python's
``str.splitlines`` would split there and shift every later line). A UTF-8 byte-order mark at the start of a file
is dropped. Files ending in ``.gz`` are decompressed; ``-`` is stdin.
"""

from __future__ import annotations

import gzip
import os
import sys
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path


class TextFileError(ValueError):
    """A text file that cannot be read as UTF-8 lines; the message names the file, line and what to do."""


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
        name, fixed = ("stdin", "iconv -f latin1 -t utf-8") if str(path) == "-" else \
            (path, f"iconv -f latin1 -t utf-8 {path} > fixed.txt")
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


def atomic_write(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder, fsync and rename, so that a
    reader (or a crash) never sees a half-written file. ``-`` writes text to stdout.

    A symbolic link is followed (the file it points to is replaced, the link stays); something that exists but
    is not a regular file (``/dev/null``, ``/dev/stdout``, a named pipe) is written to directly, never replaced.
    """
    if str(path) == "-":
        sys.stdout.write(data if isinstance(data, str) else data.decode("utf-8"))
        sys.stdout.flush()
        return
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if os.path.exists(path) and not os.path.isfile(path):  # before realpath: /dev/stdout on a pipe resolves to a
        with open(path, "wb") as handle:                   # name that does not exist
            handle.write(payload)
        return
    path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file the mode open() would
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
