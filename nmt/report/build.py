"""Everything the report shows, gathered from the run folders into one :class:`Report` (no HTML here: the
page and the summary render it, :mod:`nmt.report.page`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

from nmt.analysis.curves import Curve
from nmt.report import analyses, tables
from nmt.report.attention import Panel, attention_summary, choose_sentences, piece_panel, read_saved
from nmt.report.gold import GoldOptions, GoldScores, score_gold
from nmt.report.runs import ReportError, Run, read_runs
from nmt.report.significance import PairedResult, paired_test
from nmt.report.testset import check_comparable, read_test_set, training_targets


@dataclass
class ReportOptions:
    """What to compare and how (the options of ``python -m nmt.report``).

    Attributes:
        baseline: the run the others are tested against (its label or folder; default the first run).
        sentences: test sentences whose attention is drawn (default: three of different lengths).
        gold: a gold alignment set and the extraction method (None: no AER).
        gold_sentences: gold sentences whose word-level maps are drawn (default: the first three).
        test: ``"bs"`` (paired bootstrap) or ``"ar"`` (approximate randomization).
        samples: resamples or shuffles (0: sacreBLEU's defaults).
        alpha: the significance level.
        sources: the test sources, where the runs' corpus cannot be read here.
        references: the test references, with ``sources``.
        disagreements: how many sentences of disagreement to list.
        sentence_metric: ``chrf`` or ``bleu``, the sentence score for finding them.
        notes: lines shown first among the page's notes (a sweep's failed jobs, with their errors).
    """

    baseline: str | None = None
    sentences: list[int] | None = None
    gold: GoldOptions | None = None
    gold_sentences: list[int] | None = None
    test: str = "bs"
    samples: int = 0
    alpha: float = 0.05
    sources: Path | None = None
    references: Path | None = None
    disagreements: int = 10
    sentence_metric: str = "chrf"
    notes: list[str] = field(default_factory=list)


@dataclass
class Report:
    """The report's content; rows are plain dicts (:mod:`nmt.report.tables`), figures are built from the rest.

    Attributes:
        runs: the runs, in the order given.
        baseline: the baseline's label.
        test_origin: where the test set comes from.
        run_rows: one dict per run (:func:`nmt.report.tables.run_row`).
        score_rows: one dict per run (:func:`nmt.report.tables.score_row`).
        attention_rows: one dict per run (:func:`nmt.report.tables.attention_row`).
        signatures: sacreBLEU's signatures, once (:func:`nmt.report.tables.signatures`).
        significance: the paired test (None for a single run).
        by_length: BLEU by source-length bucket.
        by_frequency: word F-measure by training frequency (None when the training data cannot be read).
        disagreements: the sentences where the runs disagree most.
        disagreement_signature: the sentence metric's signature.
        curves: the runs' validations.
        sentences: ``{test index: [Panel per run]}``.
        gold: AER and word maps (None without a gold set).
        notes: what was left out and why.
    """

    runs: list[Run]
    baseline: str
    test_origin: str
    run_rows: list[dict]
    score_rows: list[dict]
    attention_rows: list[dict]
    signatures: dict[str, list[str]]
    significance: PairedResult | None
    by_length: analyses.Bucketed
    by_frequency: analyses.Bucketed | None
    disagreements: list[analyses.Disagreement]
    disagreement_signature: str
    curves: list[Curve]
    sentences: dict[int, list[Panel]]
    gold: GoldScores | None = None
    notes: list[str] = field(default_factory=list)


def pick_baseline(runs: list[Run], baseline: str | None) -> int:
    """The position of the baseline among ``runs``: the run whose label, folder name or folder path is
    ``baseline``; the first run when None.

    Raises:
        ReportError: no run matches (the message lists the labels).
    """
    if baseline is None:
        return 0
    for i, run in enumerate(runs):
        if baseline in (run.label, run.folder.name) or Path(baseline).resolve() == run.folder.resolve():
            return i
    raise ReportError(f"baseline={baseline}: no such run; give one of {', '.join(r.label for r in runs)}")


def _analyses(runs: list[Run], order: list[int], sources: list[str], references: list[str],
              options: ReportOptions, notes: list[str]) -> dict:
    """The significance test, the bucketed tables and the disagreements, on the test hypotheses."""
    hyps = {runs[i].label: runs[i].hypotheses("test") for i in order}
    tokenize = tables.tokenizer_of(runs[order[0]])
    significance = paired_test(list(hyps.items()), references, tokenize, options.test, options.samples,
                               options.alpha) if len(runs) > 1 else None
    try:
        by_frequency = analyses.word_f_by_frequency(training_targets(runs[order[0]]), references, hyps, tokenize)
    except ReportError as err:
        by_frequency = None
        notes.append(f"word accuracy by frequency left out: {err}")
    rows, signature = analyses.disagreements(sources, references, {r.label: hyps[r.label] for r in runs},
                                             options.disagreements if len(runs) > 1 else 0,
                                             options.sentence_metric, tokenize)
    return {"significance": significance, "by_length": analyses.bleu_by_length(sources, references, hyps, tokenize),
            "by_frequency": by_frequency, "disagreements": rows, "disagreement_signature": signature}


def _attention(runs: list[Run], sentences: list[int] | None) -> tuple[list[dict], dict[int, list[Panel]]]:
    """Per run the attention summary of its test matrices, and the panels of the chosen sentences."""
    saved = [read_saved(f"{run.prefixes[('test', run.main_decoder())]}.alignments.npz") for run in runs]
    chosen = sentences if sentences is not None else choose_sentences(saved[0])
    rows = [tables.attention_row(run.label, attention_summary(s)) for run, s in zip(runs, saved)]
    return rows, {index: [piece_panel(run.label, s, index) for run, s in zip(runs, saved)] for index in chosen}


def build_report(folders: list[str | Path], options: ReportOptions | None = None) -> Report:
    """Read the runs that ``folders`` name and compute everything the report shows.

    Raises:
        ReportError: no finished run, an unknown baseline, runs of different test sets or references (refused:
            never compared), unreadable run files, sentences out of range, an unusable gold set.
    """
    options = options or ReportOptions()
    with warnings.catch_warnings(record=True) as left_out:  # runs left out: on the page too, not only on stderr
        warnings.simplefilter("always")
        runs = read_runs(folders)
    for warning in left_out:
        warnings.warn(warning.message, stacklevel=2)
    base = pick_baseline(runs, options.baseline)
    order = [base, *(i for i in range(len(runs)) if i != base)]
    cache: dict = {}
    sets = [read_test_set(runs[i], options.sources, options.references, cache) for i in order]
    check_comparable([runs[i] for i in order], sets)
    notes: list[str] = [*options.notes, *(str(w.message).replace("left out", "Left out", 1) for w in left_out)]
    found = _analyses(runs, order, sets[0].sources, sets[0].references, options, notes)
    attention_rows, sentences = _attention(runs, options.sentences)
    gold = None
    if options.gold is not None:
        gold = score_gold(runs, options.gold, options.gold_sentences if options.gold_sentences is not None
                          else [0, 1, 2])
    return Report(runs=runs, baseline=runs[base].label, test_origin=sets[0].origin,
                  run_rows=[tables.run_row(r) for r in runs], score_rows=[tables.score_row(r) for r in runs],
                  attention_rows=attention_rows, signatures=tables.signatures(runs),
                  curves=[r.curve for r in runs if r.curve is not None], sentences=sentences, gold=gold,
                  notes=notes, **found)
