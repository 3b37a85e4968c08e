"""Translate sentences, score them with sacreBLEU, and write the evaluation artifacts.

Artifacts for a prefix ``P`` (for example ``eval/test``), as in design.md §2:
``P.hyp`` (one detokenized hypothesis per input line), ``P.scores.json`` (BLEU and chrF with their sacreBLEU
signatures), ``P.alignments.npz`` (one float32 ``[len(hypothesis_tokens), len(source_tokens)]`` array per line,
key = 0-based line index), ``P.alignments.jsonl`` (the tokens of each matrix) and ``P.align`` (word-level
hard alignments, Pharaoh ``i-j``). An empty or whitespace-only input line gives an empty hypothesis, a
``[0, 0]`` matrix with empty token lists, and an empty alignment line.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import math
from pathlib import Path

import numpy as np
import sacrebleu
import torch

from nmt.alignment import pharaoh_line
from nmt.data import collate
from nmt.mbr import UTILITIES, SentenceBleu, expected_utility
from nmt.search import beam, greedy, max_lengths
from nmt.textio import atomic_write
from nmt.tokenizer import Tokenizer

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Translation:
    """One translated line: text (detokenized), source/hypothesis pieces (with ``</s>``), alignment
    ``[len(hyp_pieces), len(src_pieces)]`` float32, the model score (log-prob / length penalty + coverage penalty), the
    log-probability (nats, summed over the hypothesis pieces) and, with MBR decoding (``decode.mbr``), the expected
    utility that ranked it (:func:`nmt.mbr.expected_utility`, 0-100; None otherwise)."""

    text: str
    src_pieces: list[str]
    hyp_pieces: list[str]
    alignment: np.ndarray
    score: float
    log_prob: float = 0.0
    expected_utility: float | None = None


EMPTY = Translation("", [], [], np.zeros((0, 0), dtype=np.float32), 0.0)


def translate(model, src_tok: Tokenizer, tgt_tok: Tokenizer, sentences: list[str], decode,
              device: str | torch.device = "cpu", beam_size: int | None = None) -> list[Translation]:
    """Translate ``sentences`` in batches sorted by length; the result is in input order, one per line.

    Args:
        decode: a node with ``beam_size`` (1 = greedy), ``length_penalty``, ``max_len_a``, ``max_len_b``,
            ``batch_size`` (sentences per batch) and ``max_src_len`` (sources longer than this many subwords are
            cut to it, with a warning; the alignment then covers the kept part).
        beam_size: overrides ``decode.beam_size`` when given.

    Raises:
        ValueError: a ``decode`` setting out of range (:func:`check_decoding`), naming it.
    """
    return [nbest[0] for nbest in translate_nbest(model, src_tok, tgt_tok, sentences, decode, device, beam_size)]


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_decoding(beam_size, n_best: int = 1, key: str = "decode.beam_size", decode=None) -> None:
    """Check the decoding settings before any work: ``beam_size`` (the setting ``key``) must be a whole number
    >= 1, ``n_best`` a whole number in ``[1, beam_size]`` (a beam of K keeps K hypotheses) and, when the ``decode``
    node is given, ``batch_size`` a whole number >= 1, ``max_src_len`` a whole number >= 2 (a subword and
    ``</s>``), ``length_penalty``, ``coverage_penalty`` (when present: configurations saved before it existed lack
    it) and ``max_len_a`` numbers >= 0, ``max_len_b`` a number with ``2 * max_len_a + max_len_b >= 2`` (the
    shortest source, a subword and ``</s>``, leaves room for a subword and ``</s>``), ``mbr`` null or a utility of
    :mod:`nmt.mbr` and ``mbr_temperature`` a number > 0 (infinity allowed) when present.

    Raises:
        ValueError: naming the first setting that is out of range.
    """
    if not _whole(beam_size) or beam_size < 1:
        raise ValueError(f"{key}={beam_size} must be a whole number >= 1 (1 = greedy search)")
    if not _whole(n_best) or not 1 <= n_best <= beam_size:
        raise ValueError(f"decode.n_best={n_best} must be a whole number between 1 and the beam size ({beam_size}): "
                         "a beam of K keeps K hypotheses; raise beam_size")
    if decode is None:
        return
    rules = {"batch_size": (_whole, 1, "a whole number >= 1 (sentences per batch)"),
             "max_src_len": (_whole, 2, "a whole number >= 2 (subwords kept of a source, </s> included)"),
             "length_penalty": (_number, 0, "a number >= 0 (GNMT alpha; 0 = raw log-probability)"),
             "coverage_penalty": (_number, 0, "a number >= 0 (GNMT beta; 0 = off)"),
             "max_len_a": (_number, 0, "a number >= 0 (output limit: max_len_a * source length + max_len_b)"),
             "max_len_b": (_number, None, "a number (output limit: max_len_a * source length + max_len_b)")}
    for name, (kind, least, what) in rules.items():
        if name == "coverage_penalty" and name not in decode:
            continue  # a run configured before decode.coverage_penalty existed: off (null is refused below)
        value = decode.get(name)
        if not kind(value) or (least is not None and value < least):
            raise ValueError(f"decode.{name}={value} must be {what}")
    mbr = decode.get("mbr")  # absent from the configs of runs before it existed: off
    if mbr is not None and mbr not in UTILITIES:
        raise ValueError(f"decode.mbr={mbr} must be null (off) or {' or '.join(UTILITIES)} (the utility of "
                         "minimum Bayes risk decoding)")
    temperature = decode.get("mbr_temperature", 1.0)
    if not (isinstance(temperature, (int, float)) and not isinstance(temperature, bool)) or not temperature > 0:
        raise ValueError(f"decode.mbr_temperature={temperature} must be a number > 0 (1 = the model's distribution "
                         "over the n-best list; inf = uniform weights)")
    if 2 * decode.max_len_a + decode.max_len_b < 2:  # the shortest source is one subword and </s>
        raise ValueError(f"decode.max_len_a={decode.max_len_a} with decode.max_len_b={decode.max_len_b} leaves no "
                         "room for a translation: max_len_a * source length + max_len_b (which counts </s>) must "
                         "reach 2 for a source of 2 subwords")


def translate_nbest(model, src_tok: Tokenizer, tgt_tok: Tokenizer, sentences: list[str], decode,
                    device: str | torch.device = "cpu", beam_size: int | None = None,
                    n_best: int = 1) -> list[list[Translation]]:
    """As :func:`translate`, but the ``n_best`` best hypotheses of each line, best first (each with its own
    alignment and scores). With ``decode.mbr`` (minimum Bayes risk decoding, :mod:`nmt.mbr`) the beam's
    ``beam size`` hypotheses are ranked by their expected utility against each other instead of by the model
    score, and the first ``n_best`` of that ranking are returned (greedy search has one hypothesis: MBR changes
    nothing). An empty input line (also one of only spaces or of characters that SentencePiece's
    normalization removes, such as U+200B or U+FEFF) gets one empty translation.

    Raises:
        ValueError: when the beam size is below 1, ``n_best`` is not in ``[1, beam size]`` (greedy search has
            one hypothesis), or another ``decode`` setting is out of range (:func:`check_decoding`).
    """
    check_decoding(decode.beam_size if beam_size is None else beam_size, n_best,
                   "decode.beam_size" if beam_size is None else "beam_size", decode)
    beam_size = decode.beam_size if beam_size is None else beam_size
    model.eval()
    results: list[list[Translation]] = [[EMPTY]] * len(sentences)
    todo = [i for i, s in enumerate(sentences) if s.strip()]
    ids = src_tok.encode_batch([sentences[i] for i in todo])
    # a line of characters that SentencePiece's normalization drops (U+200B, U+200E, U+FEFF) encodes to </s>
    # alone: it is an empty line too, not a prompt for the model to invent a sentence
    todo, ids = [i for i, x in zip(todo, ids) if len(x) > 1], [x for x in ids if len(x) > 1]
    for k, i in enumerate(todo):
        if len(ids[k]) > decode.max_src_len:
            log.warning("line %d: %d subwords, cut to max_src_len=%d", i + 1, len(ids[k]), decode.max_src_len)
            ids[k] = ids[k][: decode.max_src_len - 1] + ids[k][-1:]
    order = sorted(range(len(todo)), key=lambda k: len(ids[k]))
    coverage = decode.get("coverage_penalty", 0.0)  # absent from the configs of runs before it existed
    mbr = mbr_settings(decode, beam_size)["mbr"]  # the one rule for when MBR applies (not to greedy search)
    utility = SentenceBleu() if mbr else None
    candidates = beam_size if mbr else n_best  # MBR chooses among all the beam's hypotheses
    with torch.inference_mode():
        gate_table = model.decoder.input_gate_table() if todo else None  # [V, 3H], shared by all batches
        for start in range(0, len(order), decode.batch_size):
            chunk = order[start : start + decode.batch_size]
            batch = collate([ids[k] for k in chunk], None, chunk).to(device)
            if beam_size == 1:
                hyps = [[hyp] for hyp in greedy(model, batch.src, batch.src_mask, decode.max_len_a,
                                                decode.max_len_b, decode.length_penalty, gate_table, coverage)]
            else:
                hyps = beam(model, batch.src, batch.src_mask, beam_size, decode.length_penalty, decode.max_len_a,
                            decode.max_len_b, n_best=candidates, gate_table=gate_table,
                            coverage_penalty_beta=coverage)
            for k, nbest in zip(chunk, hyps):
                src_pieces = src_tok.pieces(ids[k])
                block = [Translation(tgt_tok.decode(h.ids), src_pieces, tgt_tok.pieces(h.ids),
                                     h.alignment.numpy().astype(np.float32), h.score, h.log_prob) for h in nbest]
                if utility is not None:
                    block = mbr_rank(block, decode.get("mbr_temperature", 1.0), utility)
                results[todo[k]] = block[:n_best]
    return results


def mbr_rank(block: list[Translation], temperature: float, utility: SentenceBleu) -> list[Translation]:
    """The hypotheses of one line ranked by expected utility, highest first, each carrying it in
    ``expected_utility`` (0-100); ties keep the beam's order. Each keeps its own text, pieces, alignment and scores.

    Args:
        block: the N >= 1 hypotheses of one source line (the beam's n-best list).
        temperature: T > 0 of the weights ``softmax(log_prob / T)`` (``math.inf``: uniform).
        utility: the pairwise utility (:class:`nmt.mbr.SentenceBleu`), shared by all lines.

    Raises:
        ValueError: from :func:`nmt.mbr.expected_utility`, for an empty block or a temperature not > 0.
    """
    gains = expected_utility([t.text for t in block], [t.log_prob for t in block], temperature, utility)
    order = sorted(range(len(block)), key=lambda i: -gains[i])
    return [dataclasses.replace(block[i], expected_utility=float(gains[i])) for i in order]


def mbr_settings(decode, beam_size: int) -> dict:
    """What a decoding with ``beam_size`` did about MBR (``decode.mbr``), for scores files: ``{"mbr": None,
    "mbr_temperature": None}`` when it was off (``decode.mbr`` null, or greedy search, which has one hypothesis),
    else the utility and the temperature, ``"inf"`` for uniform weights (JSON has no infinity)."""
    mbr = decode.get("mbr") if beam_size > 1 else None  # absent from the configs of runs before it existed
    if mbr is None:
        return {"mbr": None, "mbr_temperature": None}
    temperature = float(decode.get("mbr_temperature", 1.0))
    return {"mbr": mbr, "mbr_temperature": temperature if math.isfinite(temperature) else "inf"}


def decoding_settings(decode, beam_size: int) -> dict:
    """The decoding settings that produced a scores file's translations, for its JSON: ``beam_size``,
    ``length_penalty`` (GNMT alpha), ``coverage_penalty`` (beta, 0.0 when absent from an older config) and the
    two :func:`mbr_settings` keys. The final evaluation of training and ``translate.py reference=`` both write
    them, so a score can always be traced to how it was decoded."""
    return {"beam_size": beam_size, "length_penalty": decode.length_penalty,
            "coverage_penalty": decode.get("coverage_penalty", 0.0), **mbr_settings(decode, beam_size)}


def at_length_limit(translation: Translation, decode) -> bool:
    """Whether a translation stopped at the output length limit ``max_len_a * S + max_len_b`` (S: its source
    subwords with ``</s>``, after any cut to ``max_src_len``; the limit counts ``</s>``), where ``</s>`` is forced,
    so its end may be cut off."""
    if not translation.src_pieces:
        return False
    src_mask = torch.ones(1, len(translation.src_pieces), dtype=torch.bool)
    return len(translation.hyp_pieces) >= int(max_lengths(src_mask, decode.max_len_a, decode.max_len_b)[0])


def nbest_lines(nbest: list[list[Translation]]) -> str:
    """An n-best list in the Moses format, one block of lines per input line (0-based index ``i``, best first):
    ``i ||| hypothesis ||| log_prob= L length= N ||| score``, with L the log-probability in nats, N the
    hypothesis length in target subwords (``</s>`` included) and score = L / length penalty + coverage penalty
    (what the beam ranks by). With MBR decoding a feature ``mbr= U`` (the expected utility that ranked the block)
    follows the length. An empty input line has one line with an empty hypothesis."""
    return "".join(f"{i} ||| {t.text} ||| log_prob= {t.log_prob:.4f} length= {len(t.hyp_pieces)}"
                   + ("" if t.expected_utility is None else f" mbr= {t.expected_utility:.4f}")
                   + f" ||| {t.score:.4f}\n" for i, block in enumerate(nbest) for t in block)


def score(hypotheses: list[str], references: list[str]) -> dict:
    """Corpus BLEU and chrF (sacreBLEU defaults: cased, 13a tokenization; chrF2) with their signatures, and
    ``bleu_lowercase`` (sacreBLEU ``lowercase=True``, ``case:lc`` in its signature), the figure comparable with
    papers that report lowercased BLEU.

    Raises:
        ValueError: if the line counts differ (sacreBLEU's Python API does not check this), with both counts.
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references: "
                         "BLEU needs exactly one hypothesis per reference line")
    bleu, bleu_lc, chrf = sacrebleu.BLEU(), sacrebleu.BLEU(lowercase=True), sacrebleu.CHRF()
    b = bleu.corpus_score(hypotheses, [references])
    c = chrf.corpus_score(hypotheses, [references])
    lc = bleu_lc.corpus_score(hypotheses, [references])
    return {"bleu": round(b.score, 2), "chrf": round(c.score, 2), "bleu_signature": str(bleu.get_signature()),
            "chrf_signature": str(chrf.get_signature()), "bleu_detail": str(b), "num_sentences": len(hypotheses),
            "bleu_lowercase": round(lc.score, 2), "bleu_lowercase_signature": str(bleu_lc.get_signature())}


def greedy_bleu(model, src_tok: Tokenizer, tgt_tok: Tokenizer, sources: list[str], references: list[str], decode,
                device) -> float:
    """Corpus BLEU (sacreBLEU default, cased) of the greedy translations of ``sources`` against ``references``:
    the validation criterion of training. ``decode``: the decoding config (batch size, maximum length).

    Raises:
        ValueError: as :func:`score`, if the line counts differ; a ``decode`` setting out of range
            (:func:`check_decoding`).
    """
    hyps = translate(model, src_tok, tgt_tok, sources, decode, device, beam_size=1)
    return score([h.text for h in hyps], references)["bleu"]


def save_results(prefix: str | Path, translations: list[Translation], scores: dict | None = None) -> None:
    """Write ``prefix.hyp``, ``.alignments.npz``, ``.alignments.jsonl``, ``.align`` and (with scores)
    ``.scores.json``; every file is written atomically."""
    prefix = str(prefix)
    atomic_write(prefix + ".hyp", "".join(t.text + "\n" for t in translations))
    save_alignments(prefix + ".alignments.npz", translations)
    atomic_write(prefix + ".align", "".join(
        (pharaoh_line(t.alignment, t.src_pieces, t.hyp_pieces) if t.hyp_pieces else "") + "\n"
        for t in translations))
    if scores is not None:
        atomic_write(prefix + ".scores.json", json.dumps(scores, indent=2, ensure_ascii=False) + "\n")


def check_npz_path(path: str | Path, key: str = "alignments") -> None:
    """Check that the alignments file ``path`` (the setting ``key``) ends in ``.npz``: the tokens of the matrices
    go to the ``.jsonl`` beside it, where :func:`nmt.plot.plot_npz` looks for them.

    Raises:
        ValueError: naming the setting, for another suffix.
    """
    if not str(path).endswith(".npz"):
        raise ValueError(f"{key}={path} must end in .npz (its tokens go to the .jsonl beside it)")


def save_alignments(npz_path: str | Path, translations: list[Translation]) -> None:
    """The alignment matrices (``npz_path``) and their tokens (same path with ``.jsonl``), atomically.

    Raises:
        ValueError: when ``npz_path`` does not end in ``.npz`` (the tokens file is named after it, and
            :func:`nmt.plot.plot_npz` looks for it there).
    """
    check_npz_path(npz_path)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **{str(i): t.alignment for i, t in enumerate(translations)})
    atomic_write(npz_path, buffer.getvalue())
    jsonl = "".join(json.dumps({"index": i, "source_tokens": t.src_pieces, "hypothesis_tokens": t.hyp_pieces},
                               ensure_ascii=False) + "\n" for i, t in enumerate(translations))
    atomic_write(Path(npz_path).with_suffix(".jsonl"), jsonl)
