"""The analyses people run compare-mt for (Neubig et al. 2019), on the test hypotheses of several runs:
corpus BLEU by source-length bucket, word F-measure by the word's frequency in the training data, and the
sentences where the runs disagree most.

Words are the tokens of sacreBLEU's BLEU tokenizer (``13a`` unless the target language needs another), cased,
as BLEU counts them; source lengths are whitespace words.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF

LENGTH_EDGES = (10, 20, 30, 40, 50, 60)  # compare-mt's default sentence-length buckets
FREQUENCY_EDGES = (1, 2, 3, 4, 5, 10, 100, 1000)  # compare-mt's default frequency buckets


def bucket_names(edges: tuple[int, ...]) -> list[str]:
    """Names of the buckets ``[0, e1)``, ``[e1, e2)``, ..., ``[e_last, inf)``: ``"<10"``, ``"10-19"``, ...,
    ``">=60"``; a bucket of one value is named by it (``"0"``)."""
    names, low = [], 0
    for edge in edges:
        names.append(str(low) if edge - low == 1 else (f"<{edge}" if low == 0 else f"{low}-{edge - 1}"))
        low = edge
    return [*names, f">={low}"]


def bucket_of(value: int, edges: tuple[int, ...]) -> int:
    """The index of the bucket of ``value`` (see :func:`bucket_names`)."""
    return next((i for i, edge in enumerate(edges) if value < edge), len(edges))


@dataclass
class Bucketed:
    """One table of bucketed figures.

    Attributes:
        buckets: ``[K]`` bucket names.
        counts: ``[K]`` sentences (or reference words) in each.
        values: ``{run label: [K] figures}`` (NaN for an empty bucket).
    """

    buckets: list[str]
    counts: list[int]
    values: dict[str, list[float]]


def bleu_by_length(sources: list[str], references: list[str], hypotheses: dict[str, list[str]],
                   tokenize: str = "13a", edges: tuple[int, ...] = LENGTH_EDGES) -> Bucketed:
    """Corpus BLEU of each run over the test sentences of each source-length bucket (whitespace words);
    empty buckets are left out.

    Args:
        sources: ``[N]`` test source lines.
        references: ``[N]`` reference lines.
        hypotheses: ``{run label: [N] lines}``.
        tokenize: sacreBLEU's BLEU tokenizer.
        edges: the bucket edges (:func:`bucket_names`).
    """
    groups: dict[int, list[int]] = {}
    for i, line in enumerate(sources):
        groups.setdefault(bucket_of(len(line.split()), edges), []).append(i)
    names, keys = bucket_names(edges), sorted(groups)
    bleu = BLEU(tokenize=tokenize)
    values = {label: [bleu.corpus_score([hyps[i] for i in groups[k]], [[references[i] for i in groups[k]]]).score
                      for k in keys]
              for label, hyps in hypotheses.items()}
    return Bucketed([names[k] for k in keys], [len(groups[k]) for k in keys], values)


def word_f_by_frequency(train_targets: list[str], references: list[str], hypotheses: dict[str, list[str]],
                        tokenize: str = "13a", edges: tuple[int, ...] = FREQUENCY_EDGES) -> Bucketed:
    """Word F-measure of each run by how often the word occurs in the training targets (compare-mt's word
    accuracy by frequency): in each sentence a reference word and a hypothesis word match when they are the same
    word (each occurrence matches once); per bucket, recall = matched reference words / reference words,
    precision = matched hypothesis words / hypothesis words, F = 2PR / (P + R) in percent. ``counts`` are
    reference words.
    Buckets with no reference and no hypothesis word are left out.
    """
    tokenizer = BLEU(tokenize=tokenize).tokenizer
    frequency = Counter(word for line in train_targets for word in tokenizer(line).split())
    n_buckets = len(edges) + 1
    ref_words = [Counter(tokenizer(line).split()) for line in references]
    ref_totals = [0] * n_buckets
    for words in ref_words:
        for word, n in words.items():
            ref_totals[bucket_of(frequency[word], edges)] += n
    values, hyp_seen = {}, [0] * n_buckets
    for label, hyps in hypotheses.items():
        matched, hyp_totals = [0] * n_buckets, [0] * n_buckets
        for ref, hyp in zip(ref_words, hyps):
            for word, n in Counter(tokenizer(hyp).split()).items():
                k = bucket_of(frequency[word], edges)
                hyp_totals[k] += n
                matched[k] += min(n, ref[word])
        hyp_seen = [a + b for a, b in zip(hyp_seen, hyp_totals)]
        values[label] = [_f_measure(m, r, h) for m, r, h in zip(matched, ref_totals, hyp_totals)]
    keep = [k for k in range(n_buckets) if ref_totals[k] or hyp_seen[k]]
    names = bucket_names(edges)
    return Bucketed([names[k] for k in keep], [ref_totals[k] for k in keep],
                    {label: [row[k] for k in keep] for label, row in values.items()})


def _f_measure(matched: int, reference: int, hypothesis: int) -> float:
    """F1 in percent of ``matched`` words among ``reference`` and ``hypothesis`` words (0 when nothing matched,
    NaN when both are empty)."""
    if not reference and not hypothesis:
        return math.nan
    precision = matched / hypothesis if hypothesis else 0.0
    recall = matched / reference if reference else 0.0
    return 200 * precision * recall / (precision + recall) if precision + recall else 0.0


@dataclass
class Disagreement:
    """A test sentence the runs translate differently.

    Attributes:
        index: the 0-based test line.
        spread: the highest minus the lowest sentence score.
        source: the source line.
        reference: the reference line.
        hypotheses: ``[(run label, hypothesis, sentence score)]`` in run order.
    """

    index: int
    spread: float
    source: str
    reference: str
    hypotheses: list[tuple[str, str, float]]


def disagreements(sources: list[str], references: list[str], hypotheses: dict[str, list[str]], count: int = 10,
                  metric: str = "chrf", tokenize: str = "13a") -> tuple[list[Disagreement], str]:
    """The ``count`` test sentences whose sentence scores differ most between runs (highest spread first, then
    by line), and the metric's sacreBLEU signature.

    Args:
        metric: ``"chrf"`` (sentence chrF, the default: stable on short sentences) or ``"bleu"`` (sentence BLEU
            with sacreBLEU's exponential smoothing).
    Raises:
        ValueError: an unknown metric.
    """
    if metric not in ("chrf", "bleu"):
        raise ValueError(f"unknown sentence metric {metric!r}: use chrf or bleu")
    scorer = CHRF() if metric == "chrf" else BLEU(tokenize=tokenize, effective_order=True)
    labels = list(hypotheses)
    scores = {label: [scorer.sentence_score(h, [r]).score for h, r in zip(hypotheses[label], references)]
              for label in labels}
    spreads = [max(scores[label][i] for label in labels) - min(scores[label][i] for label in labels)
               for i in range(len(references))]
    order = sorted(range(len(references)), key=lambda i: (-spreads[i], i))[:count]
    rows = [Disagreement(i, spreads[i], sources[i], references[i],
                         [(label, hypotheses[label][i], scores[label][i]) for label in labels]) for i in order]
    return rows, str(scorer.get_signature())
