"""Word-level hard alignments from subword soft alignments (a leaf module: numpy + stdlib only).

Follows docs/attention.md, "Alignments as an output": the soft alignment of a translation is the matrix
``A[t, s] = a_t(s)`` of shape ``[hyp_len, src_len]`` in sentencepiece pieces. To compare with word-level gold
alignments (alignment error rate, as in the AER experiment of Luong et al. 2015, §5.4) we

1. merge pieces into words: **sum** over a word's source columns (attention mass on the word) and **mean**
   over its hypothesis rows (one distribution per target word),
2. link each target word to its argmax source word (``method="argmax_target"``, Luong et al. 2015),
3. write the links in Pharaoh format ``i-j`` (source word, target word, 0-based), the format of fast_align
   and eflomal.

Special tokens (``</s>``, ``<s>``, ``<pad>``) belong to no word: their rows and columns are dropped.

Two extensions for the alignment experiments:

* ``shift=1`` reads hypothesis piece ``t`` from attention row ``t + 1``, for a decoder that attends to a word one
  step late, while it emits the *next* word (Luong et al. 2015 extract from step t; shifting is a common fix for
  attention-based alignment). The first row is dropped; the ``</s>`` row exists, so the last real piece still
  has a row. Row t is the attention computed for emitting piece t (from h_t in Luong's decoder, from s_{t-1} in
  Bahdanau's), and on a task with a known alignment that row is piece t's for every decoder style, with and without
  input feeding (docs/alignment.md, "Which step belongs to target word t"): ``shift=0`` is the default for all.
* :func:`symmetrize` combines the links of two models trained in opposite directions: ``intersection``,
  ``union``, ``grow-diag``, ``grow-diag-final`` and ``grow-diag-final-and`` (Koehn, Axelrod, Birch Mayne,
  Callison-Burch, Osborne and Talbot 2005, "Edinburgh System Description for the 2005 IWSLT Speech Translation
  Evaluation"; the pseudo-code of Koehn 2010, *Statistical Machine Translation*, §4.5, as in Moses).
* :func:`combine_directions` symmetrizes *before* extraction: the two directions' word-level soft alignments
  are combined cell by cell (geometric mean ``product`` or arithmetic ``mean``), then one hard-alignment method
  is applied (the product rewards links both models agree on, in the spirit of alignment by agreement,
  Liang, Taskar and Klein 2006; Cheng et al. 2016).
"""

from __future__ import annotations

import re

import numpy as np

WORD_START = "\u2581"  # "▁", sentencepiece's word-boundary marker


SPECIAL_TOKENS = frozenset({"</s>", "<s>", "<pad>"})


METHODS = ("argmax_target", "argmax_source", "threshold", "mutual_argmax")


_BYTE_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def _whitespace_bytes(pieces: list[str]) -> set[int]:
    """Positions of byte-fallback pieces that encode a whitespace character (``<0x0A>``, ``<0x09>``, the three
    bytes of U+2028, ...) or the word-boundary mark "▁" itself (``<0xE2><0x96><0x81>``, which a vocabulary without
    the bare "▁" piece uses for a word boundary): :meth:`nmt.data.tokenizer.Tokenizer.decode` turns them into a
    space between words. Each run of byte pieces is read as UTF-8 one character at a time; a byte that starts no
    valid character is skipped (it decodes to U+FFFD, a letter for word counting)."""
    out: set[int] = set()
    run: list[tuple[int, int]] = []
    for pos, piece in enumerate([*pieces, ""]):
        byte = _BYTE_PIECE.match(piece)
        if byte:
            run.append((pos, int(byte.group(1), 16)))
            continue
        i = 0
        while i < len(run):
            lead = run[i][1]
            size = 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4 if lead >> 3 == 0b11110 else 1
            try:
                char = bytes(b for _, b in run[i : i + size]).decode("utf-8")
            except UnicodeDecodeError:
                char, size = "", 1
            if char.isspace() or char == WORD_START:
                out.update(p for p, _ in run[i : i + size])
            i += size
        run = []
    return out


def words_from_pieces(pieces: list[str]) -> list[int]:
    """Word index of each sentencepiece piece; ``-1`` for special tokens.

    A piece starting with "▁" starts a new word; the first (non-special) piece always starts word 0; every
    other piece (including byte-fallback pieces such as ``"<0xC3>"``) continues the current word. Two kinds of
    pieces are only spaces: a bare "▁" that nothing continues (the next non-special piece starts with "▁" or is a
    space too, or there is none), and byte pieces whose run decodes to whitespace or "▁" (a generated ``<0x0A>``). They
    start no word and join the word before them (word 0 at the start), and the piece after them starts a new
    word, so the words counted here are the whitespace-separated words of the decoded text
    (:meth:`nmt.data.tokenizer.Tokenizer.decode` collapses such spaces). ``</s>``, ``<s>`` and ``<pad>`` get ``-1``
    (excluded from words).

    Args:
        pieces: ``[num_pieces]`` sentencepiece pieces, e.g. ``["▁Ein", "▁Mann", "s", "</s>"]``.
    Returns:
        ``[num_pieces]`` word indices, e.g. ``[0, 1, 1, -1]``; ``["▁Ein", "▁", "▁Mann"]`` gives ``[0, 0, 1]``;
        ``["▁Ein", "<0x0A>", "an"]`` gives ``[0, 0, 1]``; ``["▁", "</s>"]`` (no word) gives ``[-1, -1]``.
    """
    spaces = _whitespace_bytes(pieces)
    real = [pos for pos, piece in enumerate(pieces) if piece not in SPECIAL_TOKENS]
    word, k, after_space, out = -1, 0, False, []
    for pos, piece in enumerate(pieces):
        if piece in SPECIAL_TOKENS:
            out.append(-1)
            continue
        k += 1
        following = real[k] if k < len(real) else None
        space_only = pos in spaces or (piece == WORD_START and (
            following is None or following in spaces or pieces[following].startswith(WORD_START)))
        if not space_only and (word < 0 or after_space or piece.startswith(WORD_START)):
            word += 1
        after_space = space_only
        out.append(max(word, 0))
    return out if word >= 0 else [-1] * len(pieces)  # only spaces: no word at all, as decode gives ""


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
    matrix: np.ndarray, src_pieces: list[str], hyp_pieces: list[str], shift: int = 0
) -> tuple[np.ndarray, list[str], list[str]]:
    """Merge a subword soft alignment into a word-level one (docs/attention.md, "Alignments as an output").

    ``word_matrix[i, j]`` = mean over the hypothesis pieces of target word ``i`` of the sum over the source
    pieces of source word ``j`` of ``matrix`` (after the row shift below). Rows/columns of special tokens
    (``</s>``, ...) are dropped.

    With ``shift=k`` hypothesis piece ``t`` takes row ``t + k`` (the first ``k`` rows are dropped): the
    decoder may attend to a word one step late. A piece without a row (only possible for the last ``k``
    pieces, normally ``</s>``) is left out of its word's mean; a word with no row left gets a zero row.

    Args:
        matrix: ``[hyp_len, src_len]`` soft alignment in pieces (``hyp_len == len(hyp_pieces)``,
            ``src_len == len(src_pieces)``); ``[0, 0]`` for an empty sentence.
        src_pieces: ``[src_len]`` source pieces.
        hyp_pieces: ``[hyp_len]`` hypothesis pieces.
        shift: rows to read ahead (0: row t for piece t, the default; 1: row t + 1).
    Returns:
        ``(word_matrix [hyp_words, src_words] float32, src_words, hyp_words)`` with the words' surface forms.
    Raises:
        ValueError: if the matrix shape does not match the token counts, or ``shift`` is negative.
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
    if shift < 0:
        raise ValueError(f"shift must be >= 0 (rows read ahead), got {shift}")
    rows_left = matrix[shift:]  # [hyp_len - shift, src_len]: piece t -> row t + shift
    src_members, src_words = _group(src_pieces)
    hyp_members, hyp_words = _group(hyp_pieces)
    out = np.zeros((len(hyp_members), len(src_members)), dtype=np.float32)
    for j, cols in enumerate(src_members):
        summed = rows_left[:, cols].sum(axis=1)  # [hyp_len - shift]
        for i, rows in enumerate(hyp_members):
            rows = [r for r in rows if r < len(summed)]
            if rows:
                out[i, j] = summed[rows].mean()
    return out, src_words, hyp_words


def hard_alignment(
    word_matrix: np.ndarray, method: str = "argmax_target", threshold: float = 0.3
) -> list[tuple[int, int]]:
    """Hard links ``(source_word, target_word)``, 0-based, from a word-level soft alignment.

    Methods:
        ``"argmax_target"``: each target word -> its argmax source word (Luong et al. 2015, §5.4 AER
            experiment; docs/attention.md). Target words whose row is all zero get no link.
        ``"argmax_source"``: each source word -> its argmax target word (columns all zero get no link).
        ``"threshold"``: every cell ``>= threshold``.
        ``"mutual_argmax"``: the links that ``argmax_target`` and ``argmax_source`` both give: target word t and
            source word s link when s is t's argmax in its row and t is s's argmax in its column (the "ArgMax"
            extraction of Jalili Sabet, Dufter, Yvon and Schütze 2020, "SimAlign", §2.2). At most one link per
            word on either side: high precision, for a matrix that combines both directions
            (:func:`combine_directions`) or for one direction's attention.

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
    elif method == "mutual_argmax":
        best_source, best_target = a.argmax(axis=1), a.argmax(axis=0)  # [hyp_words], [src_words]
        links = [(int(s), t) for t, s in enumerate(best_source) if a[t].any() and best_target[s] == t]
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
    shift: int = 0,
) -> str:
    """One Pharaoh line from a subword soft alignment ``[hyp_len, src_len]``: merge, link, format.

    Convenience for writing ``eval/{split}.align`` (docs/design.md §2): :func:`merge_to_words` (with
    ``shift``), then :func:`hard_alignment`, then :func:`to_pharaoh`. An empty sentence gives ``""``.
    """
    word_matrix, _, _ = merge_to_words(matrix, src_pieces, hyp_pieces, shift=shift)
    return to_pharaoh(hard_alignment(word_matrix, method=method, threshold=threshold))
