"""Attention as a word aligner, per run, against a gold alignment set: each run's model teacher-forces the gold
sentence pairs (:func:`nmt.analysis.forced.force_align`), links are extracted as ``nmt.align`` does
(:func:`nmt.analysis.forced.links`) and scored by AER, precision and recall (:func:`nmt.analysis.aer.aer`,
Och and Ney 2003); the word-level maps of a few gold sentences carry the gold links.

The gold options are those of ``python -m nmt.aer`` (format, 1-based positions, target first, the sentence files)
and the extraction options those of ``python -m nmt.align`` (method, threshold, shift, temperature, lowercase);
the models run on ``device`` with ``threads`` CPU threads, as ``nmt.align``'s do.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

from nmt.analysis.aer import AERResult, aer
from nmt.analysis.forced import force_align, links, load_aligner, sharpen, word_counts
from nmt.analysis.gold import AlignmentFormatError, Alignments, AlignmentWarning, read_alignments
from nmt.data.textio import TextFileError, read_lines
from nmt.decoding.word_alignment import merge_to_words
from nmt.models.allocator import reuse_freed_memory
from nmt.models.device import pick_device, set_threads
from nmt.report.attention import Panel, diagonal_distance, row_entropy
from nmt.report.runs import ReportError, Run


@dataclass
class GoldOptions:
    """Where the gold set is and how to extract links (the options of ``nmt.aer`` and ``nmt.align``).

    ``src``/``tgt`` (or ``bitext``, ``source ||| target`` lines) are the gold sentence pairs, whitespace words;
    ``lowercase``: ``auto`` (as each run's training data), ``true`` or ``false``; ``device``: where the models
    run (``auto``: cuda when available, else cpu; :func:`nmt.models.device.pick_device`); ``threads``: torch's
    CPU threads (None: all cores; :func:`nmt.models.device.set_threads`).
    """

    gold: Path
    fmt: str = "pharaoh"
    one_based: bool = False
    target_first: bool = False
    src: Path | None = None
    tgt: Path | None = None
    bitext: Path | None = None
    method: str = "argmax_target"
    threshold: float = 0.3
    shift: int = 0
    temperature: float = 1.0
    lowercase: str = "auto"
    device: str = "auto"
    threads: int | None = None

    def describe(self) -> str:
        """The extraction method in words, for the page."""
        method = self.method + (f" {self.threshold:g}" if self.method == "threshold" else "")
        return (f"{method}, shift {self.shift}, temperature {self.temperature:g} (forced alignment of the gold "
                f"sentences, pieces merged into words)")


@dataclass
class GoldScores:
    """AER per run and the word-level maps of some gold sentences.

    Attributes:
        method: the extraction method in words.
        gold: the gold file.
        results: ``{run label: AERResult}``.
        panels: ``{gold sentence index: [Panel per run]}``.
        notes: links dropped from the gold set, sentences whose word counts differ from the model's.
    """

    method: str
    gold: str
    results: dict[str, AERResult]
    panels: dict[int, list[Panel]]
    notes: list[str] = field(default_factory=list)


def read_gold(options: GoldOptions) -> tuple[list[str], list[str], Alignments, list[str]]:
    """``(sources, targets, gold links, notes)``; links outside the sentences are dropped with a note.

    Raises:
        ReportError: no sentence files, unreadable files, or a gold set of another number of sentences.
    """
    try:
        if options.bitext:
            pairs = [line.split("|||", 1) for line in read_lines(options.bitext)]
            bad = next((n for n, pair in enumerate(pairs, 1) if len(pair) != 2), None)
            if bad:
                raise ReportError(f"{options.bitext}: line {bad}: expected 'source ||| target'")
            sources, targets = [p[0].strip() for p in pairs], [p[1].strip() for p in pairs]
        elif options.src and options.tgt:
            sources = [line.strip() for line in read_lines(options.src)]
            targets = [line.strip() for line in read_lines(options.tgt)]
        else:
            raise ReportError("gold= needs the sentences it aligns: src= and tgt=, or bitext=")
        if len(sources) != len(targets):
            raise ReportError(f"{options.src} has {len(sources)} lines but {options.tgt} has {len(targets)}")
        lengths = [(len(s.split()), len(t.split())) for s, t in zip(sources, targets)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", AlignmentWarning)  # kept in .dropped, shown as notes
            gold = read_alignments(options.gold, options.fmt, one_based=options.one_based,
                                   target_first=options.target_first, lengths=lengths)
    except (OSError, TextFileError, AlignmentFormatError) as err:
        raise ReportError(str(err)) from None
    except ValueError as err:  # line counts of the gold set and the sentences
        raise ReportError(f"{options.gold}: {err}") from None
    return sources, targets, gold, list(gold.dropped)


def _word_panel(label: str, translation, options: GoldOptions, gold: Alignments, index: int) -> Panel:
    """The word-level map of one forced alignment with its gold links (those inside the map)."""
    matrix, src_words, hyp_words = merge_to_words(sharpen(translation.alignment, options.temperature),
                                                  translation.src_pieces, translation.hyp_pieces, options.shift)
    inside = {(s, t) for s, t in gold.possible[index] if s < len(src_words) and t < len(hyp_words)}
    return Panel(label, matrix, src_words, hyp_words, src_words, hyp_words,
                 sure=gold.sure[index] & inside, possible=inside - gold.sure[index],
                 entropy=row_entropy(matrix), diagonal=diagonal_distance(matrix))


def score_gold(runs: list[Run], options: GoldOptions, indices: list[int]) -> GoldScores:
    """Force-align the gold sentences with each run's final model, score AER / precision / recall, and draw
    the word-level maps of gold sentences ``indices`` (those in range).

    Raises:
        ReportError: as :func:`read_gold`; a run whose model cannot be loaded; an unusable ``device`` or
            ``threads``.
    """
    sources, targets, gold, notes = read_gold(options)
    try:
        set_threads(options.threads)
        reuse_freed_memory()
        device = pick_device(options.device)
    except ValueError as err:
        raise ReportError(str(err)) from None
    indices = [i for i in indices if 0 <= i < len(sources)]
    results, panels = {}, {i: [] for i in indices}
    for run in runs:
        try:
            model, src_tok, tgt_tok, prepare, _ = load_aligner(run.folder, device, lowercase=options.lowercase)
        except (OSError, ValueError) as err:
            raise ReportError(f"{run.label}: cannot load its model to align the gold sentences: {err}") from None
        forced = force_align(model, src_tok, tgt_tok, prepare(sources), prepare(targets), device=device)
        hyp = [links(t, options.method, options.threshold, options.shift, options.temperature) for t in forced]
        results[run.label] = aer(gold.sure, gold.possible, hyp)
        for i in indices:
            panels[i].append(_word_panel(run.label, forced[i], options, gold, i))
        off = [n + 1 for n, (t, s, g) in enumerate(zip(forced, sources, targets))
               if t.hyp_pieces and word_counts(t) != (len(s.split()), len(g.split()))]
        if off:
            notes.append(f"{run.label}: {len(off)} gold sentence(s) have other word counts once its subwords are "
                         f"merged (lines {', '.join(map(str, off[:5]))}{', ...' if len(off) > 5 else ''})")
    return GoldScores(options.describe(), str(options.gold), results, panels, notes)
