"""Word-level hard alignments from subword soft alignments (a leaf module: numpy + stdlib only).

Follows docs/attention.md, "Alignments as an output": the soft alignment of a translation is the matrix
``A[t, s] = a_t(s)`` of shape ``[hyp_len, src_len]`` in sentencepiece pieces. To compare with word-level gold
alignments (alignment error rate, as in the AER experiment of Luong et al. 2015, §5.3) we

1. merge pieces into words: **sum** over a word's source columns (attention mass on the word) and **mean**
   over its hypothesis rows (one distribution per target word),
2. link each target word to its argmax source word (``method="argmax_target"``, Luong et al. 2015),
3. write the links in Pharaoh format ``i-j`` (source word, target word, 0-based), the format of fast_align
   and eflomal.

Special tokens (``</s>``, ``<s>``, ``<pad>``) belong to no word: their rows and columns are dropped.
"""

from __future__ import annotations

import re

import numpy as np

WORD_START = "\u2581"  # "▁", sentencepiece's word-boundary marker
SPECIAL_TOKENS = frozenset({"</s>", "<s>", "<pad>"})
METHODS = ("argmax_target", "argmax_source", "threshold")
_BYTE_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def words_from_pieces(pieces: list[str]) -> list[int]:
    """Word index of each sentencepiece piece; ``-1`` for special tokens.

    A piece starting with "▁" starts a new word; the first (non-special) piece always starts word 0; every
    other piece (including byte-fallback pieces such as ``"<0xC3>"``) continues the current word.
    ``</s>``, ``<s>`` and ``<pad>`` get ``-1`` (excluded from words).

    Args:
        pieces: ``[num_pieces]`` sentencepiece pieces, e.g. ``["▁Ein", "▁Mann", "s", "</s>"]``.
    Returns:
        ``[num_pieces]`` word indices, e.g. ``[0, 1, 1, -1]``.
    """
    word, out = -1, []
    for piece in pieces:
        if piece in SPECIAL_TOKENS:
            out.append(-1)
            continue
        if word < 0 or piece.startswith(WORD_START):
            word += 1
        out.append(word)
    return out


def _surface(pieces: list[str]) -> str:
    """Detokenized surface form of one word's pieces: joined, leading "▁" removed, byte pieces decoded."""
    text, raw = [], bytearray()
    for piece in pieces:
        byte = _BYTE_PIECE.match(piece)
        if byte:
            raw.append(int(byte.group(1), 16))
            continue
        if raw:
            text.append(raw.decode("utf-8", errors="replace"))
            raw.clear()
        text.append(piece)
    if raw:
        text.append(raw.decode("utf-8", errors="replace"))
    return "".join(text).replace(WORD_START, " ").strip()


def _group(pieces: list[str]) -> tuple[list[list[int]], list[str]]:
    """Piece positions of each word (``[num_words][...]``) and the words' surface forms."""
    ids = words_from_pieces(pieces)
    n_words = max(ids, default=-1) + 1
    members: list[list[int]] = [[] for _ in range(n_words)]
    for pos, w in enumerate(ids):
        if w >= 0:
            members[w].append(pos)
    return members, [_surface([pieces[p] for p in m]) for m in members]


def merge_to_words(
    matrix: np.ndarray, src_pieces: list[str], hyp_pieces: list[str]
) -> tuple[np.ndarray, list[str], list[str]]:
    """Merge a subword soft alignment into a word-level one (docs/attention.md, "Alignments as an output").

    ``word_matrix[i, j]`` = mean over the hypothesis pieces of target word ``i`` of the sum over the source
    pieces of source word ``j`` of ``matrix``. Rows/columns of special tokens (``</s>``, ...) are dropped.

    Args:
        matrix: ``[hyp_len, src_len]`` soft alignment in pieces (``hyp_len == len(hyp_pieces)``,
            ``src_len == len(src_pieces)``); ``[0, 0]`` for an empty sentence.
        src_pieces: ``[src_len]`` source pieces.
        hyp_pieces: ``[hyp_len]`` hypothesis pieces.
    Returns:
        ``(word_matrix [hyp_words, src_words] float32, src_words, hyp_words)`` with the words' surface forms.
    Raises:
        ValueError: if the matrix shape does not match the token counts.
    """
    matrix = np.asarray(matrix, dtype=np.float32)
    expected = (len(hyp_pieces), len(src_pieces))
    if matrix.size == 0 and expected[0] * expected[1] == 0:
        matrix = matrix.reshape(expected)
    if matrix.shape != expected:
        raise ValueError(
            f"alignment matrix has shape {matrix.shape}, expected [len(hyp_pieces), len(src_pieces)] = "
            f"{expected}"
        )
    src_members, src_words = _group(src_pieces)
    hyp_members, hyp_words = _group(hyp_pieces)
    out = np.zeros((len(hyp_members), len(src_members)), dtype=np.float32)
    for j, cols in enumerate(src_members):
        summed = matrix[:, cols].sum(axis=1)  # [hyp_len]
        for i, rows in enumerate(hyp_members):
            out[i, j] = summed[rows].mean()
    return out, src_words, hyp_words


def hard_alignment(
    word_matrix: np.ndarray, method: str = "argmax_target", threshold: float = 0.3
) -> list[tuple[int, int]]:
    """Hard links ``(source_word, target_word)``, 0-based, from a word-level soft alignment.

    Methods:
        ``"argmax_target"``: each target word -> its argmax source word (Luong et al. 2015, §5.3 AER
            experiment; docs/attention.md). Target words whose row is all zero get no link.
        ``"argmax_source"``: each source word -> its argmax target word (columns all zero get no link).
        ``"threshold"``: every cell ``>= threshold``.

    Args:
        word_matrix: ``[hyp_words, src_words]`` soft alignment, e.g. from :func:`merge_to_words`.
        method: one of ``METHODS``.
        threshold: cut-off for ``method="threshold"``.
    Returns:
        sorted list of ``(source_word, target_word)`` links; ``[]`` for an empty matrix.
    Raises:
        ValueError: on an unknown method (naming the valid ones) or a matrix that is not 2-D.
    """
    if method not in METHODS:
        raise ValueError(f"unknown alignment method {method!r}; valid methods: {', '.join(METHODS)}")
    a = np.asarray(word_matrix, dtype=np.float32)
    if a.ndim != 2:
        raise ValueError(f"word_matrix must be 2-D [hyp_words, src_words], got shape {a.shape}")
    if a.size == 0:
        return []
    if method == "argmax_target":
        links = [(int(a[t].argmax()), t) for t in range(a.shape[0]) if a[t].any()]
    elif method == "argmax_source":
        links = [(s, int(a[:, s].argmax())) for s in range(a.shape[1]) if a[:, s].any()]
    else:
        links = [(int(s), int(t)) for t, s in zip(*np.nonzero(a >= threshold))]
    return sorted(links)


def to_pharaoh(links: list[tuple[int, int]]) -> str:
    """Pharaoh line ``"i-j i-j ..."`` (source word first, 0-based, sorted, duplicates removed).

    The format of fast_align and eflomal (docs/attention.md); ``[]`` gives ``""``.

    Args:
        links: ``[num_links]`` pairs ``(source_word, target_word)``.
    """
    return " ".join(f"{s}-{t}" for s, t in sorted({(int(s), int(t)) for s, t in links}))


def pharaoh_line(
    matrix: np.ndarray,
    src_pieces: list[str],
    hyp_pieces: list[str],
    method: str = "argmax_target",
    threshold: float = 0.3,
) -> str:
    """One Pharaoh line from a subword soft alignment ``[hyp_len, src_len]``: merge, link, format.

    Convenience for writing ``eval/{split}.align`` (docs/design.md §2): :func:`merge_to_words`, then
    :func:`hard_alignment`, then :func:`to_pharaoh`. An empty sentence gives ``""``.
    """
    word_matrix, _, _ = merge_to_words(matrix, src_pieces, hyp_pieces)
    return to_pharaoh(hard_alignment(word_matrix, method=method, threshold=threshold))
