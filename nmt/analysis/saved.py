"""Reading saved alignment files: ``P.alignments.npz`` (one float32 ``[hypothesis tokens, source tokens]``
matrix per line, key = 0-based line index) and ``P.alignments.jsonl`` (their tokens), with errors that name the
file, the line and what to do.
"""

from __future__ import annotations

import json
import struct
import tokenize
import zipfile
import zlib
from pathlib import Path


def jsonl_of(npz_path: Path) -> Path:
    """The tokens file beside an alignments file: ``P.alignments.npz`` -> ``P.alignments.jsonl``."""
    return npz_path.with_suffix(".jsonl")


def index_range(keys: list[int]) -> str:
    """The range of indices a file holds, for an error message."""
    return f"{min(keys)}..{max(keys)}" if keys else "none (empty file)"


# what numpy and zipfile raise for a truncated, damaged or foreign .npz
NPZ_ERRORS = (ValueError, zipfile.BadZipFile, zlib.error, EOFError, tokenize.TokenError, NotImplementedError,
               struct.error, OSError)


REWRITE = "write it again with translate.py alignments=... or a training run's evaluation"


def unreadable(npz_path: Path, err: Exception) -> ValueError:
    """The error for a truncated, damaged or foreign ``.npz`` (what to do included)."""
    return ValueError(f"{npz_path} is not a readable .npz file ({type(err).__name__}: {err}): {REWRITE}")


def read_records(jsonl_path: Path) -> dict:
    """The token records of a ``.jsonl`` file by index; ValueError names the file (and bad line)."""
    records = {}
    try:
        # not splitlines(): U+2028 may sit in a token
        lines = jsonl_path.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as err:
        raise ValueError(f"{jsonl_path} is not UTF-8 text ({err}): {REWRITE}") from err
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                rec = json.loads(line)
                if isinstance(rec["index"], bool) or not isinstance(rec["index"], int):
                    raise TypeError(f"index {rec['index']!r} is not a whole number")
                records[rec["index"]] = rec
            except (ValueError, KeyError, TypeError) as err:  # not JSON, no "index", or not a whole number
                raise ValueError(f"{jsonl_path}: line {number} is not a token record with an index "
                                 f"({type(err).__name__}: {err}); {REWRITE}") from err
    return records


def checked_indices(npz, npz_path: Path, jsonl_path: Path, records: dict, indices: list[int],
                     gold) -> list[int]:
    """``indices`` as ints, each checked to be in the npz, the jsonl and the gold (else KeyError)."""
    try:
        keys = sorted(int(k) for k in npz.files)
    except ValueError as err:  # a damaged member name
        raise unreadable(npz_path, err) from err
    indices = [int(index) for index in indices]
    for index in indices:  # all of them before drawing any: a bad one leaves no partial set of plots
        if str(index) not in npz.files:
            raise KeyError(f"index {index} not in {npz_path}; available indices: {index_range(keys)}")
        if index not in records:
            raise KeyError(
                f"index {index} not in {jsonl_path}; available indices: {index_range(sorted(records))}"
            )
        if gold is not None and index >= len(gold):
            raise KeyError(f"index {index} not in the gold file {gold.path} ({len(gold)} sentences)")
    return indices
