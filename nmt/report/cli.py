"""``python -m nmt.report``: the comparison report of runs, as one HTML page and a Markdown summary.

    python -m nmt.report RUN_OR_SWEEP_FOLDER... out=DIR [baseline=RUN] [sentences=[0,5,17]]
                         [test=bs|ar] [samples=N] [alpha=0.05] [sources=FILE references=FILE]
                         [disagreements=10] [sentence_metric=chrf|bleu]
                         [gold=FILE (src=FILE tgt=FILE | bitext=FILE) [gold_format=pharaoh|naacl]
                          [one_based=true] [target_first=true] [gold_sentences=[0,1,2]]
                          [method=argmax_target] [threshold=0.3] [shift=0] [temperature=1.0]
                          [lowercase=auto|true|false] [device=auto|cpu|cuda|cuda:N] [threads=N]]

Writes ``DIR/index.html`` (open it in a browser; it needs ``DIR/plotly.min.js`` beside it, no network),
``DIR/summary.md`` (the same tables) and prints the page's path.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import warnings
from pathlib import Path

from nmt.analysis.gold import FORMATS
from nmt.commandline import SettingsParser
from nmt.decoding.word_alignment import METHODS
from nmt.models.device import pick_device
from nmt.report.build import ReportOptions
from nmt.report.gold import GoldOptions
from nmt.report.page import write_report
from nmt.report.runs import ReportError
from nmt.report.significance import TESTS


def _parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m nmt.report``."""
    parser = SettingsParser("nmt.report", description=__doc__)
    parser.add_argument("runs", nargs="+", help="run folders of train.py, sweep folders (multirun/<time>/) or globs")
    parser.add_argument("--out", type=Path, required=True, help="folder for index.html, summary.md, plotly.min.js")
    parser.add_argument("--baseline", help="the run the others are tested against (label or folder; default: the "
                        "first)")
    parser.add_argument("--sentences", type=int, nargs="+", help="0-based test sentences whose attention is drawn "
                        "(default: three of different lengths)")
    parser.add_argument("--test", choices=sorted(TESTS), default="bs", help="bs: paired bootstrap resampling "
                        "(default); ar: approximate randomization")
    parser.add_argument("--samples", type=int, default=0, help="resamples (bs) or random shuffles (ar); 0: "
                        "sacreBLEU's defaults (1000, 10000)")
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level (default 0.05)")
    parser.add_argument("--sources", type=Path, help="the test sources, when the runs' corpus cannot be read here")
    parser.add_argument("--references", type=Path, help="the test references, with sources=")
    parser.add_argument("--disagreements", type=int, default=10, help="sentences of disagreement to list")
    parser.add_argument("--sentence-metric", choices=("chrf", "bleu"), default="chrf",
                        help="sentence score for finding disagreements (default chrf)")
    gold = parser.add_argument_group("alignment against a gold set (the options of nmt.aer and nmt.align)")
    gold.add_argument("--gold", type=Path, help="gold word alignments (plain or .gz)")
    gold.add_argument("--gold-format", choices=FORMATS, default="pharaoh")
    gold.add_argument("--one-based", action="store_true", help="gold positions count from 1")
    gold.add_argument("--target-first", action="store_true", help="gold links give the target position first")
    gold.add_argument("--src", type=Path, help="the gold set's source sentences (whitespace words)")
    gold.add_argument("--tgt", type=Path, help="its target sentences, parallel to src=")
    gold.add_argument("--bitext", type=Path, help="'source ||| target' lines instead of src= and tgt=")
    gold.add_argument("--gold-sentences", type=int, nargs="+", help="gold sentences whose word maps are drawn "
                      "(default [0,1,2])")
    gold.add_argument("--method", choices=METHODS, default="argmax_target", help="link extraction (default "
                      "argmax_target)")
    gold.add_argument("--threshold", type=float, default=0.3, help="of method=threshold")
    gold.add_argument("--shift", type=int, default=0, help="read target word t from attention row t+shift")
    gold.add_argument("--temperature", type=float, default=1.0, help="< 1 sharpens the attention first")
    gold.add_argument("--lowercase", choices=("auto", "true", "false"), default="auto",
                      help="lowercase the gold sentences (auto: as each run's training data)")
    gold.add_argument("--device", default="auto", metavar="auto|cpu|cuda|cuda:N", help="where the runs' models "
                      "align the gold sentences (auto, the default: cuda when available, else cpu)")
    gold.add_argument("--threads", type=int, default=None, metavar="N", help="CPU threads of the models that align "
                      "the gold sentences, a whole number >= 1 (default null: all cores)")
    return parser


def _options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> ReportOptions:
    """The report options from the parsed arguments; usage errors end the program."""
    if bool(args.sources) != bool(args.references):
        parser.error("sources= and references= go together")
    if args.samples < 0:
        parser.error(f"samples={args.samples}: give a number of resamples >= 0 (0: sacreBLEU's defaults)")
    if not 0 < args.alpha < 1:
        parser.error(f"alpha={args.alpha}: give a significance level between 0 and 1")
    if args.disagreements < 0:
        parser.error(f"disagreements={args.disagreements}: give a number of sentences >= 0")
    if args.threads is not None and args.threads < 1:
        parser.error(f"threads={args.threads}: give a whole number of CPU threads >= 1 (or threads=null: all cores)")
    if args.device != "auto":
        try:
            pick_device(args.device)  # before any work: an unknown device, or CUDA on a machine without it
        except ValueError as err:
            parser.error(str(err))
    gold = None
    if args.gold:
        if args.bitext and (args.src or args.tgt):
            parser.error("give either bitext= or src= and tgt=")
        if not args.bitext and not (args.src and args.tgt):
            parser.error("gold= needs the sentences it aligns: src= and tgt=, or bitext=")
        if args.shift < 0:
            parser.error(f"shift={args.shift}: give a number of rows >= 0")
        if args.temperature <= 0:
            parser.error(f"temperature={args.temperature}: give a temperature > 0")
        gold = GoldOptions(args.gold, args.gold_format, args.one_based, args.target_first, args.src, args.tgt,
                           args.bitext, args.method, args.threshold, args.shift, args.temperature, args.lowercase,
                           device=args.device, threads=args.threads)
    elif args.src or args.tgt or args.bitext or args.gold_sentences:
        parser.error("src=, tgt=, bitext= and gold_sentences= belong to gold=")
    return ReportOptions(baseline=args.baseline, sentences=args.sentences, gold=gold,
                         gold_sentences=args.gold_sentences, test=args.test, samples=args.samples, alpha=args.alpha,
                         sources=args.sources, references=args.references, disagreements=args.disagreements,
                         sentence_metric=args.sentence_metric)


def main(argv: list[str] | None = None) -> int:
    """Command line: write the report and print the page's path; 1 with ``error: ...`` on stderr for runs or
    files the report cannot use (a refused comparison included), 2 for usage errors."""
    argv = sys.argv[1:] if argv is None else argv
    parser = _parser()
    args = parser.parse_args(argv)
    options = _options(parser, args)
    command = " ".join([parser.prog, *map(shlex.quote, argv)])
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            page = write_report(args.runs, args.out, options, command)
    except ReportError as err:
        print(f"{parser.prog}: error: {err}", file=sys.stderr)
        return 1
    for warning in (w for w in caught if issubclass(w.category, UserWarning)):
        print(f"{parser.prog}: warning: {warning.message}", file=sys.stderr)
    print(page)
    return 0
