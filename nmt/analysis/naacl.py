"""The NAACL word-alignment format, line by line (stdlib only): Mihalcea and Pedersen 2003, HLT-NAACL
workshop "Building and Using Parallel Texts" (W03-0301), one link per line,
``sentence_no position_L1 position_L2 [S|P] [confidence]``.

:func:`parse_naacl` checks the syntax and turns sentence ids into 0-based positions, :func:`sentence_count`
says how many sentences a file has; :func:`nmt.analysis.gold.read_naacl` reads a file with them into
:class:`nmt.analysis.gold.Alignments` (index conversion, NULL links, range checks). The conventions (labels,
sentence ids, the number of sentences) are those of the :mod:`nmt.analysis.gold` docstring.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

NaaclLink = tuple[int, int, int, int, bool, str]
"""One link of a NAACL file: ``(line, sentence, first, second, sure, text)``, 1-based line, 0-based sentence,
the two positions as written and ``text`` = ``"first second"``."""


_INTEGER = re.compile(r"^[0-9]+$")


_FLOAT = re.compile(r"^[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?$")


class NaaclFormatError(ValueError):
    """A malformed NAACL line or a sentence id below the first; the message names the file and line."""


def parse_naacl(lines: Sequence[str], path: str | Path, first_sentence_id: int) -> list[NaaclLink]:
    """The links of NAACL ``lines`` of ``path`` in file order (blank lines skipped, label S by default)."""
    rows = []
    for number, line in enumerate(lines, start=1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) > 5 or len(fields) < 3 or not all(_INTEGER.match(f) for f in fields[:3]):
            raise NaaclFormatError(
                f"{path}: line {number}: expected 'sentence_no position position [S|P] [confidence]', "
                f"got {line!r}"
            )
        label = "S"
        extra = fields[3:]
        if extra and extra[0].upper() in ("S", "P"):
            label = extra.pop(0).upper()
        if len(extra) > 1 or (extra and not _FLOAT.match(extra[0])):
            raise NaaclFormatError(
                f"{path}: line {number}: expected the label S or P and an optional numeric confidence, "
                f"got {line!r}"
            )
        sentence = int(fields[0]) - first_sentence_id
        if sentence < 0:
            raise NaaclFormatError(
                f"{path}: line {number}: sentence id {fields[0]} is below the first id {first_sentence_id}"
            )
        rows.append(
            (number, sentence, int(fields[1]), int(fields[2]), label == "S", f"{fields[1]} {fields[2]}")
        )
    return rows


def sentence_count(
    rows: Sequence[NaaclLink], lengths: Sequence[tuple[int, int]] | None, num_sentences: int | None
) -> int:
    """The number of sentences: ``len(lengths)``, else ``num_sentences``, else the largest sentence + 1."""
    if lengths is not None:
        return len(lengths)
    if num_sentences is not None:
        return num_sentences
    return max((row[1] for row in rows), default=-1) + 1
