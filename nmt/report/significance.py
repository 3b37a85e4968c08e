"""Paired significance tests of runs against a baseline on one test set, with sacreBLEU's own implementation
(:class:`sacrebleu.significance.PairedTest`): paired bootstrap resampling (Koehn 2004; 1,000 resamples by
default) or approximate randomization (Riezler and Maxwell 2005; 10,000 random shuffles of the two outputs,
with bootstrap confidence intervals). sacreBLEU seeds its generator with ``$SACREBLEU_SEED`` (12345 unless
set), so figures repeat.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

TESTS = {"bs": "paired bootstrap resampling", "ar": "approximate randomization"}


@dataclass
class Compared:
    """One run's figures for one metric in a paired test.

    Attributes:
        label: the run.
        metric: ``"BLEU"`` or ``"chrF2"`` (sacreBLEU's names).
        score: the corpus score of its test hypotheses.
        mean: the mean of the bootstrap resamples' scores (None when not estimated).
        ci: half the width of the 95% confidence interval around ``mean`` (``mean ± ci``).
        p_value: against the baseline (None for the baseline itself).
        distinguishable: ``p_value < alpha`` (None for the baseline).
    """

    label: str
    metric: str
    score: float
    mean: float | None
    ci: float | None
    p_value: float | None
    distinguishable: bool | None


@dataclass
class PairedResult:
    """A paired test of runs against a baseline (the first of ``rows``' labels).

    Attributes:
        test: ``"bs"`` or ``"ar"``.
        samples: resamples (bs) or shuffles (ar).
        alpha: the significance level.
        signatures: sacreBLEU's signature per metric (with the test, samples and seed).
        rows: ``{metric: [Compared per run]}``, the baseline first.
    """

    test: str
    samples: int
    alpha: float
    signatures: dict[str, str]
    rows: dict[str, list[Compared]]


def paired_test(systems: list[tuple[str, list[str]]], references: list[str], tokenize: str = "13a",
                test: str = "bs", samples: int = 0, alpha: float = 0.05) -> PairedResult:
    """Compare each system's hypotheses with the first's (the baseline) by BLEU and chrF.

    Hypotheses and references are taken in Unicode NFC, as the runs' own scores (nmt.decoding.scoring.score).

    Args:
        systems: ``[(label, [N] hypotheses)]``, the baseline first; at least two.
        references: ``[N]`` reference lines.
        tokenize: sacreBLEU's BLEU tokenizer (the runs' ``tok:`` signature field).
        test: ``"bs"`` (paired bootstrap) or ``"ar"`` (approximate randomization).
        samples: resamples (bs) or random shuffles (ar); 0 for sacreBLEU's defaults (1,000 and 10,000).
        alpha: the level below which a p-value marks two systems as distinguishable.
    Raises:
        ValueError: an unknown test, fewer than two systems, or line counts that differ from the references.
    """
    if test not in TESTS:
        raise ValueError(f"unknown test {test!r}: use one of {', '.join(TESTS)}")
    if len(systems) < 2:
        raise ValueError("a paired test needs a baseline and at least one other run")
    for label, hyps in systems:
        if len(hyps) != len(references):
            raise ValueError(f"{label}: {len(hyps)} hypotheses for {len(references)} references")
    nfc = [(label, [unicodedata.normalize("NFC", h) for h in hyps]) for label, hyps in systems]
    refs = [unicodedata.normalize("NFC", r) for r in references]
    paired = PairedTest(nfc, {"BLEU": BLEU(tokenize=tokenize), "chrF": CHRF()}, [refs], test_type=test,
                        n_samples=samples, n_ar_confidence=0 if test == "ar" else -1)
    signatures, scores = paired()
    labels = scores.pop("System")
    rows = {}
    for metric, results in scores.items():
        rows[metric] = [Compared(label, metric, float(result.score), _number(result.mean), _number(result.ci),
                                 _number(result.p_value), None if result.p_value is None else result.p_value < alpha)
                        for label, result in zip(labels, results)]
    return PairedResult(test, paired.n_samples, alpha, {k: str(v) for k, v in signatures.items()}, rows)


def _number(value) -> float | None:
    """A numpy scalar of sacreBLEU's results as a float (None stays None)."""
    return None if value is None else float(value)
