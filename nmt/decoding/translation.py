"""Translating sentences: source text -> subword ids -> greedy or beam search -> :class:`Translation` (hypothesis,
tokens, alignment matrix, score), one per input line, n-best lists and their MBR order.

An empty or whitespace-only input line gives an empty hypothesis, a ``[0, 0]`` matrix with empty token lists.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import torch

from nmt.data.batches import collate
from nmt.data.tokenizer import Tokenizer
from nmt.decoding.hypothesis import max_lengths
from nmt.decoding.mbr import SentenceBleu, expected_utility
from nmt.decoding.options import check_decoding, mbr_settings
from nmt.decoding.search import beam, greedy
from nmt.models.precision import inference_context

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Translation:
    """One translated line: text (detokenized), source/hypothesis pieces (with ``</s>``), alignment
    ``[len(hyp_pieces), len(src_pieces)]`` float32, the model score (log-prob / length penalty + coverage penalty), the
    log-probability (nats, summed over the hypothesis pieces), with MBR decoding (``decode.mbr``) the expected
    utility that ranked it (:func:`nmt.decoding.mbr.expected_utility`, 0-100; None otherwise) and, for a multi-head
    attention model (:mod:`nmt.models.multihead`), every head's alignment ``[heads, len(hyp_pieces),
    len(src_pieces)]`` float32, whose mean over heads is ``alignment`` (None for other models)."""

    text: str
    src_pieces: list[str]
    hyp_pieces: list[str]
    alignment: np.ndarray
    score: float
    log_prob: float = 0.0
    expected_utility: float | None = None
    heads: np.ndarray | None = None


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


def translate_nbest(model, src_tok: Tokenizer, tgt_tok: Tokenizer, sentences: list[str], decode,
                    device: str | torch.device = "cpu", beam_size: int | None = None,
                    n_best: int = 1) -> list[list[Translation]]:
    """As :func:`translate`, but the ``n_best`` best hypotheses of each line, best first (each with its own
    alignment and scores). With ``decode.mbr`` (minimum Bayes risk decoding, :mod:`nmt.decoding.mbr`) the beam's
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
            log.warning("line %d: %d subwords, only its first %d translated (decode.max_src_len=%d: raise it to "
                        "translate the whole line)", i + 1, len(ids[k]), decode.max_src_len, decode.max_src_len)
            ids[k] = ids[k][: decode.max_src_len - 1] + ids[k][-1:]
    order = sorted(range(len(todo)), key=lambda k: len(ids[k]))
    coverage = decode.get("coverage_penalty", 0.0)  # absent from the configs of runs before it existed
    mbr = mbr_settings(decode, beam_size)["mbr"]  # the one rule for when MBR applies (not to greedy search)
    utility = SentenceBleu() if mbr else None
    candidates = beam_size if mbr else n_best  # MBR chooses among all the beam's hypotheses
    with inference_context(device):
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
                                     h.alignment.numpy().astype(np.float32), h.score, h.log_prob,
                                     heads=None if h.heads is None else h.heads.numpy().astype(np.float32))
                         for h in nbest]
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
        utility: the pairwise utility (:class:`nmt.decoding.mbr.SentenceBleu`), shared by all lines.

    Raises:
        ValueError: from :func:`nmt.decoding.mbr.expected_utility`, for an empty block or a temperature not > 0.
    """
    gains = expected_utility([t.text for t in block], [t.log_prob for t in block], temperature, utility)
    order = sorted(range(len(block)), key=lambda i: -gains[i])
    return [dataclasses.replace(block[i], expected_utility=float(gains[i])) for i in order]


def at_length_limit(translation: Translation, decode) -> bool:
    """Whether a translation stopped at the output length limit ``max_len_a * S + max_len_b`` (S: its source
    subwords with ``</s>``, after any cut to ``max_src_len``; the limit counts ``</s>``), where ``</s>`` is forced,
    so its end may be cut off."""
    if not translation.src_pieces:
        return False
    src_mask = torch.ones(1, len(translation.src_pieces), dtype=torch.bool)
    return len(translation.hyp_pieces) >= int(max_lengths(src_mask, decode.max_len_a, decode.max_len_b)[0])
