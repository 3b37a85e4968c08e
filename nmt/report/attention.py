"""Attention as the report shows it: readable token labels, how sharp a run's attention is and how far it strays
from the diagonal, which test sentences to draw, and the matrices of those sentences from ``eval/test.alignments.npz``
(drawn from the saved files, never from a model).
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nmt.analysis.plot import display_token
from nmt.analysis.saved import NPZ_ERRORS, jsonl_of, read_records, unreadable
from nmt.report.runs import ReportError

_BYTE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def _utf8_size(lead: int) -> int:
    return 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4 if lead >> 3 == 0b11110 else 1


def _printable(char: str) -> str:
    """A character as a label: itself, or ``U+XXXX`` for a control, format or space character."""
    return f"U+{ord(char):04X}" if unicodedata.category(char)[0] in "CZ" else char


def _byte_labels(run: list[tuple[int, int]], labels: list[str]) -> None:
    """Label the byte pieces of one run (``[(position, byte)]``) with the characters they spell: each byte of
    an n-byte character gets ``"ä 1/2"``, ``"ä 2/2"``; a single byte its character; a byte that starts no valid
    character keeps its piece."""
    i = 0
    while i < len(run):
        size = _utf8_size(run[i][1])
        try:
            char = bytes(b for _, b in run[i:i + size]).decode("utf-8")
        except UnicodeDecodeError:
            i += 1
            continue
        for j, (pos, _) in enumerate(run[i:i + size]):
            labels[pos] = _printable(char) + (f" {j + 1}/{size}" if size > 1 else "")
        i += size


def display_tokens(pieces: list[str]) -> list[str]:
    """Axis labels of sentencepiece pieces: as :func:`nmt.analysis.plot.display_token` (``▁Mann`` -> ``Mann``,
    a continuation ``s`` -> ``·s``), and byte-fallback pieces as the characters they spell (``<0xC3> <0xA4>``
    -> ``ä 1/2``, ``ä 2/2``). Returns ``[len(pieces)]`` labels."""
    labels = [display_token(p) for p in pieces]
    run: list[tuple[int, int]] = []
    for pos, piece in enumerate([*pieces, ""]):
        match = _BYTE.match(piece)
        if match:
            run.append((pos, int(match.group(1), 16)))
        elif run:
            _byte_labels(run, labels)
            run = []
    return labels


def row_entropy(matrix: np.ndarray) -> float:
    """Mean entropy in bits of the rows of an attention matrix ``[T, S]`` (each row renormalized to sum to 1;
    all-zero rows left out): 0 when every row attends to one token, log2(S) when rows are uniform. NaN for an
    empty matrix."""
    a = np.asarray(matrix, dtype=np.float64)
    totals = a.sum(axis=1, keepdims=True) if a.size else np.zeros((0, 1))
    keep = totals[:, 0] > 0
    if not keep.any():
        return math.nan
    p = a[keep] / totals[keep]
    return float(-(p * np.log2(np.where(p > 0, p, 1.0))).sum(axis=1).mean())


def diagonal_distance(matrix: np.ndarray) -> float:
    """How far attention strays from the diagonal: the mean over rows t of ``|E[s]/(S-1) - t/(T-1)|``, where
    ``E[s]`` is the row's expected source position; both positions are fractions of the sentence, so 0 is the
    diagonal and 1 the opposite corner. 0 for a single row or column, NaN for an empty matrix."""
    a = np.asarray(matrix, dtype=np.float64)
    if a.size == 0:
        return math.nan
    rows, cols = a.shape
    if rows == 1 or cols == 1:
        return 0.0
    totals = a.sum(axis=1)
    keep = totals > 0
    expected = (a[keep] @ np.arange(cols)) / totals[keep] / (cols - 1)
    return float(np.abs(expected - np.arange(rows)[keep] / (rows - 1)).mean())


@dataclass
class SavedAlignments:
    """The matrices and tokens of one ``P.alignments.npz`` (+ ``.jsonl``), read once.

    Attributes:
        path: the ``.npz`` file.
        matrices: ``{index: [T, S] float32}``.
        records: ``{index: {"source_tokens", "hypothesis_tokens"}}``.
    """

    path: Path
    matrices: dict[int, np.ndarray]
    records: dict[int, dict] = field(default_factory=dict)


def read_saved(npz_path: str | Path) -> SavedAlignments:
    """Read every matrix of ``npz_path`` and the tokens beside it.

    Raises:
        ReportError: a missing, damaged or foreign file, naming it and how to write it again.
    """
    npz_path = Path(npz_path)
    try:
        with np.load(npz_path) as npz:
            matrices = {int(key): npz[key] for key in npz.files}
        records = read_records(jsonl_of(npz_path))
    except FileNotFoundError as err:
        raise ReportError(f"{err.filename}: missing; the run's final evaluation writes it (evaluate it again)") \
            from None
    except NPZ_ERRORS as err:
        raise ReportError(str(unreadable(npz_path, err))) from None
    return SavedAlignments(npz_path, matrices, records)


def attention_summary(saved: SavedAlignments) -> dict:
    """``{"entropy", "diagonal", "sentences"}``: :func:`row_entropy` and :func:`diagonal_distance` averaged
    over the non-empty sentences of a file."""
    sizes = [m for m in saved.matrices.values() if m.size]
    entropy = [row_entropy(m) for m in sizes]
    diagonal = [diagonal_distance(m) for m in sizes]
    return {"entropy": float(np.nanmean(entropy)) if sizes else math.nan,
            "diagonal": float(np.nanmean(diagonal)) if sizes else math.nan, "sentences": len(sizes)}


def choose_sentences(saved: SavedAlignments, count: int = 3, longest: int = 40) -> list[int]:
    """``count`` test sentences of different lengths to draw: among the non-empty ones of at most ``longest``
    source pieces, those at evenly spaced length quantiles (short, middle, long for three), lowest index first
    among equal lengths."""
    pool = sorted((len(rec["source_tokens"]), index) for index, rec in saved.records.items()
                  if rec["source_tokens"] and len(rec["source_tokens"]) <= longest)
    if not pool:
        pool = sorted((len(rec["source_tokens"]), index) for index, rec in saved.records.items()
                      if rec["source_tokens"])
    lengths = {i: n for n, i in pool}
    chosen: list[int] = []
    for k in range(min(count, len(pool))):
        target = pool[int((k + 0.5) / count * len(pool))][0]
        chosen.append(min((i for i in lengths if i not in chosen), key=lambda i: (abs(lengths[i] - target), i)))
    return chosen


@dataclass
class Panel:
    """One heatmap: a run's attention for one sentence.

    Attributes:
        label: the run.
        matrix: ``[T, S]`` weights.
        x: ``[S]`` source labels.
        y: ``[T]`` hypothesis labels.
        x_raw: ``[S]`` source pieces or words as saved (for the hover text).
        y_raw: ``[T]`` hypothesis pieces or words as saved.
        sure: gold sure links ``(source, target)`` to draw.
        possible: gold possible-only links to draw.
        entropy: the sentence's :func:`row_entropy`.
        diagonal: the sentence's :func:`diagonal_distance`.
    """

    label: str
    matrix: np.ndarray
    x: list[str]
    y: list[str]
    x_raw: list[str]
    y_raw: list[str]
    sure: set = field(default_factory=set)
    possible: set = field(default_factory=set)
    entropy: float = math.nan
    diagonal: float = math.nan


def piece_panel(label: str, saved: SavedAlignments, index: int) -> Panel:
    """The :class:`Panel` of sentence ``index`` of a saved file.

    Raises:
        ReportError: no such sentence in the file (naming it and the range it holds), or an empty one.
    """
    if index not in saved.matrices or index not in saved.records:
        held = f"0..{max(saved.matrices)}" if saved.matrices else "none"
        raise ReportError(f"sentence {index} is not in {saved.path} (it holds {held}); choose sentences= in range")
    matrix, rec = saved.matrices[index], saved.records[index]
    if matrix.size == 0:
        raise ReportError(f"sentence {index} of {saved.path} is empty (an empty input line): nothing to draw; "
                          "choose other sentences=")
    src, hyp = rec["source_tokens"], rec["hypothesis_tokens"]
    return Panel(label, matrix, display_tokens(src), display_tokens(hyp), src, hyp,
                 entropy=row_entropy(matrix), diagonal=diagonal_distance(matrix))
