"""Tokenised training pairs on disk, for corpora larger than memory: built once by streaming, then mmapped.

A store is a folder of numpy ``.npy`` files, opened with ``mmap_mode="r"``, so a process holding one holds
only the pages it touches plus the lengths index (4 bytes a pair)::

    src.ids.npy      int32 [source tokens]  every pair's source ids (EOS included), one pair after another
    src.offsets.npy  int64 [N + 1]          pair i's source ids are src.ids[offsets[i]:offsets[i + 1]]
    tgt.ids.npy, tgt.offsets.npy            the same for the target side
    lengths.npy      int32 [N]              max(len(src), len(tgt)) per pair, what batch_indices groups by
    progress.json    while building: the sizes and counts after the last completed chunk (written atomically)
    meta.json        written last (atomically): only a folder with it is a complete store

:func:`build_store` appends chunk by chunk and continues an interrupted build from its last completed
chunk; :func:`cached_store` keeps stores under a cache folder by :func:`store_key`, so that a run reuses what
an earlier run built.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import operator
import os
import struct
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain, islice, zip_longest
from pathlib import Path

import numpy as np
from tqdm import tqdm

from nmt.data.corpus import DataError
from nmt.data.textio import atomic_write

log = logging.getLogger(__name__)

FORMAT = 1  # bump when the layout changes: old stores then get other keys and are refused by TokenStore
META, PROGRESS, LOCK = "meta.json", "progress.json", ".lock"
FILES = {"src.ids": "<i4", "src.offsets": "<i8", "tgt.ids": "<i4", "tgt.offsets": "<i8", "lengths": "<i4"}
HEADER = 128  # bytes of every .npy header: fixed, so that it is rewritten in place once the sizes are known
COUNTS = ("lines", "pairs", "src_tokens", "tgt_tokens", "dropped_empty", "dropped_long")


def _header(dtype: str, n: int) -> bytes:
    """A .npy (version 1.0) header of exactly HEADER bytes for a 1-d array of ``n`` items."""
    text = repr({"descr": dtype, "fortran_order": False, "shape": (n,)}).ljust(HEADER - 11) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode("latin1")


def _items(state: dict) -> dict[str, int]:
    """Items per file for the counts in ``state``."""
    n = state["pairs"]
    return {"src.ids": state["src_tokens"], "src.offsets": n + 1, "tgt.ids": state["tgt_tokens"],
            "tgt.offsets": n + 1, "lengths": n}


def _fingerprint(src_tok, tgt_tok, max_len: int | None) -> str:
    """sha256 hex of what the ids depend on besides the text: both models' bytes and vocabularies, max_len."""
    digest = hashlib.sha256(f"nmt-token-store {FORMAT} max_len={max_len}".encode())
    for tok in (src_tok, tgt_tok):
        digest.update(struct.pack("<Q", len(tok.model_proto)) + tok.model_proto)
        digest.update(json.dumps(tok.vocab).encode())
    return digest.hexdigest()


class TokenStore:
    """A complete store folder, opened read-only: ``len(store)`` pairs, ``store[i] -> (src_ids, tgt_ids)``
    (lists of ints, both ending in EOS, as :func:`nmt.data.batches.encode_pairs` gives them) and
    ``store.lengths`` (int32 ``[N]``, in memory). The id files are memory-mapped; pickling reopens the folder
    (no data copied).

    Raises:
        DataError: for a folder without ``meta.json`` (missing, or incomplete: a build stopped or still
            running), of another format, or whose files do not match its metadata (damaged).
    """

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        if not (self.folder / META).is_file():
            why = ("no such folder" if not self.folder.is_dir() else "its build stopped or is still running"
                   if (self.folder / PROGRESS).is_file() else "no meta.json")
            raise DataError(f"{self.folder} is not a complete token store ({why}): run "
                            "nmt.data.store.build_store (or cached_store) on the same data to finish it, or "
                            "delete the folder")
        self.meta = json.loads((self.folder / META).read_text(encoding="utf-8"))
        if self.meta.get("format") != FORMAT:
            raise DataError(f"{self.folder}: token store format {self.meta.get('format')}, this code reads "
                            f"{FORMAT}; delete the folder and build it again")
        load = lambda name, mmap: np.load(self.folder / f"{name}.npy", mmap_mode="r" if mmap else None)
        self._src, self._src_off = load("src.ids", True), load("src.offsets", True)
        self._tgt, self._tgt_off = load("tgt.ids", True), load("tgt.offsets", True)
        self.lengths: np.ndarray = load("lengths", False)
        arrays = (self._src, self._src_off, self._tgt, self._tgt_off, self.lengths)
        if [a.shape[0] for a in arrays] != list(_items(self.meta).values()):
            raise DataError(f"{self.folder}: its files do not match meta.json (a damaged token store); "
                            "delete the folder and build it again")

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> tuple[list[int], list[int]]:
        """Pair ``i`` (an int or numpy integer, negative from the end). Raises IndexError out of range."""
        i = operator.index(i)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"pair {i} out of range for a token store of {len(self)} pairs")
        a, b = self._src_off[i : i + 2].tolist()
        c, d = self._tgt_off[i : i + 2].tolist()
        return self._src[a:b].tolist(), self._tgt[c:d].tolist()

    def __iter__(self) -> Iterator[tuple[list[int], list[int]]]:
        return (self[i] for i in range(len(self)))

    def __reduce__(self):
        return TokenStore, (str(self.folder),)

    def __repr__(self) -> str:
        return f"TokenStore({str(self.folder)!r}, pairs={len(self)})"


def _paired(src_lines: Iterable[str], tgt_lines: Iterable[str], name: str) -> Iterator[tuple[str, str]]:
    end = object()
    for number, (s, t) in enumerate(zip_longest(src_lines, tgt_lines, fillvalue=end), start=1):
        if s is end or t is end:
            short, other = ("source", "target") if s is end else ("target", "source")
            raise DataError(f"{name}: the {short} side has {number - 1} lines but the {other} side has more; "
                            "parallel files must have the same number of lines")
        yield s, t


def _resumable(folder: Path, fingerprint: str) -> dict | None:
    """The state in progress.json when it belongs to the same tokenizers and max_len and the files hold at
    least what it records, else None."""
    try:
        state = json.loads((folder / PROGRESS).read_text(encoding="utf-8"))
        if state.get("format") != FORMAT or state.get("fingerprint") != fingerprint:
            return None
        for (f, dtype), items in zip(FILES.items(), _items(state).values()):
            if (folder / f"{f}.npy").stat().st_size < HEADER + items * int(dtype[-1]):
                return None
    except (OSError, ValueError, KeyError, AttributeError, TypeError):  # missing, unreadable, not our JSON
        return None
    return state


def _start(folder: Path, fingerprint: str, name: str) -> tuple[dict, dict]:
    """Progress state and the five files opened for appending: continued from progress.json (files truncated
    back to its sizes) when :func:`_resumable`, else started afresh."""
    state = _resumable(folder, fingerprint)
    if state is not None:
        log.info("%s: continuing the token store %s after %d lines", name, folder, state["lines"])
    elif (folder / PROGRESS).is_file():
        log.warning("%s: %s holds a partial build with other tokenizers; starting it afresh", name, folder)
    if state is None:
        state = {"format": FORMAT, "fingerprint": fingerprint, **dict.fromkeys(COUNTS, 0)}
        for f, dtype in FILES.items():
            start = np.zeros(1, dtype).tobytes() if f.endswith("offsets") else b""
            (folder / f"{f}.npy").write_bytes(_header(dtype, 0) + start)
        atomic_write(folder / PROGRESS, json.dumps(state))
    handles = {}
    for (f, dtype), items in zip(FILES.items(), _items(state).values()):
        handles[f] = open(folder / f"{f}.npy", "r+b")  # noqa: SIM115 (closed by build_store)
        handles[f].truncate(HEADER + items * int(dtype[-1]))  # drop what a killed chunk wrote past the record
        handles[f].seek(0, os.SEEK_END)
    return state, handles


def _append(handles: dict, state: dict, chunk: list[tuple[str, str]], src_tok, tgt_tok,
            max_len: int | None) -> None:
    """Encode one chunk with encode_pairs' rules, append it to the files (fsynced) and update ``state``."""
    keep = [(s, t) for s, t in chunk if s.strip() and t.strip()]
    src = src_tok.encode_batch([s for s, _ in keep]) if keep else []
    tgt = tgt_tok.encode_batch([t for _, t in keep]) if keep else []
    pairs = [(s, t) for s, t in zip(src, tgt) if max_len is None or max(len(s), len(t)) <= max_len]
    sizes = {}
    for side, seqs in (("src", [s for s, _ in pairs]), ("tgt", [t for _, t in pairs])):
        sizes[side] = np.fromiter(map(len, seqs), dtype="<i8", count=len(seqs))
        count = int(sizes[side].sum())
        ids = np.fromiter(chain.from_iterable(seqs), dtype="<i4", count=count)
        handles[f"{side}.ids"].write(ids.tobytes())
        ends = state[f"{side}_tokens"] + np.cumsum(sizes[side], dtype="<i8")
        handles[f"{side}.offsets"].write(ends.tobytes())
        state[f"{side}_tokens"] += count
    handles["lengths"].write(np.maximum(sizes["src"], sizes["tgt"]).astype("<i4").tobytes())
    for handle in handles.values():
        handle.flush()
        os.fsync(handle.fileno())
    state["lines"] += len(chunk)
    state["pairs"] += len(pairs)
    state["dropped_empty"] += len(chunk) - len(keep)
    state["dropped_long"] += len(keep) - len(pairs)


def _finish(folder: Path, state: dict, name: str, max_len: int | None) -> None:
    """Log the drops, refuse an empty result, write the final headers, then meta.json (last, atomically)."""
    if state["dropped_empty"]:
        log.info("%s: dropped %d pairs with an empty side", name, state["dropped_empty"])
    if state["dropped_long"]:
        log.info("%s: dropped %d pairs longer than max_len=%s subwords", name, state["dropped_long"], max_len)
    if not state["pairs"]:
        raise DataError(f"{name}: no usable sentence pairs left (all empty or longer than max_len={max_len} "
                        "subwords): put one sentence per line, or raise data.max_len")
    for (f, dtype), items in zip(FILES.items(), _items(state).values()):
        with open(folder / f"{f}.npy", "r+b") as handle:
            handle.write(_header(dtype, items))
            handle.flush()
            os.fsync(handle.fileno())
    atomic_write(folder / META, json.dumps({**state, "max_len": max_len}, indent=1) + "\n")
    (folder / PROGRESS).unlink(missing_ok=True)


def build_store(folder: str | Path, src_lines: Iterable[str], tgt_lines: Iterable[str], src_tok, tgt_tok,
                max_len: int | None, chunk_size: int = 20_000, total: int | None = None,
                name: str = "train") -> TokenStore:
    """Tokenise two line-aligned streams of sentences into the store ``folder`` and open it (the tokenizers are
    :class:`nmt.data.tokenizer.Tokenizer` s: ``encode_batch``, ``model_proto`` and ``vocab`` are used).

    Lines are read ``chunk_size`` pairs at a time and encoded with ``encode_batch``, with the rules of
    :func:`nmt.data.batches.encode_pairs` (pairs with an empty or whitespace-only side are dropped, and so are
    pairs with a side longer than ``max_len`` subwords, both counts logged): the pairs equal its output.
    After each chunk the files are fsynced and progress.json is written; a build that was killed continues
    from the last completed chunk (give it the same lines: those before that chunk are read again, not
    encoded). ``total`` (lines, optional) sizes the progress bar, shown only when stderr is a terminal. A
    complete ``folder`` is opened as it is. One process builds at a time (a lock file in ``folder``); another
    waits, then opens the finished store.

    Raises:
        DataError: when no pair is left, or the two streams differ in length; errors of the line iterables
            (e.g. nmt.data.textio.TextFileError) pass through, leaving a build that the next call continues.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / LOCK, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("%s: waiting for another process building the token store %s", name, folder)
            fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / META).is_file():
            return TokenStore(folder)
        began = time.perf_counter()
        state, handles = _start(folder, _fingerprint(src_tok, tgt_tok, max_len), name)
        pairs = _paired(src_lines, tgt_lines, name)
        bar = tqdm(total=total, initial=state["lines"], desc=f"tokenising {name}", unit=" lines",
                   mininterval=1.0, disable=not sys.stderr.isatty())
        try:
            if sum(1 for _ in islice(pairs, state["lines"])) < state["lines"]:
                raise DataError(f"{name}: the input has fewer lines than the interrupted build of {folder} "
                                "read; delete the folder")
            while chunk := list(islice(pairs, chunk_size)):
                _append(handles, state, chunk, src_tok, tgt_tok, max_len)
                atomic_write(folder / PROGRESS, json.dumps(state))
                bar.update(len(chunk))
        finally:
            bar.close()
            for handle in handles.values():
                handle.close()
        _finish(folder, state, name, max_len)
    log.info("%s: token store %s: %d pairs, %d + %d tokens, built in %.1f s", name, folder, state["pairs"],
             state["src_tokens"], state["tgt_tokens"], time.perf_counter() - began)
    return TokenStore(folder)


def store_key(files: Sequence[str | Path], src_tok, tgt_tok, max_len: int | None, extra=None) -> str:
    """A 16-hex-digit key of what a store's content depends on: each training file's resolved path, size and
    mtime_ns, both tokenizers' model bytes and vocabularies, ``max_len``, and ``extra`` (anything else the
    caller applies to the lines, e.g. normalization settings; JSON-serialisable, compared by its JSON text).

    Raises:
        FileNotFoundError: for a file that does not exist.
    """
    stats = []
    for path in files:
        resolved = Path(path).resolve()
        if not resolved.is_file():
            raise FileNotFoundError(f"training file not found: {path}")
        st = resolved.stat()
        stats.append([str(resolved), st.st_size, st.st_mtime_ns])
    record = json.dumps({"files": stats, "extra": extra, "model": _fingerprint(src_tok, tgt_tok, max_len)},
                        sort_keys=True, default=str)
    return hashlib.sha256(record.encode()).hexdigest()[:16]


def cached_store(cache_root: str | Path, files: Sequence[str | Path], src_tok, tgt_tok, max_len: int | None,
                 lines_factory: Callable[[], tuple[Iterable[str], Iterable[str]]], extra=None,
                 chunk_size: int = 20_000, total: int | None = None, name: str = "train") -> TokenStore:
    """The store of ``files`` under ``cache_root/<store_key(...)>``: reused when complete, else built (or an
    interrupted build continued) from ``lines_factory()`` -> (source lines, target lines), called only then.
    Logs which of the two happened.

    Raises:
        FileNotFoundError: from :func:`store_key`; DataError: from :func:`build_store`.
    """
    folder = Path(cache_root) / store_key(files, src_tok, tgt_tok, max_len, extra)
    if (folder / META).is_file():
        store = TokenStore(folder)
        log.info("%s: reusing the token store %s (%d pairs)", name, folder, len(store))
        return store
    log.info("%s: building the token store %s", name, folder)
    src_lines, tgt_lines = lines_factory()
    return build_store(folder, src_lines, tgt_lines, src_tok, tgt_tok, max_len, chunk_size, total, name)
