"""Combining the word alignments of two models trained in opposite directions (numpy + stdlib only).

* :func:`symmetrize` combines the links: ``intersection``, ``union``, ``grow-diag``, ``grow-diag-final`` and
  ``grow-diag-final-and`` (Koehn, Axelrod, Birch Mayne, Callison-Burch, Osborne and Talbot 2005, "Edinburgh
  System Description for the 2005 IWSLT Speech Translation Evaluation"; the pseudo-code of Koehn 2010,
  *Statistical Machine Translation*, §4.5, as in Moses).
* :func:`combine_directions` symmetrizes *before* extraction: the two directions' word-level soft alignments
  are combined cell by cell (geometric mean ``product`` or arithmetic ``mean``), then one hard-alignment method
  is applied (the product rewards links both models agree on, in the spirit of alignment by agreement,
  Liang, Taskar and Klein 2006; Cheng et al. 2016).
"""

from __future__ import annotations

import numpy as np

SYMMETRIZATIONS = ("intersection", "union", "grow-diag", "grow-diag-final", "grow-diag-final-and")


COMBINATIONS = ("product", "mean")


_NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))  # Koehn's order


_Link = tuple[int, int]


def _add(link: _Link, alignment: set[_Link], src_aligned: set[int], tgt_aligned: set[int]) -> None:
    """Add ``link`` to ``alignment`` and mark its source and target word as aligned."""
    alignment.add(link)
    src_aligned.add(link[0])
    tgt_aligned.add(link[1])


def _grow_diag(
    alignment: set[_Link], union: set[_Link], src_aligned: set[int], tgt_aligned: set[int]
) -> None:
    """Grow-diag in place: add neighbours from ``union`` (as :func:`symmetrize` says) until none is added."""
    n_src = max(s for s, _ in union) + 1
    n_tgt = max(t for _, t in union) + 1
    changed = True
    while changed:  # grow-diag
        changed = False
        for s in range(n_src):
            for t in range(n_tgt):
                if (s, t) not in alignment:
                    continue
                for ds, dt in _NEIGHBOURS:
                    link = (s + ds, t + dt)
                    if link in union and link not in alignment and (
                        link[0] not in src_aligned or link[1] not in tgt_aligned
                    ):
                        _add(link, alignment, src_aligned, tgt_aligned)
                        changed = True


def _final(
    alignment: set[_Link],
    directions: tuple[set[_Link], set[_Link]],
    both: bool,
    src_aligned: set[int],
    tgt_aligned: set[int],
) -> None:
    """Final step in place: add direction links whose source or (``both``: and) target word is unaligned."""
    for direction in directions:
        for link in sorted(direction):
            s_free, t_free = link[0] not in src_aligned, link[1] not in tgt_aligned
            if link not in alignment and ((s_free and t_free) if both else (s_free or t_free)):
                _add(link, alignment, src_aligned, tgt_aligned)


def symmetrize(
    forward_links: set[tuple[int, int]] | list[tuple[int, int]],
    backward_links: set[tuple[int, int]] | list[tuple[int, int]],
    method: str = "grow-diag-final-and",
) -> list[tuple[int, int]]:
    """Combine the links of two alignment directions into one set (Koehn et al. 2005; Koehn 2010, §4.5).

    Both inputs are ``(source_word, target_word)`` pairs, 0-based: the backward direction (a model trained
    target -> source) must already be transposed into this order.

    Methods:
        ``"intersection"``: links in both directions (high precision).
        ``"union"``: links in either direction (high recall).
        ``"grow-diag"``: start from the intersection; repeatedly, for every current link ``(s, t)`` (visited
            in order of ``s``, then ``t``) and each of its 8 neighbours (horizontal, vertical, diagonal), add
            the neighbour if it is in the union and its source word **or** its target word is still
            unaligned; until a pass adds nothing.
        ``"grow-diag-final"``: grow-diag, then for the forward and then the backward links (in order), add
            a link whose source **or** target word is still unaligned.
        ``"grow-diag-final-and"``: grow-diag, then the same with source **and** target word both unaligned
            (the default of Moses and eflomal's ``atools``).
    Links added during a pass count as aligned (and are grown from) at once, as in the pseudo-code.

    Returns:
        sorted list of ``(source_word, target_word)`` links.
    Raises:
        ValueError: on an unknown method, naming the valid ones.
    """
    if method not in SYMMETRIZATIONS:
        raise ValueError(
            f"unknown symmetrization method {method!r}; valid methods: {', '.join(SYMMETRIZATIONS)}"
        )
    forward = {(int(s), int(t)) for s, t in forward_links}
    backward = {(int(s), int(t)) for s, t in backward_links}
    union = forward | backward
    if method == "union":
        return sorted(union)
    alignment = forward & backward
    if method == "intersection" or not union:
        return sorted(alignment)
    src_aligned = {s for s, _ in alignment}
    tgt_aligned = {t for _, t in alignment}
    _grow_diag(alignment, union, src_aligned, tgt_aligned)
    if method in ("grow-diag-final", "grow-diag-final-and"):
        _final(alignment, (forward, backward), method == "grow-diag-final-and", src_aligned, tgt_aligned)
    return sorted(alignment)


def combine_directions(forward: np.ndarray, backward: np.ndarray, how: str = "product") -> np.ndarray:
    """Cell-by-cell combination of two directions' word-level soft alignments of one sentence pair.

    Args:
        forward: ``[tgt_words, src_words]`` from the source -> target model (rows sum to about 1).
        backward: ``[src_words, tgt_words]`` from the target -> source model, in that model's own orientation
            (it is transposed here).
        how: ``"product"``: ``sqrt(forward * backward.T)`` (geometric mean: high only where both agree);
            ``"mean"``: ``(forward + backward.T) / 2``.
    Returns:
        ``[tgt_words, src_words]`` float32, ready for :func:`hard_alignment`.
    Raises:
        ValueError: on an unknown ``how`` (naming the valid ones) or shapes that do not transpose onto each
            other (both shapes in the message).
    """
    if how not in COMBINATIONS:
        raise ValueError(f"unknown combination {how!r}; valid: {', '.join(COMBINATIONS)}")
    f = np.asarray(forward, dtype=np.float32)
    b = np.asarray(backward, dtype=np.float32).T
    if f.shape != b.shape:
        raise ValueError(f"forward alignment {f.shape} [tgt_words, src_words] and backward alignment "
                         f"{b.T.shape} [src_words, tgt_words] do not describe the same sentence pair")
    return np.sqrt(f * b) if how == "product" else (f + b) / 2
