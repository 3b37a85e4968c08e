"""Link extraction beyond mutual argmax, for English-French aligner pairs: each variant's cut-off is chosen on the
37 Hansards trial sentences (``dev``) and scored on the 447 test sentences, the rows of docs/alignment.md
("Other extractions of the same pair").

For one or more pairs (an en->fr model and its fr->en reverse, e.g. the two halves of one
``+experiment=align_en_fr_joint`` run), the word-level matrices of each direction are averaged over the pairs, combined
by their geometric mean (``product``, as ``nmt.align combine=product``), and the links are extracted by:

- ``mutual_argmax`` (the reference: what the presets use);
- ``threshold``: every cell of the product >= c;
- ``mutual+threshold``: the union of the two;
- ``both>=c``: cells where each direction alone is >= c (the extraction of awesome-align, Dou and Neubig 2021);
- ``itermax``: SimAlign's IterMax (Jalili Sabet et al. 2020, §2.2): mutual argmax again on the matrix with the
  cells of words aligned on both sides removed and those aligned on one side multiplied by ``alpha``;
- ``grow``: mutual argmax links, then every neighbour (8 directions) of a link whose product is >= c, repeatedly;
- ``power``: the weighted geometric mean ``forward^w * backward^(1-w)``, then mutual argmax.

Usage::

    python bench/extraction.py --pair RUN_A [--pair RUN_B ...]   # RUN/reverse is each run's fr->en model
    python bench/extraction.py --pair RUN_EN_FR,RUN_FR_EN        # two separately trained models
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from alignment import forced, gold_set

from nmt.analysis.aer import aer
from nmt.analysis.forced import word_alignment
from nmt.analysis.gold import AlignmentWarning, read_lengths, read_naacl
from nmt.data.textio import read_lines
from nmt.decoding.word_alignment import hard_alignment

VARIANTS = {  # name: the settings tried (chosen on dev)
    "mutual_argmax": [None], "threshold": [0.15, 0.2, 0.25, 0.3, 0.35, 0.4], "mutual+threshold": [0.2, 0.3, 0.4, 0.5],
    "both>=c": [0.1, 0.15, 0.2, 0.25, 0.3], "itermax": [(2, 0.9), (2, 1.0), (3, 0.9)], "grow": [0.2, 0.3, 0.4, 0.5],
    "power": [0.3, 0.4, 0.6, 0.7],
}


def mutual(a: np.ndarray) -> set:
    return set(hard_alignment(a, "mutual_argmax"))


def itermax(a: np.ndarray, iterations: int, alpha: float) -> set:
    """SimAlign's IterMax on ``a`` ``[tgt_words, src_words]``: links ``(source, target)``."""
    a, found = a.copy(), set()
    for _ in range(iterations):
        new = mutual(a) - found
        if not new:
            break
        found |= new
        rows = np.zeros(a.shape[0], bool)
        cols = np.zeros(a.shape[1], bool)
        rows[[t for _, t in found]], cols[[s for s, _ in found]] = True, True
        both, one = rows[:, None] & cols[None, :], rows[:, None] ^ cols[None, :]
        a = np.where(both, 0.0, np.where(one, a * alpha, a))
    return found


def grow(a: np.ndarray, cut: float) -> set:
    """Mutual argmax links grown to every neighbour whose cell is >= ``cut``, until none is added."""
    found, frontier = set(), list(mutual(a))
    found.update(frontier)
    while frontier:
        s, t = frontier.pop()
        for ds in (-1, 0, 1):
            for dt in (-1, 0, 1):
                link = (s + ds, t + dt)
                if link not in found and 0 <= link[0] < a.shape[1] and 0 <= link[1] < a.shape[0] \
                        and a[link[1], link[0]] >= cut:
                    found.add(link)
                    frontier.append(link)
    return found


def extract(variant: str, setting, f: np.ndarray, b: np.ndarray) -> set:
    """Links of one sentence pair: ``f`` ``[tgt_words, src_words]`` forward, ``b`` ``[src_words, tgt_words]``."""
    if f.size == 0 or b.size == 0:
        return set()
    product = np.sqrt(f * b.T)
    if variant == "mutual_argmax":
        return mutual(product)
    if variant == "threshold":
        return set(hard_alignment(product, "threshold", setting))
    if variant == "mutual+threshold":
        return mutual(product) | set(hard_alignment(product, "threshold", setting))
    if variant == "both>=c":
        return set(hard_alignment(np.minimum(f, b.T), "threshold", setting))
    if variant == "itermax":
        return itermax(product, *setting)
    if variant == "grow":
        return grow(product, setting)
    return mutual(f ** setting * b.T ** (1 - setting))  # power


def matrices(pairs: list[tuple[str, str]], sources: list[str], targets: list[str]) -> list[tuple]:
    """Per sentence pair, ``(forward, backward)`` word matrices averaged over ``pairs``."""
    per_pair = []
    for forward, reverse in pairs:
        fwd, _ = forced(forward, sources, targets, ("en", "fr"))
        bwd, _ = forced(reverse, targets, sources, ("fr", "en"))
        per_pair.append([(word_alignment(f), word_alignment(b)) for f, b in zip(fwd, bwd)])
    return [(np.mean([p[i][0] for p in per_pair], 0), np.mean([p[i][1] for p in per_pair], 0))
            for i in range(len(sources))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python bench/extraction.py", description=__doc__.split("\n")[0])
    parser.add_argument("--pair", action="append", required=True,
                        help="RUN (its reverse/ folder is the fr->en model) or FORWARD,REVERSE; repeat to average")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    pairs = [tuple(p.split(",")) if "," in p else (p, str(Path(p) / "reverse")) for p in args.pair]
    folder = Path(os.environ.get("NMT_DATA_DIR", ROOT.parent / "shared" / "corpora"))
    test_src, test_tgt, test_gold = gold_set("enfr", folder)
    hansards = folder / "align_enfr_hansards"
    dev_src, dev_tgt = read_lines(hansards / "dev.e.gz"), read_lines(hansards / "dev.f.gz")
    with warnings.catch_warnings():
        warnings.simplefilter("error", AlignmentWarning)  # the trial set is 1-based: no link may fall outside
        dev_gold = read_naacl(hansards / "dev.wa.nonullalign.gz", one_based=True,
                              lengths=read_lengths(hansards / "dev.e.gz", hansards / "dev.f.gz"))
    sets = {"dev": (matrices(pairs, dev_src, dev_tgt), dev_gold),
            "test": (matrices(pairs, test_src, test_tgt), test_gold)}
    print(f"{'variant':<18} {'setting':>10} {'dev AER %':>9} {'test AER %':>10} {'P %':>6} {'R %':>6}")
    for variant, settings in VARIANTS.items():
        scored = []
        for setting in settings:
            results = {name: aer(gold.sure, gold.possible, [extract(variant, setting, f, b) for f, b in mats])
                       for name, (mats, gold) in sets.items()}
            scored.append((results["dev"].aer, setting, results["test"]))
        dev, setting, test = min(scored, key=lambda row: row[0])  # the setting chosen on dev
        print(f"{variant:<18} {setting!s:>10} {100 * dev:>9.2f} {100 * test.aer:>10.2f} "
              f"{100 * test.precision:>6.1f} {100 * test.recall:>6.1f}")


if __name__ == "__main__":
    main()
