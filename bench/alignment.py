"""AER of attention as a word aligner on a gold set, for every extraction method: the rows of docs/alignment.md.

Forced-aligns the gold sentences once per model (nmt.align.force_align, lowercased as the model's training data
when ``data.normalize.lowercase`` is on) and scores AER / precision / recall (nmt.aer, Och and Ney 2003) for:

- one direction: ``argmax_target`` (Luong et al. 2015's), ``argmax_source``, ``threshold`` (0.2) and
  ``mutual_argmax`` (the links both argmaxes give), each with the
  target word read from attention step t (``shift 0``) or t+1 (``shift 1``) and at temperature 1 and 0.5;
- with ``--reverse`` (a model trained in the other direction): the reverse model alone, the symmetrizations
  ``intersection``, ``union``, ``grow-diag-final-and`` of the two directions' ``argmax_target`` links, and the
  soft symmetrizations (word matrices combined by ``product`` or ``mean``, then each one-direction method).

Usage (run folders of ``python train.py +experiment=align_en_fr``, or checkpoint files)::

    python bench/alignment.py --gold-set enfr --forward RUN_EN_FR [--reverse RUN_FR_EN] [--label NAME]
                              [--json rows.jsonl]

Gold sets are read from ``$NMT_DATA_DIR`` (default ``../shared/corpora``), with the conventions of their
SOURCE.md: ``enfr`` = Hansards 447 pairs (English source, 1-based Pharaoh ``enfr.gold`` with sure and possible
links), ``deen`` = Biçici's 100 Europarl pairs (German source, 0-based ``de-en.wa``, sure only; the BOM and the
one out-of-range link are handled by nmt.data.textio / nmt.aer), ``roen`` = WPT 2003 Romanian-English 248 pairs
(Romanian source, 1-based, sure only).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nmt.analysis.aer import aer
from nmt.analysis.forced import combined_links, force_align, links, load_aligner
from nmt.analysis.gold import AlignmentWarning, read_pharaoh
from nmt.analysis.symmetrize import symmetrize
from nmt.data.corpus import read_table
from nmt.data.textio import read_lines
from nmt.decoding.word_alignment import METHODS

GOLD_SETS = {  # name: (folder, source file, target file, gold file, one_based, source lang, target lang)
    "enfr": ("align_enfr_hansards", "test.e.gz", "test.f.gz", "enfr.gold.gz", True, "en", "fr"),
    "deen": ("align_deen_bicici100", "test.de.gz", "test.en.gz", "de-en.wa.gz", False, "de", "en"),
    "roen": ("align_roen_wpt2003", None, None, "roen.gold.gz", True, "ro", "en"),  # bitext roen.src-tgt.gz
}
ONE_DIRECTION = [(method, shift, temperature) for method in METHODS for shift in (0, 1) for temperature in (1.0, 0.5)]
SYMMETRIZATIONS = ("intersection", "union", "grow-diag-final-and")
COMBINED = [(how, method) for how in ("product", "mean") for method in METHODS]
THRESHOLD = 0.2  # of the "threshold" method (probability mass of a word-level cell)


def gold_set(name: str, data_dir: Path):
    """``(sources, targets, gold Alignments)`` of a gold set, 0-based source-first links."""
    folder, src, tgt, gold, one_based, _, _ = GOLD_SETS[name]
    folder = data_dir / folder
    if src is None:  # 'source ||| target' bitext with trailing spaces (SOURCE.md)
        pairs = read_table(folder / "roen.src-tgt.gz", ["ro", "en"], "ro", "en", " ||| ")
        sources, targets = pairs.src, pairs.tgt
    else:
        sources, targets = [s.strip() for s in read_lines(folder / src)], [t.strip() for t in read_lines(folder / tgt)]
    lengths = [(len(s.split()), len(t.split())) for s, t in zip(sources, targets)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AlignmentWarning)  # the de-en set's one out-of-range link (SOURCE.md)
        alignments = read_pharaoh(folder / gold, one_based=one_based, lengths=lengths)
    return sources, targets, alignments


def forced(path: str, sources: list[str], targets: list[str], expect: tuple[str, str]):
    """Forced alignments of ``targets`` given ``sources`` under the checkpoint at ``path`` (a run folder or file).

    Raises:
        SystemExit: when the model's languages are not ``expect`` (source, target).
    """
    model, src_tok, tgt_tok, prepare, langs = load_aligner(path)
    if langs != expect:
        raise SystemExit(f"{path}: model translates {langs[0]}->{langs[1]}, this needs {expect[0]}->{expect[1]}")
    return force_align(model, src_tok, tgt_tok, prepare(sources), prepare(targets)), model


def rows(name: str, forward: str, reverse: str | None, data_dir: Path) -> list[dict]:
    """One dict per extraction method: ``aer``, ``precision``, ``recall`` (fractions) and how it was made."""
    sources, targets, gold = gold_set(name, data_dir)
    _, _, _, _, _, src_lang, tgt_lang = GOLD_SETS[name]
    fwd, model = forced(forward, sources, targets, (src_lang, tgt_lang))
    about = {"gold_set": name, "attention": type(model.decoder.attention).__name__,
             "decoder": model.decoder.style, "input_feeding": model.decoder.input_feeding, "model": forward}
    out = []

    def score(method: str, links_per_sentence: list, **extra) -> None:
        result = aer(gold.sure, gold.possible, links_per_sentence)
        out.append({**about, "method": method, **extra, "aer": result.aer, "precision": result.precision,
                    "recall": result.recall, "links": result.hypothesis})

    for method, shift, temperature in ONE_DIRECTION:
        score(method, [links(t, method, THRESHOLD, shift, temperature) for t in fwd], shift=shift,
              temperature=temperature, direction="forward")
    if reverse:
        bwd, _ = forced(reverse, targets, sources, (tgt_lang, src_lang))
        for shift in (0, 1):
            f_links = [links(t, "argmax_target", shift=shift) for t in fwd]
            b_links = [[(s, t) for t, s in links(r, "argmax_target", shift=shift)] for r in bwd]
            score("argmax_target", b_links, shift=shift, temperature=1.0, direction="reverse")
            for method in SYMMETRIZATIONS:
                score(method, [symmetrize(f, b, method) for f, b in zip(f_links, b_links)], shift=shift,
                      temperature=1.0, direction="both")
            for how, method in COMBINED:
                score(f"{how}+{method}", [combined_links(f, b, how, method, THRESHOLD, shift)
                                          for f, b in zip(fwd, bwd)], shift=shift, temperature=1.0,
                      direction="both")
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="python bench/alignment.py", description=__doc__.split("\n")[0])
    parser.add_argument("--gold-set", choices=sorted(GOLD_SETS), required=True)
    parser.add_argument("--forward", required=True, help="run folder or checkpoint: gold source -> gold target")
    parser.add_argument("--reverse", help="run folder or checkpoint trained in the opposite direction")
    parser.add_argument("--label", help="a name for the rows (printed and stored; default: the --forward folder's name)")
    parser.add_argument("--json", help="append the rows to this jsonl file")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    data_dir = Path(os.environ.get("NMT_DATA_DIR", ROOT.parent / "shared" / "corpora"))
    table = rows(args.gold_set, args.forward, args.reverse, data_dir)
    forward = Path(args.forward)  # a run folder, or RUN/checkpoints/FILE.pt
    label = args.label if args.label is not None else (
        forward.name if forward.is_dir() else f"{forward.parent.parent.name}/{forward.name}")
    print(f"{'label':<24} {'direction':<8} {'method':<28} {'shift':>5} {'T':>4} {'AER %':>6} {'P %':>6} {'R %':>6}")
    for row in table:
        row["label"] = label
        print(f"{label:<24} {row['direction']:<8} {row['method']:<28} {row['shift']:>5} "
              f"{row['temperature']:>4} {100 * row['aer']:>6.1f} {100 * row['precision']:>6.1f} "
              f"{100 * row['recall']:>6.1f}")
    if args.json:
        with open(args.json, "a", encoding="utf-8") as handle:
            for row in table:
                handle.write(json.dumps(row) + "\n")
    return table


if __name__ == "__main__":
    main()
