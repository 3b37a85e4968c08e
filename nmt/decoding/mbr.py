"""Minimum Bayes risk (MBR) selection over the n-best list of a beam search.

The beam returns the K hypotheses H of highest model score; MBR decoding (Kumar and Byrne 2004, eq. 2;
over an n-best list as in Ehling et al. 2007) then outputs the one with the highest expected utility under the
model's distribution renormalized over the list, instead of the single most probable one:

    ŷ = argmax_{h ∈ H}  Σ_{y ∈ H} P(y | x) · u(h, y),     P(y | x) = exp(log p(y|x) / T) / Σ_{y' ∈ H} exp(log p(y'|x) / T)

with log p(y|x) the hypothesis' log-probability in nats (the length and coverage penalties left out: they are
ranking heuristics, not probabilities) and T a temperature (1: the model's own distribution; larger values
flatten it towards a uniform average, as sampling-based MBR does; Eikema and Aziz 2020). The utility u(h, y)
is sentence BLEU of h with y as its reference, computed with sacreBLEU's own tokenizer, n-gram counts and BLEU
formula (13a tokenization, exponential smoothing, effective order: sacreBLEU's ``sentence_bleu``), from counts
extracted once per hypothesis rather than once per pair. The candidate that agrees most with the others, weighted
by their probability, wins: a consensus translation, which corpus BLEU tends to reward.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
from sacrebleu.metrics.bleu import BLEU
from sacrebleu.metrics.helpers import extract_all_word_ngrams

UTILITIES = ("bleu",)


class SentenceBleu:
    """Sentence BLEU between every pair of a list of hypotheses, as sacreBLEU's
    ``BLEU(effective_order=True).sentence_score(h, [y])`` computes it (cased, 13a, exponential smoothing)."""

    def __init__(self):
        self.bleu = BLEU(effective_order=True)

    def _counts(self, text: str) -> tuple[Counter, int]:
        """The n-gram counts (orders 1-4) and the length in tokens of one segment, tokenized as sacreBLEU does."""
        return extract_all_word_ngrams(self.bleu.tokenizer(text.rstrip()), 1, self.bleu.max_ngram_order)

    def pairwise(self, texts: list[str]) -> np.ndarray:
        """``texts`` (N strings) -> ``[N, N]`` float64, entry ``[i, j]`` = BLEU of ``texts[i]`` (hypothesis) with
        ``texts[j]`` as its reference, on sacreBLEU's 0-100 scale (100 on the diagonal of non-empty texts). An
        empty hypothesis scores 0 against every reference, an empty one included, as sacreBLEU's
        ``sentence_score`` does: an empty output never wins by agreeing with itself."""
        counts = [self._counts(t) for t in texts]
        return np.array([[self._score(*hyp, *ref) for ref in counts] for hyp in counts]).reshape(len(texts), -1)

    def _score(self, hyp: Counter, hyp_len: int, ref: Counter, ref_len: int) -> float:
        """Sentence BLEU (0-100) of one hypothesis against one reference from their n-gram counts and lengths
        in tokens (:meth:`_counts`)."""
        if hyp_len == 0:
            return 0.0
        correct, total = [0] * self.bleu.max_ngram_order, [0] * self.bleu.max_ngram_order
        for ngram, count in hyp.items():
            total[len(ngram) - 1] += count
        for ngram, count in (hyp & ref).items():
            correct[len(ngram) - 1] += count
        return BLEU.compute_bleu(correct, total, hyp_len, ref_len, smooth_method=self.bleu.smooth_method,
                                 smooth_value=self.bleu.smooth_value, effective_order=True,
                                 max_ngram_order=self.bleu.max_ngram_order).score


def expected_utility(texts: list[str], log_probs: list[float], temperature: float = 1.0,
                     utility: SentenceBleu | None = None) -> np.ndarray:
    """The expected utility of each of N hypotheses against all N (itself included), ``[N]`` on the utility's
    0-100 scale: ``Σ_j P_j u(h_i, y_j)`` with ``P = softmax(log_probs / temperature)`` (this module's
    docstring; Kumar and Byrne 2004, eq. 2).

    Args:
        texts: the N detokenized hypotheses of one source sentence.
        log_probs: their log-probabilities in nats, ``[N]``.
        temperature: T > 0 (``math.inf``: uniform weights).
        utility: a :class:`SentenceBleu` to reuse (one is made when None).

    Raises:
        ValueError: for N = 0, a length mismatch or a temperature that is not a number > 0.
    """
    if not texts or len(texts) != len(log_probs):
        raise ValueError(f"need one log-probability per hypothesis (at least one); got {len(texts)} hypotheses "
                         f"and {len(log_probs)} log-probabilities")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"the MBR temperature must be > 0, got {temperature}")
    log_probs = np.asarray(log_probs, dtype=np.float64)  # [N]
    with np.errstate(over="ignore"):  # a tiny T sends all but the most probable to -inf: weight 0
        logits = np.zeros(len(texts)) if math.isinf(temperature) else (log_probs - log_probs.max()) / temperature
    weights = np.exp(logits)
    weights /= weights.sum()  # [N]
    return (utility or SentenceBleu()).pairwise(texts) @ weights  # [N]
