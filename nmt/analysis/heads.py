"""The heads of a multi-head attention model (:mod:`nmt.models.multihead`) as word aligners: one head's matrices,
and every head's alignment error rate against gold links (:mod:`nmt.analysis.aer`).

A head is named ``mean`` (the heads' mean, the combined matrix that ``P.alignments.npz`` holds and every model
has), a 0-based head index, or ``best``: the head with the lowest AER on the **first half** of the gold lines
(lines ``0 .. ceil(n/2) - 1``; ties go to the lower index), whose AER is then reported on the other half as well,
lines the choice did not see (:func:`best_head`).

The matrices come from translations (``Translation.heads`` ``[heads, T, S]``: forced alignment, search) or from
saved files: ``P.alignments.heads.npz`` beside ``P.alignments.npz`` (:func:`nmt.decoding.artifacts.heads_path`;
:func:`read_heads`, :func:`load_saved`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from nmt.analysis.aer import AERResult, aer
from nmt.analysis.forced import links
from nmt.analysis.gold import Alignments, Link
from nmt.analysis.saved import NPZ_ERRORS, jsonl_of, read_records, unreadable
from nmt.decoding.artifacts import heads_path
from nmt.decoding.translation import Translation

HEAD_CHOICES = ("mean", "best")  # besides a 0-based head index


def parse_head(text: str) -> str | int:
    """``head=`` as written: ``"mean"``, ``"best"`` or a 0-based head index (an int).

    Raises:
        ValueError: for anything else (a negative number included).
    """
    if text in HEAD_CHOICES:
        return text
    if not text.isdigit():
        raise ValueError(f"head={text}: use mean (the heads' mean), a 0-based head index, or best (needs gold=)")
    return int(text)


def head_count(translations: Sequence[Translation]) -> int:
    """The number of heads of the model that made ``translations``: 0 when none carries per-head matrices."""
    return next((t.heads.shape[0] for t in translations if t.heads is not None), 0)


def select_head(translation: Translation, head: str | int) -> np.ndarray:
    """One line's matrix ``[T, S]`` for ``head``: ``"mean"`` -> ``translation.alignment``; an index i ->
    ``translation.heads[i]`` (an empty line, which has no heads, gives its ``[0, 0]`` matrix).

    Raises:
        ValueError: for ``"best"`` (choose it first: :func:`best_head`), an index on a line without per-head
            matrices, or an index beyond the heads.
    """
    if head == "mean" or (translation.heads is None and not translation.hyp_pieces):
        return translation.alignment
    if head == "best":
        raise ValueError("head=best: choose the head first (best_head), then select it by its index")
    if translation.heads is None:
        raise ValueError(f"head={head}: this model has one attention head (only multi-head attention has more); "
                         "use head=mean")
    count = translation.heads.shape[0]
    if not 0 <= head < count:
        raise ValueError(f"head={head}: the model has {count} heads, numbered 0..{count - 1}")
    return translation.heads[head]


def with_head(translations: Sequence[Translation], head: str | int) -> list[Translation]:
    """The translations with ``alignment`` replaced by ``head``'s matrix (:func:`select_head`); the per-head
    matrices stay."""
    if head == "mean":
        return list(translations)
    return [dataclasses.replace(t, alignment=select_head(t, head)) for t in translations]


def halves(count: int) -> tuple[range, range]:
    """The gold lines that choose a head (the first ``ceil(count/2)``) and the rest, which score it."""
    half = (count + 1) // 2
    return range(half), range(half, count)


def head_aer(translations: Sequence[Translation], gold: Alignments, head: str | int, lines: Sequence[int],
             extract: Callable[[Translation], list[Link]] = links) -> AERResult:
    """AER of ``head``'s links (``extract``: argmax_target by default) on the gold ``lines`` (0-based indices
    into both ``translations`` and ``gold``)."""
    chosen = with_head([translations[i] for i in lines], head)
    return aer([gold.sure[i] for i in lines], [gold.possible[i] for i in lines], [extract(t) for t in chosen])


@dataclasses.dataclass(frozen=True)
class HeadChoice:
    """The result of :func:`best_head`: ``head`` (0-based), its AER on the lines that chose it (``chosen_on``),
    its AER on the other lines (``held_out``, NaN when there are none), and every head's AER on the choosing
    lines (``per_head``, by index)."""

    head: int
    chosen_on: range
    selection: AERResult
    held_out_lines: range
    held_out: AERResult
    per_head: list[AERResult]


def best_head(translations: Sequence[Translation], gold: Alignments,
              extract: Callable[[Translation], list[Link]] = links) -> HeadChoice:
    """The head with the lowest AER on the first half of the gold lines (:func:`halves`), scored on the rest.

    Args:
        translations: one per gold line, with per-head matrices (a multi-head model's forced alignments).
        gold: the gold links of the same lines (:func:`nmt.analysis.gold.read_pharaoh`).
        extract: links of one translation, ``(source_word, target_word)`` (default: argmax_target).
    Raises:
        ValueError: without per-head matrices, with fewer than 2 lines, or when the line counts differ.
    """
    count = head_count(translations)
    if not count:
        raise ValueError("head=best chooses among attention heads, but this model has one (only multi-head "
                         "attention has more): use head=mean")
    if len(translations) != len(gold):
        raise ValueError(f"{len(translations)} sentence pairs but the gold file {gold.path} has {len(gold)} lines")
    if len(gold) < 2:
        raise ValueError("head=best needs at least 2 gold lines: one half chooses the head, the other scores it")
    choose, rest = halves(len(gold))
    per_head = [head_aer(translations, gold, h, choose, extract) for h in range(count)]
    head = min(range(count), key=lambda h: (math.isnan(per_head[h].aer), per_head[h].aer, h))
    return HeadChoice(head, choose, per_head[head], rest, head_aer(translations, gold, head, rest, extract), per_head)


def read_heads(npz_path: str | Path) -> dict[int, np.ndarray]:
    """The per-head matrices saved beside the alignments file ``npz_path`` (``P.alignments.npz`` ->
    ``P.alignments.heads.npz``), by line: ``[heads, T, S]`` float32, each checked against the line's combined
    matrix (same shape, the heads' mean equal to it).

    Raises:
        FileNotFoundError: no heads file (a single-head model writes none), naming it.
        ValueError: an unreadable file, or one that does not belong to ``npz_path`` (other lines, shapes or
            values: a heads file left from another model), naming both.
    """
    npz_path, path = Path(npz_path), heads_path(npz_path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: only a multi-head attention model saves every head's matrices "
                                f"beside {npz_path.name}")
    try:
        with np.load(npz_path) as combined, np.load(path) as saved:
            heads = {int(key): saved[key] for key in saved.files}
            means = {int(key): combined[key] for key in combined.files}
    except NPZ_ERRORS as err:
        raise unreadable(path, err) from err
    for line, matrix in means.items():
        stack = heads.get(line)
        if stack is None or stack.shape[1:] != matrix.shape or not np.allclose(stack.mean(axis=0), matrix, atol=1e-4):
            raise ValueError(f"{path} does not match {npz_path} at line {line}: a heads file left from another "
                             "evaluation; write both again")
    return heads


def load_saved(npz_path: str | Path) -> list[Translation]:
    """Saved alignments as translations, by line index: the combined matrices (``npz_path``), their tokens (the
    ``.jsonl`` beside it) and, when there is a heads file, every head's matrices (:func:`read_heads`); ``text``
    and the scores are not saved there (empty, 0).

    Raises:
        FileNotFoundError, ValueError: a missing or unreadable file, naming it.
    """
    npz_path = Path(npz_path)
    records = read_records(jsonl_of(npz_path))
    heads = read_heads(npz_path) if heads_path(npz_path).is_file() else {}
    try:
        with np.load(npz_path) as combined:
            matrices = {int(key): combined[key] for key in combined.files}
    except NPZ_ERRORS as err:
        raise unreadable(npz_path, err) from err
    missing = sorted(set(matrices) - set(records))
    if missing:
        raise ValueError(f"{jsonl_of(npz_path)} has no tokens for line {missing[0]} of {npz_path}; write both again")
    return [Translation("", records[i]["source_tokens"], records[i]["hypothesis_tokens"], matrices[i], 0.0,
                        heads=heads.get(i)) for i in sorted(matrices)]
