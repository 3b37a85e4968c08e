"""The evaluation artifacts for a prefix ``P`` (for example ``eval/test``), as in design.md §2.

``P.hyp`` (one detokenized hypothesis per input line), ``P.scores.json`` (BLEU and chrF with their sacreBLEU
signatures), ``P.alignments.npz`` (one float32 ``[len(hypothesis_tokens), len(source_tokens)]`` array per line,
key = 0-based line index), ``P.alignments.jsonl`` (the tokens of each matrix) and ``P.align`` (word-level
hard alignments, Pharaoh ``i-j``); n-best lists. An empty input line gives an empty hypothesis, a ``[0, 0]``
matrix and an empty alignment line.

A multi-head attention model (:mod:`nmt.models.multihead`) also gets ``P.alignments.heads.npz`` (for any
alignments file ``F.npz``: ``F.heads.npz``, :func:`heads_path`): one float32 ``[heads, len(hypothesis_tokens),
len(source_tokens)]`` array per line, the same keys as ``P.alignments.npz`` (an empty line: ``[heads, 0, 0]``);
the mean over its first axis is the line's matrix in ``P.alignments.npz``, which keeps its format, so every reader
of the combined matrices works unchanged. Other models write no heads file.
"""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import numpy as np

from nmt.data.textio import write_together
from nmt.decoding.translation import Translation
from nmt.decoding.word_alignment import pharaoh_line

log = logging.getLogger(__name__)


def nbest_lines(nbest: list[list[Translation]]) -> str:
    """An n-best list in the Moses format, one block of lines per input line (0-based index ``i``, best first):
    ``i ||| hypothesis ||| log_prob= L length= N ||| score``, with L the log-probability in nats, N the
    hypothesis length in target subwords (``</s>`` included) and score = L / length penalty + coverage penalty
    (what the beam ranks by). With MBR decoding a feature ``mbr= U`` (the expected utility that ranked the block)
    follows the length. An empty input line has one line with an empty hypothesis. In the hypothesis ``&`` and
    ``|`` are written ``&amp;`` and ``&#124;`` (Moses' escapes), so a translation holding ``|||`` cannot add a
    field; :func:`unescape_nbest` reads them back."""
    return "".join(f"{i} ||| {escape_nbest(t.text)} ||| log_prob= {t.log_prob:.4f} length= {len(t.hyp_pieces)}"
                   + ("" if t.expected_utility is None else f" mbr= {t.expected_utility:.4f}")
                   + f" ||| {t.score:.4f}\n" for i, block in enumerate(nbest) for t in block)


def escape_nbest(text: str) -> str:
    """``text`` with ``&`` -> ``&amp;`` and ``|`` -> ``&#124;`` (the n-best field separator is ``|||``)."""
    return text.replace("&", "&amp;").replace("|", "&#124;")


def unescape_nbest(text: str) -> str:
    """The inverse of :func:`escape_nbest`: a hypothesis field of an n-best line as the translation's text."""
    return text.replace("&#124;", "|").replace("&amp;", "&")


def save_results(prefix: str | Path, translations: list[Translation], scores: dict | None = None) -> None:
    """Write ``prefix.hyp``, ``.alignments.npz``, ``.alignments.jsonl``, ``.align``, (with scores)
    ``.scores.json`` and (multi-head models) ``.alignments.heads.npz``, together: each to a temporary file first,
    then all renamed into place, so an error or a signal leaves the files of an earlier evaluation as they were,
    never a mix.

    Raises:
        nmt.data.textio.WriteError: naming the file that could not be written (no file was replaced).
    """
    prefix = str(prefix)
    files = {prefix + ".hyp": "".join(t.text + "\n" for t in translations),
             **alignment_files(prefix + ".alignments.npz", translations),
             prefix + ".align": "".join((pharaoh_line(t.alignment, t.src_pieces, t.hyp_pieces) if t.hyp_pieces
                                         else "") + "\n" for t in translations)}
    if scores is not None:
        files[prefix + ".scores.json"] = json.dumps(scores, indent=2, ensure_ascii=False) + "\n"
    write_together(files)


def check_npz_path(path: str | Path, key: str = "alignments") -> None:
    """Check that the alignments file ``path`` (the setting ``key``) ends in ``.npz``: the tokens of the matrices
    go to the ``.jsonl`` beside it, where :func:`nmt.plot.plot_npz` looks for them.

    Raises:
        ValueError: naming the setting, for another suffix.
    """
    if not str(path).endswith(".npz"):
        raise ValueError(f"{key}={path} must end in .npz (its tokens go to the .jsonl beside it)")


def heads_path(npz_path: str | Path) -> Path:
    """The per-head matrices beside an alignments file: ``P.alignments.npz`` -> ``P.alignments.heads.npz``."""
    return Path(str(npz_path).removesuffix(".npz") + ".heads.npz")


def heads_file(translations: list[Translation]) -> bytes | None:
    """The contents of a heads file (see the module docstring) for ``translations``, or None when none of them
    carries per-head matrices (a single-head model)."""
    count = next((t.heads.shape[0] for t in translations if t.heads is not None), None)
    if count is None:
        return None
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **{str(i): (np.zeros((count, *t.alignment.shape), np.float32) if t.heads is None
                                            else t.heads.astype(np.float32)) for i, t in enumerate(translations)})
    return buffer.getvalue()


def alignment_files(npz_path: str | Path, translations: list[Translation]) -> dict[str, bytes | str]:
    """The contents of the alignment matrices file ``npz_path``, of its tokens file (same path with ``.jsonl``)
    and, for a multi-head model, of its heads file (:func:`heads_path`), by path, to write
    (:func:`nmt.data.textio.write_together`).

    Raises:
        ValueError: when ``npz_path`` does not end in ``.npz`` (the tokens file is named after it, and
            :func:`nmt.plot.plot_npz` looks for it there).
    """
    check_npz_path(npz_path)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **{str(i): t.alignment for i, t in enumerate(translations)})
    jsonl = "".join(json.dumps({"index": i, "source_tokens": t.src_pieces, "hypothesis_tokens": t.hyp_pieces},
                               ensure_ascii=False) + "\n" for i, t in enumerate(translations))
    files = {str(npz_path): buffer.getvalue(), str(Path(npz_path).with_suffix(".jsonl")): jsonl}
    heads = heads_file(translations)
    if heads is not None:
        files[str(heads_path(npz_path))] = heads
    return files


def save_alignments(npz_path: str | Path, translations: list[Translation]) -> None:
    """The alignment matrices (``npz_path``), their tokens (same path with ``.jsonl``) and a multi-head model's
    per-head matrices (:func:`heads_path`), together (:func:`alignment_files`).

    Raises:
        ValueError: when ``npz_path`` does not end in ``.npz``.
        nmt.data.textio.WriteError: naming the file that could not be written (neither was replaced).
    """
    write_together(alignment_files(npz_path, translations))
