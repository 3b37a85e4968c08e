"""Gold and hypothesis word alignments: the readers of the Pharaoh and NAACL formats (stdlib, nmt.data.textio
and the NAACL line parser :mod:`nmt.analysis.naacl` only); AER itself is :mod:`nmt.analysis.aer`.

A link is ``(source_index, target_index)``, 0-based, source first. The readers convert the gold formats of
``../shared/corpora/align_*`` (see each set's SOURCE.md) to that convention:

* **Pharaoh** (fast_align, eflomal, awesome-align): one line per sentence pair, links separated by whitespace,
  ``i-j`` a sure link, ``i?j`` or ``ipj`` a possible link; an empty line is a sentence without links. Model
  hypotheses (``nmt.align``, ``docs/attention.md`` "Alignments as an output") are 0-based source-first Pharaoh
  and are read by the same code.
* **NAACL** (Mihalcea and Pedersen 2003, HLT-NAACL workshop "Building and Using Parallel Texts", W03-0301):
  one link per line, ``sentence_no position_L1 position_L2 [S|P] [confidence]``. A missing label means S (the
  WPT 2003 guidelines); the confidence is ignored. **Sentence ids** are integers (zero padding such as
  ``0001`` is allowed): the link with id ``k`` belongs to the sentence at position ``k - first_sentence_id``
  (default ``first_sentence_id=1``, the WPT 2003 convention, so id 1 is the first line of the sentence files).
  Lines may come in any order; sentences without links are empty. The number of sentences is ``len(lengths)``
  when the sentence lengths are given, else ``num_sentences`` when given, else the largest id (trailing
  sentences without any link then need ``lengths`` or ``num_sentences``).

Options of both readers: ``one_based`` (positions count from 1; a position 0 is then a NULL link, which is
skipped and counted in :attr:`Alignments.null_links`) and ``target_first`` (the first position is the target
word's). A UTF-8 byte-order mark is dropped, ``\\r\\n`` counts as ``\\n``, files ending in ``.gz``
are decompressed. Malformed lines raise :class:`AlignmentFormatError` naming the file and line. When the
sentence lengths are given (:func:`read_lengths`), a link outside them is dropped with an
:class:`AlignmentWarning` naming the file and line (the German-English gold set has one: sentence 63,
``12-16``, English length 13).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nmt.analysis.naacl import NaaclFormatError, parse_naacl, sentence_count
from nmt.data.textio import TextFileError, read_lines

Link = tuple[int, int]


FORMATS = ("pharaoh", "naacl")


_PHARAOH_LINK = re.compile(r"^([0-9]+)([-?p])([0-9]+)$")


class AlignmentFormatError(ValueError):
    """A malformed alignment or sentence file; the message names the file and the 1-based line."""


class AlignmentWarning(UserWarning):
    """A gold or hypothesis link that was dropped (out of range of the sentence lengths)."""


@dataclass
class Alignments:
    """Per-sentence link sets of one alignment file, 0-based ``(source, target)``.

    Attributes:
        sure: ``[num_sentences]`` sets of sure links S.
        possible: ``[num_sentences]`` sets of possible links P, **including** the sure ones (S ⊆ P).
        path: the file read.
        dropped: one message (file, line, link, lengths) per link dropped as out of range.
        null_links: links to position 0 skipped in a 1-based file (NULL links).
    """

    sure: list[set[Link]]
    possible: list[set[Link]]
    path: str = ""
    dropped: list[str] = field(default_factory=list)
    null_links: int = 0

    def __len__(self) -> int:
        return len(self.sure)

    @property
    def links(self) -> list[set[Link]]:
        """All links per sentence (P ∪ S): what a hypothesis file means by its links."""
        return self.possible


def _read_lines(path: str | Path) -> list[str]:
    """Lines of a UTF-8 text file (plain or ``.gz``; BOM dropped, ``\\n`` only): :func:`nmt.data.textio.read_lines`,
    with undecodable bytes reported as an :class:`AlignmentFormatError`."""
    try:
        return read_lines(path)
    except TextFileError as err:
        raise AlignmentFormatError(str(err)) from None


def read_lengths(src: str | Path, tgt: str | Path | None = None) -> list[tuple[int, int]]:
    """Sentence lengths in whitespace tokens, ``[(source_len, target_len)]`` per sentence pair.

    Args:
        src: the source-side sentences (one per line, pre-tokenized; plain or gzip; a BOM is dropped), or,
            when ``tgt`` is None, a bitext with ``source ||| target`` lines (awesome-align's ``*.src-tgt``).
        tgt: the target-side sentences, line by line parallel to ``src``.
    Raises:
        AlignmentFormatError: a bitext line without ``|||``, naming file and line.
        ValueError: different line counts, with both counts.
    """
    if tgt is None:
        lengths = []
        for number, line in enumerate(_read_lines(src), start=1):
            if "|||" not in line:
                raise AlignmentFormatError(f"{src}: line {number}: expected 'source ||| target'")
            left, right = line.split("|||", 1)
            lengths.append((len(left.split()), len(right.split())))
        return lengths
    src_lines, tgt_lines = _read_lines(src), _read_lines(tgt)
    if len(src_lines) != len(tgt_lines):
        raise ValueError(f"{src} has {len(src_lines)} lines but {tgt} has {len(tgt_lines)}")
    return [(len(s.split()), len(t.split())) for s, t in zip(src_lines, tgt_lines)]


class _Builder:
    """Collects links into per-sentence sets with index conversion, NULL skipping and range checks."""

    def __init__(self, path, num_sentences, one_based, target_first, lengths):
        self.out = Alignments(
            [set() for _ in range(num_sentences)], [set() for _ in range(num_sentences)], path=str(path)
        )
        self.path, self.one_based, self.target_first, self.lengths = path, one_based, target_first, lengths

    def add(self, sentence: int, first: int, second: int, sure: bool, line: int, text: str) -> None:
        source, target = (second, first) if self.target_first else (first, second)
        if self.one_based:
            if source == 0 or target == 0:
                self.out.null_links += 1
                return
            source, target = source - 1, target - 1
        if self.lengths is not None:
            src_len, tgt_len = self.lengths[sentence]
            if source >= src_len or target >= tgt_len:
                message = (
                    f"{self.path}: line {line}: link {text!r} of sentence {sentence + 1} is out of range "
                    f"(0-based source {source}, target {target}; sentence lengths {src_len} and {tgt_len}); "
                    "dropped"
                )
                self.out.dropped.append(message)
                warnings.warn(message, AlignmentWarning, stacklevel=3)
                return
        self.out.possible[sentence].add((source, target))
        if sure:
            self.out.sure[sentence].add((source, target))


def read_pharaoh(
    path: str | Path,
    *,
    one_based: bool = False,
    target_first: bool = False,
    lengths: Sequence[tuple[int, int]] | None = None,
) -> Alignments:
    """Read a Pharaoh alignment file: line k = sentence k, ``i-j`` sure, ``i?j``/``ipj`` possible.

    Args:
        path: the file (plain or gzip).
        one_based: positions count from 1 (0 is a NULL link, skipped).
        target_first: ``i`` is the target position and ``j`` the source position.
        lengths: ``[(source_len, target_len)]`` per sentence; then the file must have as many lines, and links
            outside them are dropped with an :class:`AlignmentWarning` naming file and line.
    Raises:
        AlignmentFormatError: a token that is not a link, naming file, line and token.
        ValueError: the number of lines differs from ``len(lengths)``.
    """
    lines = _read_lines(path)
    if lengths is not None and len(lines) != len(lengths):
        raise ValueError(
            f"{path} has {len(lines)} sentences (lines) but the sentence files have {len(lengths)}"
        )
    build = _Builder(path, len(lines), one_based, target_first, lengths)
    for sentence, line in enumerate(lines):
        for token in line.split():
            match = _PHARAOH_LINK.match(token)
            if not match:
                raise AlignmentFormatError(
                    f"{path}: line {sentence + 1}: {token!r} is not a Pharaoh link "
                    "('i-j' sure, 'i?j' or 'ipj' possible)"
                )
            first, kind, second = match.groups()
            build.add(sentence, int(first), int(second), kind == "-", sentence + 1, token)
    return build.out


def read_naacl(
    path: str | Path,
    *,
    one_based: bool = False,
    target_first: bool = False,
    lengths: Sequence[tuple[int, int]] | None = None,
    num_sentences: int | None = None,
    first_sentence_id: int = 1,
) -> Alignments:
    """Read a NAACL (HLT-NAACL 2003 WPT) alignment file, one ``sentence_no pos1 pos2 [S|P] [confidence]``
    per line.

    Sentence id ``k`` is the sentence at position ``k - first_sentence_id``; the number of sentences is
    ``len(lengths)``, else ``num_sentences``, else the largest id (see the module docstring). Blank lines are
    skipped; the label is case-insensitive and defaults to S; a confidence is ignored.

    Args:
        path: the file (plain or gzip).
        one_based: positions count from 1 (standard NAACL; 0 is a NULL link, skipped). Note that the
            German-English ``de-en.ref.wa`` counts positions from 0 (its sentence ids still start at 1).
        target_first: ``pos1`` is the target position and ``pos2`` the source position.
        lengths: ``[(source_len, target_len)]`` per sentence; links outside them are dropped with a warning.
        num_sentences: the number of sentences when ``lengths`` is not given.
        first_sentence_id: the id of the first sentence.
    Raises:
        AlignmentFormatError: a malformed line or a sentence id out of range, naming file and line.
    """
    lines = _read_lines(path)
    try:
        rows = parse_naacl(lines, path, first_sentence_id)
    except NaaclFormatError as err:
        raise AlignmentFormatError(str(err)) from None
    count = sentence_count(rows, lengths, num_sentences)
    build = _Builder(path, count, one_based, target_first, lengths)
    for number, sentence, first, second, sure, text in rows:
        if sentence >= count:
            raise AlignmentFormatError(
                f"{path}: line {number}: sentence id {sentence + first_sentence_id} "
                f"is beyond the {count} sentences"
            )
        build.add(sentence, first, second, sure, number, text)
    return build.out


def read_alignments(path: str | Path, fmt: str = "pharaoh", **options) -> Alignments:
    """Read gold (or hypothesis) alignments; ``fmt`` is ``"pharaoh"`` or ``"naacl"``, ``options`` those of
    :func:`read_pharaoh` / :func:`read_naacl` (``one_based``, ``target_first``, ``lengths``, ...).

    Raises:
        ValueError: an unknown ``fmt``; AlignmentFormatError (and the file errors) as the reader it calls.
    """
    if fmt == "pharaoh":
        return read_pharaoh(path, **options)
    if fmt == "naacl":
        return read_naacl(path, **options)
    raise ValueError(f"unknown alignment format {fmt!r}; expected one of {FORMATS}")


def read_hypothesis(
    path: str | Path,
    *,
    one_based: bool = False,
    target_first: bool = False,
    lengths: Sequence[tuple[int, int]] | None = None,
) -> list[set[Link]]:
    """Hypothesis links per sentence from a Pharaoh file (default: 0-based, source first, as ``nmt.align``,
    fast_align and eflomal write them); ``p``/``?`` links count as links too.

    Raises:
        AlignmentFormatError: as :func:`read_pharaoh`, naming file, line and token.
    """
    return read_pharaoh(path, one_based=one_based, target_first=target_first, lengths=lengths).links


def format_pharaoh(sure: Iterable[Link], possible: Iterable[Link] = (), *, one_based: bool = False) -> str:
    """One Pharaoh line: sorted sure links as ``i-j``, then the possible-only links (``possible - sure``) as
    ``ipj``; source first; 0-based unless ``one_based``."""
    sure = set(sure)
    shift = 1 if one_based else 0
    parts = [f"{s + shift}-{t + shift}" for s, t in sorted(sure)]
    parts += [f"{s + shift}p{t + shift}" for s, t in sorted(set(possible) - sure)]
    return " ".join(parts)
