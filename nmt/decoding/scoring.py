"""Scores: corpus BLEU and chrF with their sacreBLEU signatures, and the greedy validation BLEU of a model.
"""

from __future__ import annotations

import functools
import logging
import unicodedata

import sacrebleu

from nmt.data.tokenizer import Tokenizer
from nmt.decoding.translation import translate

log = logging.getLogger(__name__)


class _Once(logging.Filter):
    """Lets each distinct message of a logger through once per process: sacreBLEU's warning about text that looks
    tokenized would otherwise repeat for every split, decoder and casing of one evaluation."""

    def __init__(self):
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message in self.seen:
            return False
        self.seen.add(message)
        return True


if not any(isinstance(f, _Once) for f in logging.getLogger("sacrebleu").filters):
    logging.getLogger("sacrebleu").addFilter(_Once())


# target languages whose text has no spaces between words, and the sacreBLEU tokenizer that scores them
SCRIPT_TOKENIZERS = {"zh": "zh", "ja": "ja-mecab", "ko": "ko-mecab"}
CHARACTER_LEVEL = {"th", "lo", "my", "km", "bo", "dz"}  # no word tokenizer in sacreBLEU: characters


@functools.cache  # one warning per language
def bleu_tokenizer(target_lang: str | None) -> str:
    """The sacreBLEU tokenizer for text in ``target_lang`` (an ISO 639-1 code; ``zh-CN`` or ``pt_BR`` read as
    ``zh``, ``pt``): ``zh`` for Chinese, ``ja-mecab`` / ``ko-mecab`` for Japanese / Korean (``char`` when their
    MeCab packages are not installed: ``pip install "sacrebleu[ja,ko]"``), ``char`` for Thai, Lao, Burmese,
    Khmer, Tibetan and Dzongkha, else sacreBLEU's default ``13a``, which splits on spaces and punctuation and
    would score every unspaced sentence as one word."""
    lang = (target_lang or "").replace("_", "-").split("-")[0].lower()
    name = SCRIPT_TOKENIZERS.get(lang, "char" if lang in CHARACTER_LEVEL else "13a")
    if name.endswith("mecab"):
        try:
            sacrebleu.BLEU(tokenize=name)
        except (ImportError, RuntimeError, OSError):
            log.warning("BLEU for %s needs MeCab (pip install \"sacrebleu[ja,ko]\"); scoring characters instead "
                        "(tok:char in the signature)", target_lang)
            return "char"
    return name


def score(hypotheses: list[str], references: list[str], target_lang: str | None = None,
          warn: bool = True) -> dict:
    """Corpus BLEU and chrF (sacreBLEU defaults: cased, chrF2; BLEU tokenized for ``target_lang`` by
    :func:`bleu_tokenizer`) with their signatures, and ``bleu_lowercase`` (sacreBLEU ``lowercase=True``,
    ``case:lc`` in its signature), the figure comparable with papers that report lowercased BLEU.

    Both sides are scored in Unicode NFC (translations come out composed; a decomposed reference would lose
    points for the same text): ``unicode`` says so, and with ``warn`` a log line counts the references that
    changed and the empty reference lines (``empty_references``), and sacreBLEU warns about text that looks
    tokenized; without ``warn`` (validation) none of these is logged.

    Raises:
        ValueError: if the line counts differ (sacreBLEU's Python API does not check this), with both counts.
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references: "
                         "BLEU needs exactly one hypothesis per reference line")
    nfc = [unicodedata.normalize("NFC", r) for r in references]
    hypotheses = [unicodedata.normalize("NFC", h) for h in hypotheses]
    empty = sum(not r.strip() for r in nfc)
    if warn and (changed := sum(a != b for a, b in zip(nfc, references))):
        log.warning("%d reference line(s) were not in Unicode NFC: scored after NFC normalization", changed)
    if warn and empty:
        log.warning("%d reference line(s) are empty: their hypotheses score only as brevity and false matches",
                    empty)
    tokenize = bleu_tokenizer(target_lang)
    # without warn (validation): no sacreBLEU warning about tokenized text either, which would repeat at every
    # validation of a model trained on tokenized text (data.normalize); the scores and signatures are the same
    bleu, chrf = sacrebleu.BLEU(tokenize=tokenize, force=not warn), sacrebleu.CHRF()
    bleu_lc = sacrebleu.BLEU(lowercase=True, tokenize=tokenize, force=not warn)
    b = bleu.corpus_score(hypotheses, [nfc])
    c = chrf.corpus_score(hypotheses, [nfc])
    lc = bleu_lc.corpus_score(hypotheses, [nfc])
    return {"bleu": round(b.score, 2), "chrf": round(c.score, 2), "bleu_signature": str(bleu.get_signature()),
            "chrf_signature": str(chrf.get_signature()), "bleu_detail": str(b), "num_sentences": len(hypotheses),
            "bleu_lowercase": round(lc.score, 2), "bleu_lowercase_signature": str(bleu_lc.get_signature()),
            "unicode": "NFC", "empty_references": empty}


def greedy_bleu(model, src_tok: Tokenizer, tgt_tok: Tokenizer, sources: list[str], references: list[str], decode,
                device, target_lang: str | None = None) -> float:
    """Corpus BLEU (cased, tokenized for ``target_lang``; see :func:`score`) of the greedy translations of
    ``sources`` against ``references``: the validation criterion of training. ``decode``: the decoding config (batch size, maximum length).

    Raises:
        ValueError: as :func:`score`, if the line counts differ; a ``decode`` setting out of range
            (:func:`check_decoding`).
    """
    hyps = translate(model, src_tok, tgt_tok, sources, decode, device, beam_size=1)
    return score([h.text for h in hyps], references, target_lang, warn=False)["bleu"]
