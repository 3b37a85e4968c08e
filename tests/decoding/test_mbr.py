"""Minimum Bayes risk selection (nmt.decoding.mbr): the pairwise utility is sacreBLEU's sentence BLEU, and the expected
utility picks the consensus hypothesis, or the most probable one as the temperature goes to 0."""

from __future__ import annotations

import gzip
import math

import numpy as np
import pytest
from sacrebleu.metrics.bleu import BLEU

from nmt.decoding.mbr import SentenceBleu, expected_utility


@pytest.fixture(scope="module")
def english(multi30k_dir):
    with gzip.open(multi30k_dir / "val.en.gz", "rt", encoding="utf-8") as handle:
        return handle.read().split("\n")[:40]


def test_pairwise_equals_sacrebleu_sentence_bleu(english):
    """Every pair of 20 real Multi30k sentences, 20 near-copies of them (so that high n-gram orders match too)
    and an empty text scores exactly what sacreBLEU's sentence_score gives, with the reference in the column."""
    texts = (english[:20] + [s.replace(" a ", " the ", 1) for s in english[:10]]
             + [s.rsplit(" ", 2)[0] for s in english[10:20]] + [""])
    scores = SentenceBleu().pairwise(texts)
    bleu = BLEU(effective_order=True)
    expected = np.array([[bleu.sentence_score(h, [r]).score for r in texts] for h in texts])
    assert scores.shape == (len(texts), len(texts))
    np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-9)
    np.testing.assert_allclose(np.diag(scores)[:-1], 100.0)
    assert not np.allclose(scores, scores.T)  # BLEU is not symmetric: the brevity penalty looks at the reference


def test_an_empty_hypothesis_never_wins():
    """An empty text scores 0 against everything, itself included (sacreBLEU's sentence_score), so even with
    most of the probability it loses to any non-empty hypothesis."""
    scores = SentenceBleu().pairwise(["", "", "A dog runs ."])
    assert (scores[:2] == 0.0).all() and scores[2, 0] == 0.0 and scores[2, 2] == pytest.approx(100.0)
    gains = expected_utility(["", "A dog runs ."], [-0.1, -5.0])
    assert gains[0] == 0.0 and gains[1] > 0.0


def test_consensus_wins_and_a_cold_temperature_gives_the_most_probable():
    """Three variants of one translation and an outlier that the model likes best: with uniform weights the
    variant with the highest mean BLEU against all four wins, at T = 1 the most probable variant (still not the
    outlier); as T -> 0 the weights become one-hot on the outlier, whose utility against itself is 100."""
    texts = ["A man in a blue shirt is standing on a ladder .",
             "A man in a blue shirt stands on a ladder .",
             "A man in a blue shirt is on a ladder .",
             "Two dogs play in the snow ."]
    log_probs = [-3.0, -3.2, -3.4, -2.5]
    uniform = expected_utility(texts, log_probs, math.inf)
    np.testing.assert_allclose(uniform, SentenceBleu().pairwise(texts).mean(axis=1))
    assert int(np.argmax(uniform)) == 2  # the shortest variant: its n-grams are in both others
    # at T = 1 the weights lean to the more probable texts: variant 0, still not the outlier
    assert int(np.argmax(expected_utility(texts, log_probs, 1.0))) == 0
    cold = expected_utility(texts, log_probs, 0.01)
    assert int(np.argmax(cold)) == 3 and cold[3] == pytest.approx(100.0)
    frozen = expected_utility(texts, log_probs, 1e-320)  # log_probs / T would overflow: still the limit, no nan
    assert np.isfinite(frozen).all() and frozen[3] == pytest.approx(100.0)


@pytest.mark.parametrize("texts,log_probs,temperature", [([], [], 1.0), (["a"], [-1.0, -2.0], 1.0),
                                                         (["a"], [-1.0], 0.0), (["a"], [-1.0], float("nan")),
                                                         (["a"], [-1.0], "2")])
def test_invalid_arguments_raise(texts, log_probs, temperature):
    with pytest.raises(ValueError):
        expected_utility(texts, log_probs, temperature)
