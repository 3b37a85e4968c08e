"""What a search returns and the scores it ranks by: :class:`Hypothesis`, the GNMT length and coverage penalties,
the next-token log-probabilities, the output length limits, and the per-step histories a hypothesis carries
(shape letters as in :mod:`nmt.models.decoder`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

PAD_ID, BOS_ID, EOS_ID = 0, 2, 3  # the ids fixed in nmt.data.tokenizer (kept literal: search does not import the tokenizer)


class Hypothesis(NamedTuple):
    """One translation: ids ``[n]`` (no BOS, ending in EOS), score = log_prob / length penalty + coverage penalty,
    log_prob = Σ log p(y_t) in nats, alignment ``[n, S_b]`` float (row t = attention when emitting ids[t]), heads
    ``[heads, n, S_b]`` float: every head's alignment of a multi-head attention (their mean is ``alignment``), else
    None."""

    ids: list[int]
    score: float
    log_prob: float
    alignment: torch.Tensor
    heads: torch.Tensor | None = None


def step_heads(state) -> torch.Tensor | None:
    """The per-head weights ``[B, heads, S]`` of the step that made ``state`` (multi-head attention), else None
    (one head, or an ensemble's states)."""
    return getattr(state, "heads", None)


def extend(history: torch.Tensor | None, rows: torch.Tensor, new: torch.Tensor | None) -> torch.Tensor | None:
    """The rows ``rows`` ``[N]`` of a history ``[B, t, *]`` with the same rows of ``new`` ``[B, *]`` appended as
    step t + 1 -> ``[N, t + 1, *]``; a None history is empty; None when ``new`` is None (no per-head weights)."""
    if new is None:
        return None
    past = new.new_zeros(rows.numel(), 0, *new.shape[1:]) if history is None else history[rows]
    return torch.cat([past, new[rows].unsqueeze(1)], dim=1)


def length_penalty(length: torch.Tensor | int, alpha: float) -> torch.Tensor | float:
    """GNMT length penalty ``lp(Y) = ((5 + |Y|) / 6) ** alpha`` (Wu et al. 2016, eq. 14); 1 for alpha = 0.
    ``length``: |Y| in tokens (``</s>`` included), an int or a tensor ``[B]`` (the result is then ``[B]``)."""
    return ((5 + length) / 6) ** alpha


COVERAGE_FLOOR = 1e-6  # smallest coverage the penalty's log sees: a source token never attended costs log(1e-6)


def coverage_penalty(alignment: torch.Tensor, beta: float) -> float:
    """GNMT coverage penalty ``cp(X; Y) = beta * Σ_i log(min(Σ_j p_ij, 1))`` (Wu et al. 2016, eq. 14), i over
    the source words and j over the hypothesis tokens: alignment ``[|Y|, S]`` (row j = the attention when
    emitting y_j, the ``</s>`` row included; the S source columns end in the source ``</s>``, which is not a
    word to translate and is left out) -> a number <= 0 in nats, 0 when every source token received a total
    attention of at least 1 (and for beta = 0).

    The total attention of a source token is floored at ``COVERAGE_FLOOR`` before the log, so that a token
    that no step attended to (exactly 0 outside local-p's window) costs ``beta * log(1e-6)`` instead of -inf,
    and hypotheses that all miss a token are still ranked.
    """
    if beta == 0:
        return 0.0
    coverage = alignment[:, :-1].double().sum(dim=0).clamp(min=COVERAGE_FLOOR, max=1.0)  # [S - 1]
    return beta * float(coverage.log().sum())


def log_probs(logits: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """Logits ``[..., V]`` -> log-probabilities ``[..., V]`` in float32, with PAD and BOS never generated.

    ``inplace=True`` (for the search's own step output) writes the two -inf columns and the log-probabilities
    into float32 ``logits`` itself, or into its float32 copy, instead of a new ``[..., V]`` tensor per step; the
    argument is left unchanged otherwise."""
    never = torch.tensor([PAD_ID, BOS_ID], device=logits.device)
    logits = logits.float()
    if not inplace:
        return torch.log_softmax(logits.index_fill(-1, never, float("-inf")), dim=-1)
    logits.index_fill_(-1, never, float("-inf"))
    return torch.log_softmax(logits, dim=-1, out=logits)  # row by row: each row is read before it is written


def max_lengths(src_mask: torch.Tensor, max_len_a: float, max_len_b: int) -> torch.Tensor:
    """Per-sentence output limit ``[B]`` in tokens (EOS included): ``max_len_a * S_b + max_len_b``, at least 1."""
    return (max_len_a * src_mask.sum(dim=1) + max_len_b).long().clamp(min=1)
