"""Alignment error rate (AER), precision and recall of word alignments against gold alignments, and its command.

AER follows Och and Ney (2003), "A Systematic Comparison of Various Statistical Alignment Models",
Computational Linguistics 29(1), §5. A gold alignment has *sure* links S and *possible* links P with S ⊆ P;
for a hypothesis alignment A, summed over the corpus::

    precision = |A ∩ P| / |A|        recall = |A ∩ S| / |S|
    AER       = 1 - (|A ∩ S| + |A ∩ P|) / (|A| + |S|)

Every A with S ⊆ A ⊆ P scores AER 0; with only sure links P = S and AER is 1 - F1. The gold formats are read by
:mod:`nmt.analysis.gold`.

Command line::

    python -m nmt.aer gold=FILE hyp=FILE [gold_format=naacl|pharaoh] [one_based=true] [target_first=true]
                      [hyp_one_based=true] [hyp_target_first=true] [src=FILE tgt=FILE | bitext=FILE]

prints ``AER 0.1234  precision 0.9000  recall 0.8000  (sure N, possible M, hypothesis K links, S sentences)``,
where ``possible`` counts P including S.
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from nmt.analysis.gold import (
    FORMATS,
    Alignments,
    AlignmentWarning,
    Link,
    read_alignments,
    read_lengths,
    read_pharaoh,
)
from nmt.commandline import SettingsParser


@dataclass(frozen=True)
class AERResult:
    """Corpus-level scores and counts of :func:`aer` (Och and Ney 2003).

    ``precision`` is NaN when the hypothesis has no links, ``recall`` when the gold has no sure links, and
    ``aer`` when both are empty. ``possible`` counts P including S.
    """

    aer: float
    precision: float
    recall: float
    sentences: int
    sure: int
    possible: int
    hypothesis: int
    hyp_and_sure: int
    hyp_and_possible: int

    def __str__(self) -> str:
        return (
            f"AER {self.aer:.4f}  precision {self.precision:.4f}  recall {self.recall:.4f}  "
            f"(sure {self.sure}, possible {self.possible}, hypothesis {self.hypothesis} links, "
            f"{self.sentences} sentences)"
        )


def aer(
    sure: Sequence[Iterable[Link]],
    possible: Sequence[Iterable[Link]] | None,
    hyp: Sequence[Iterable[Link]],
) -> AERResult:
    """Corpus AER, precision and recall of hypothesis links against gold sure/possible links
    (Och and Ney 2003).

    Counts are summed over sentences before dividing (corpus level, as in the WPT 2003 evaluation). Each
    sentence's P is taken as ``possible ∪ sure``; ``possible=None`` means P = S.

    Args:
        sure: per sentence, the gold sure links S.
        possible: per sentence, the gold possible links (with or without the sure ones), or None.
        hyp: per sentence, the hypothesis links A.
    Raises:
        ValueError: the numbers of sentences differ (all counts in the message).
    """
    if possible is None:
        possible = [()] * len(sure)
    if not len(sure) == len(possible) == len(hyp):
        raise ValueError(
            f"different numbers of sentences: gold sure {len(sure)}, gold possible {len(possible)}, "
            f"hypothesis {len(hyp)}"
        )
    n_sure = n_possible = n_hyp = a_s = a_p = 0
    for s_links, p_links, a_links in zip(sure, possible, hyp):
        s_set = set(s_links)
        p_set = set(p_links) | s_set
        a_set = set(a_links)
        n_sure += len(s_set)
        n_possible += len(p_set)
        n_hyp += len(a_set)
        a_s += len(a_set & s_set)
        a_p += len(a_set & p_set)
    nan = math.nan
    return AERResult(
        aer=1.0 - (a_s + a_p) / (n_hyp + n_sure) if n_hyp + n_sure else nan,
        precision=a_p / n_hyp if n_hyp else nan,
        recall=a_s / n_sure if n_sure else nan,
        sentences=len(sure),
        sure=n_sure,
        possible=n_possible,
        hypothesis=n_hyp,
        hyp_and_sure=a_s,
        hyp_and_possible=a_p,
    )


def zero_never_used(links: Sequence[set[Link]]) -> bool:
    """True when a non-trivial corpus never uses index 0 on either side: likely a 1-based file read as
    0-based."""
    all_links = [link for sentence in links for link in sentence]
    return len(all_links) >= 20 and all(s > 0 for s, _ in all_links) and all(t > 0 for _, t in all_links)


def _parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m nmt.aer``."""
    parser = SettingsParser(
        "nmt.aer",
        description="Alignment error rate, precision and recall (Och and Ney 2003) of a Pharaoh hypothesis "
        "against gold sure/possible links.",
    )
    parser.add_argument("--gold", required=True, help="gold alignments (plain or .gz)")
    parser.add_argument(
        "--hyp", required=True, help="hypothesis alignments, Pharaoh i-j, one line per sentence"
    )
    parser.add_argument(
        "--gold-format",
        choices=FORMATS,
        default="pharaoh",
        help="pharaoh: i-j sure, i?j / ipj possible; naacl: 'sent i j [S|P] [conf]' (default pharaoh)",
    )
    parser.add_argument("--one-based", action="store_true", help="gold positions count from 1")
    parser.add_argument(
        "--target-first", action="store_true", help="gold links give the target position first"
    )
    parser.add_argument("--hyp-one-based", action="store_true", help="hypothesis positions count from 1")
    parser.add_argument(
        "--hyp-target-first", action="store_true", help="hypothesis links give the target position first"
    )
    parser.add_argument("--src", help="source sentences (the gold's source side): drop out-of-range links")
    parser.add_argument("--tgt", help="target sentences, parallel to src=")
    parser.add_argument("--bitext", help="'source ||| target' sentences instead of src= and tgt=")
    parser.add_argument("--max-dropped", type=float, default=0.05,
                        help="with src=/tgt= or bitext=: the share of gold or hypothesis links that may lie outside "
                        "the sentences before the score is refused (so many mean wrong settings or files; "
                        "default 0.05; 1: always score)")
    return parser


CHECK = ("a wrong origin (one_based=, hyp_one_based=), position order (target_first=, hyp_target_first=) or "
         "src= and tgt= swapped")  # what many links out of range usually mean


def _read_files(args: argparse.Namespace) -> tuple[list[tuple[int, int]] | None, Alignments, Alignments]:
    """Sentence lengths (or None), gold and hypothesis as the options say; dropped links go to stderr.

    Raises:
        ValueError: more than ``max_dropped`` of the gold's or the hypothesis's links dropped as out of range.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", AlignmentWarning)
        lengths = None
        if args.bitext:
            lengths = read_lengths(args.bitext)
        elif args.src:
            lengths = read_lengths(args.src, args.tgt)
        gold = read_alignments(
            args.gold,
            args.gold_format,
            one_based=args.one_based,
            target_first=args.target_first,
            lengths=lengths,
        )
        hyp = read_pharaoh(
            args.hyp, one_based=args.hyp_one_based, target_first=args.hyp_target_first, lengths=lengths
        )
    dropped = [str(w.message) for w in caught if issubclass(w.category, AlignmentWarning)]
    for message in dropped_summary(dropped, CHECK):
        print(f"warning: {message}", file=sys.stderr)
    for name, kept, dropped, origin in ((args.gold, gold.possible, gold.dropped, ("one_based", args.one_based)),
                                        (args.hyp, hyp.links, hyp.dropped, ("hyp_one_based", args.hyp_one_based))):
        check_dropped(name, kept, dropped, args.max_dropped, CHECK, origin)
    return lengths, gold, hyp


def check_dropped(name: str, kept: Sequence[set[Link]], dropped: Sequence, max_dropped: float, check: str,
                  origin: tuple[str, bool] | None = None) -> None:
    """Refuse to score an alignment file whose links lie outside their sentences too often: ``dropped`` (the
    links dropped as out of range) against all of them (``kept``, per sentence, plus ``dropped``), or (given
    ``origin``, the setting and whether it read the file as 1-based) a file read as 0-based that never uses
    position 0 and has links past its sentences' ends: a 1-based file, whatever the share dropped.

    Raises:
        ValueError: more than ``max_dropped`` (a share) dropped, naming the file, the counts and what to
            ``check``; or, below ``max_dropped=1``, a 1-based file read as 0-based, naming the setting to give.
    """
    if origin and not origin[1] and dropped and max_dropped < 1 and zero_never_used(kept):
        raise ValueError(f"{name}: no link uses position 0 and {len(dropped)} link(s) lie past the end of their "
                         f"sentences: the file looks 1-based; give {origin[0]}=true (max_dropped=1 scores it as "
                         "0-based anyway)")
    total = sum(map(len, kept)) + len(dropped)
    if total and len(dropped) > max_dropped * total:
        raise ValueError(f"{len(dropped)} of the {total} links of {name} ({len(dropped) / total:.1%}) lie outside "
                         f"the sentences and were dropped, more than max_dropped={max_dropped:g}: an AER of the "
                         f"rest would mislead; look for {check} (max_dropped=1 scores anyway)")


def position_warning(name: str, links: Sequence[set[Link]], null_links: int, one_based: bool,
                     setting: str | None = None) -> str | None:
    """A warning for an alignment file that looks read with the wrong origin, or None: ``links`` (per sentence,
    as read) never use position 0 although the file was read as 0-based (a 1-based file?), or ``null_links``
    links at position 0 were skipped as NULL although it was read as 1-based (a 0-based file?). ``setting``
    (e.g. ``one_based``) is the option to name in the question."""
    def fix(value: str) -> str:
        return f" ({setting}={value})" if setting else ""
    if not one_based and zero_never_used(links):
        return f"{name}: no link uses position 0; is the file 1-based{fix('true')}?"
    if one_based and null_links:
        return (f"{name}: {null_links} link(s) use position 0, which a 1-based file reserves for NULL, and were "
                f"skipped; is the file 0-based{fix('false')}?")
    return None


def dropped_summary(messages: Sequence[str], check: str, shown: int = 3) -> list[str]:
    """The warnings for links dropped as out of range: all of them up to ``shown``, else the first ``shown`` and
    one line with the count and what to ``check`` (so many usually mean a wrong origin, order or file)."""
    if len(messages) <= shown:
        return list(messages)
    summary = (f"{len(messages) - shown} more link(s) out of range were dropped ({len(messages)} in all); so many "
               f"usually mean {check}")
    return [*messages[:shown], summary]


def _warn_about_positions(args: argparse.Namespace, gold: Alignments, hyp: Alignments) -> None:
    """Warn on stderr about a file that looks 1-based but is read as 0-based, or the other way round."""
    for name, links, nulls, one_based, setting in (
            (args.gold, gold.possible, gold.null_links, args.one_based, "one_based"),
            (args.hyp, hyp.links, hyp.null_links, args.hyp_one_based, "hyp_one_based")):
        if message := position_warning(name, links, nulls, one_based, setting):
            print(f"warning: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nmt.aer``: score a Pharaoh hypothesis file against a gold file; prints one line (see the
    module docstring). Returns 0, or 1 with ``error: ...`` on stderr for unreadable or mismatched files."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.bitext and (args.src or args.tgt):
        parser.error("give either bitext= or src= and tgt=")
    if bool(args.src) != bool(args.tgt):
        parser.error("src= and tgt= go together")
    if not 0 <= args.max_dropped <= 1:
        parser.error(f"max_dropped={args.max_dropped:g}: a share between 0 and 1")

    try:
        lengths, gold, hyp = _read_files(args)
        _warn_about_positions(args, gold, hyp)
        if len(gold) != len(hyp):
            hint = ""
            if args.gold_format == "naacl" and lengths is None and len(gold) < len(hyp):
                hint = (
                    " (a NAACL file cannot show trailing sentences without links: "
                    "pass src= and tgt=, or bitext=)"
                )
            raise ValueError(f"{args.gold} has {len(gold)} sentences but {args.hyp} has {len(hyp)}{hint}")
        result = aer(gold.sure, gold.possible, hyp.links)
    except (OSError, ValueError) as err:
        print(f"{parser.prog}: error: {err}", file=sys.stderr)
        return 1
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
