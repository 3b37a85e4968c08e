"""Scores: corpus BLEU and chrF with their sacreBLEU signatures, and the greedy validation BLEU of a model.
"""

from __future__ import annotations

import logging

import sacrebleu

from nmt.data.tokenizer import Tokenizer
from nmt.decoding.translation import translate

log = logging.getLogger(__name__)


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
