"""The learning curve of the attention as a word aligner: AER on a gold alignment set at every validation
(``eval.gold``), into the validation's record of ``metrics.jsonl``, TensorBoard and the log line.

At each validation the model being validated (the moving average with ``train.ema_decay``) force-aligns every
sentence pair of the gold set, the whole set, exactly as ``python -m nmt.align`` does with a checkpoint of that
step (:func:`nmt.analysis.forced.force_align`: the same lowercasing that ``data.normalize`` implies, the same
pieces merged into the gold set's whitespace words, the same extraction ``method``/``shift``/``threshold``/
``temperature``), and the links are scored as ``python -m nmt.aer`` scores them given ``src=`` and ``tgt=``
(Och and Ney 2003: links outside the sentence lengths dropped on both sides, :func:`nmt.analysis.aer.aer`). The
record gets ``aer``, ``alignment_precision`` and ``alignment_recall`` (fractions; NaN when undefined, e.g. no link
at all).

The setting (null: off)::

    eval.gold: {links: FILE, link_langs: [L1, L2],            # Pharaoh or NAACL gold; the languages of a link's
                paths: {L1: FILE, L2: FILE} | bitext: FILE,   # first and second positions, and the sentences
                format: pharaoh, one_based: false,            # (bitext: "L1 words ||| L2 words" lines)
                method: argmax_target, threshold: 0.3, shift: 0, temperature: 1.0, lowercase: auto,
                batch_size: 64}

The gold set is named by language, so one preset serves both directions: a model translating L2 -> L1 aligns
the same pairs the other way round, and the links are read target first.
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass
from pathlib import Path

from nmt.analysis.aer import aer, position_warning
from nmt.analysis.forced import aligner_input, combined_links, force_align, links
from nmt.analysis.gold import FORMATS, Alignments, AlignmentWarning, read_alignments
from nmt.data.textio import read_lines
from nmt.decoding.word_alignment import METHODS

log = logging.getLogger(__name__)

REQUIRED = ("links", "link_langs")
DEFAULTS = {"paths": None, "bitext": None, "format": "pharaoh", "one_based": False, "method": "argmax_target",
            "threshold": 0.3, "shift": 0, "temperature": 1.0, "lowercase": "auto", "batch_size": 64}
RECORD_KEYS = ("aer", "alignment_precision", "alignment_recall")  # what a validation record gets


@dataclass
class GoldSet:
    """The gold sentence pairs in the model's direction, ready to force-align, with their gold links.

    Attributes:
        sources: ``[N]`` source lines, prepared as ``nmt.align`` prepares them (lowercased when the model was
            trained on lowercased text).
        targets: ``[N]`` target lines, prepared the same way.
        gold: sure and possible links per sentence, 0-based ``(source word, target word)``.
        lengths: ``[N]`` ``(source words, target words)``: whitespace tokens of the gold sentences.
        extract: the keyword arguments of :func:`nmt.analysis.forced.links` (method, threshold, shift, temperature).
        batch_size: sentences per forced-alignment batch.
    """

    sources: list[str]
    targets: list[str]
    gold: Alignments
    lengths: list[tuple[int, int]]
    extract: dict
    batch_size: int

    def force(self, model, toks, device) -> list:
        """``model``'s forced alignment of every gold pair (:func:`nmt.analysis.forced.force_align`), in order.
        ``toks``: the model's ``(src_tok, tgt_tok)``. Leaves the model in eval mode (``force_align`` sets it)."""
        return force_align(model, *toks, self.sources, self.targets, self.batch_size, device)

    def score_forced(self, forced: list, backward: list | None = None) -> dict:
        """AER, precision and recall on the whole gold set (Och and Ney 2003) of the links extracted from a model's
        forced alignments ``forced`` (:meth:`force`); with ``backward``, the reverse model's forced alignments of
        the same pairs (target -> source), of the two directions soft-symmetrized first (``combine=product`` of
        ``nmt.align``: :func:`nmt.analysis.forced.combined_links`).

        Returns:
            ``{"aer", "alignment_precision", "alignment_recall"}`` as fractions (NaN where undefined).
        """
        if backward is None:
            found = [links(sentence, **self.extract) for sentence in forced]
        else:
            found = [combined_links(f, b, "product", **self.extract) for f, b in zip(forced, backward)]
        hyp = [{(s, t) for s, t in pairs if s < n_src and t < n_tgt}
               for pairs, (n_src, n_tgt) in zip(found, self.lengths)]  # as nmt.aer src= tgt= drops them
        result = aer(self.gold.sure, self.gold.possible, hyp)
        return dict(zip(RECORD_KEYS, (result.aer, result.precision, result.recall)))


def describe(record: dict) -> str:
    """The gold figures of a validation record for its log line (``", AER 43.9% (P 57.1 R 54.3)"``), or ``""``."""
    if "aer" not in record:
        return ""
    percent = [100 * record[key] for key in RECORD_KEYS]
    return ", AER {:.1f}% (P {:.1f} R {:.1f})".format(*percent)


def gold_settings(node) -> dict | None:
    """``eval.gold`` as a plain dict with its defaults filled in, or None when it is null.

    Raises:
        ValueError: an unknown key (listing the valid ones), a missing ``links``/``link_langs``, neither or both of
            ``paths`` and ``bitext``, or a value out of range (``method``, ``format``, ``shift``, ...), each naming
            the key ``eval.gold.KEY``.
    """
    if node is None:
        return None
    given = dict(node) if hasattr(node, "keys") else None
    if given is None:
        raise ValueError(f"eval.gold={node!r} must be null or a mapping such as {{links: FILE, link_langs: [de, en], "
                         "paths: {de: FILE, en: FILE}}")
    unknown = sorted(set(given) - set(REQUIRED) - set(DEFAULTS))
    missing = [key for key in REQUIRED if not given.get(key)]
    if unknown or missing:
        problem = f"unknown key(s) {', '.join(unknown)}" if unknown else f"missing {', '.join(missing)}"
        raise ValueError(f"eval.gold: {problem}; keys: {', '.join(REQUIRED + tuple(DEFAULTS))}")
    opts = {**DEFAULTS, **{k: v for k, v in given.items() if v is not None}}
    langs = opts["link_langs"]
    opts["link_langs"] = [str(lang) for lang in langs] if not isinstance(langs, str) else [langs]
    if len(opts["link_langs"]) != 2 or len(set(opts["link_langs"])) != 2:
        raise ValueError(f"eval.gold.link_langs={opts['link_langs']} must name two languages: those of a link's "
                         "first and second position")
    if (opts["paths"] is None) == (opts["bitext"] is None):
        raise ValueError("eval.gold: give the sentences either as paths: {LANG: FILE, LANG: FILE} or as bitext: FILE")
    checks = (("format", opts["format"] in FORMATS, ", ".join(FORMATS)),
              ("method", opts["method"] in METHODS, ", ".join(METHODS)),
              ("lowercase", opts["lowercase"] in ("auto", "true", "false", True, False), "auto, true, false"),
              ("one_based", isinstance(opts["one_based"], bool), "true, false"),
              ("shift", _whole(opts["shift"], 0), "a whole number >= 0"),
              ("batch_size", _whole(opts["batch_size"], 1), "a whole number >= 1"),
              ("threshold", _number(opts["threshold"], 0.0), "a number >= 0"),
              ("temperature", _number(opts["temperature"], 0.0) and opts["temperature"] > 0, "a number above 0"))
    for key, good, valid in checks:
        if not good:
            raise ValueError(f"eval.gold.{key}={opts[key]!r}; valid: {valid}")
    opts["lowercase"] = str(opts["lowercase"]).lower()
    return opts


def _whole(value, low: int) -> bool:
    """Whether ``value`` is a whole number (not a bool) of at least ``low``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _number(value, low: float) -> bool:
    """Whether ``value`` is a finite number (not a bool) of at least ``low``."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= low


def load_gold(cfg, quiet: bool = False) -> GoldSet | None:
    """The gold set of ``cfg.eval.gold`` in the direction ``cfg.data.src_lang`` -> ``cfg.data.tgt_lang``, its
    lines prepared as :func:`nmt.analysis.forced.aligner_input` prepares them for this model's ``cfg.data``; None
    when ``eval.gold`` is null. Gold links outside the sentence lengths are dropped, with one warning unless
    ``quiet`` (the German-English set has one such link).

    Raises:
        ValueError: a bad setting (:func:`gold_settings`), link languages that are not the model's pair, files
            with different numbers of sentences, a bitext line without ``|||``, or a malformed gold file
            (nmt.analysis.gold.AlignmentFormatError, naming file and line).
        FileNotFoundError / nmt.data.textio.TextFileError: a missing or unreadable file, naming the setting.
    """
    opts = gold_settings(cfg.get("eval", {}).get("gold"))
    if opts is None:
        return None
    pair = [str(cfg.data.src_lang), str(cfg.data.tgt_lang)]
    if sorted(pair) != sorted(opts["link_langs"]):
        raise ValueError(f"eval.gold.link_langs={opts['link_langs']} but the model translates {pair[0]}->{pair[1]}: "
                         "the gold set must be of the same language pair (either direction)")
    if not Path(str(opts["links"])).is_file():
        raise FileNotFoundError(f"eval.gold.links={opts['links']}: no such file (the gold alignments)")
    text = _sentences(opts)
    sources, targets = text[pair[0]], text[pair[1]]
    lengths = [(len(s.split()), len(t.split())) for s, t in zip(sources, targets)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", AlignmentWarning)
        gold = read_alignments(opts["links"], opts["format"], one_based=opts["one_based"],
                               target_first=pair != opts["link_langs"], lengths=lengths)
    if caught and not quiet:
        log.warning("eval.gold: %d gold link(s) outside the sentences dropped (as nmt.aer with src= and tgt= "
                    "does); first: %s", len(caught), caught[0].message)
    origin = position_warning(f"eval.gold.links={opts['links']}", gold.possible, gold.null_links, opts["one_based"],
                              "eval.gold.one_based")
    if origin and not quiet:
        log.warning("%s", origin)
    prepare = aligner_input(cfg.data, opts["lowercase"])
    extract = {key: opts[key] for key in ("method", "threshold", "shift", "temperature")}
    return GoldSet(prepare(sources), prepare(targets), gold, lengths, extract, int(opts["batch_size"]))


def _sentences(opts: dict) -> dict[str, list[str]]:
    """The gold sentences per language, from ``paths`` or from the ``bitext`` (sides in ``link_langs`` order).

    Raises:
        ValueError: a language of ``link_langs`` without a file, different line counts, a bitext line without
            ``|||``; FileNotFoundError / TextFileError as :func:`nmt.data.textio.read_lines`.
    """
    first, second = opts["link_langs"]
    if opts["bitext"] is not None:
        text: dict[str, list[str]] = {first: [], second: []}
        for number, line in enumerate(read_lines(opts["bitext"], "eval.gold.bitext"), start=1):
            if "|||" not in line:
                raise ValueError(f"eval.gold.bitext={opts['bitext']}: line {number} is not 'source ||| target'")
            left, right = line.split("|||", 1)
            text[first].append(left.strip())
            text[second].append(right.strip())
        return text
    paths = dict(opts["paths"])
    if sorted(paths) != sorted(opts["link_langs"]):
        raise ValueError(f"eval.gold.paths names {sorted(paths)}; it needs one file for each of link_langs "
                         f"{opts['link_langs']}")
    text = {lang: read_lines(paths[lang], f"eval.gold.paths.{lang}") for lang in (first, second)}
    if len(text[first]) != len(text[second]):
        raise ValueError(f"eval.gold.paths: {paths[first]} has {len(text[first])} lines but {paths[second]} has "
                         f"{len(text[second])}")
    return text
