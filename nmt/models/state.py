"""What the decoder carries between target steps (:class:`DecoderState`) and what it attends to
(:class:`Memory`); beam search reorders both through ``select`` (shape letters: :mod:`nmt.models.attention`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch


def _rows(x: torch.Tensor | None, index: torch.Tensor) -> torch.Tensor | None:
    """Rows ``index`` of ``x`` (dim 0), or None for None."""
    return None if x is None else x.index_select(0, index)


class Memory(NamedTuple):
    """What the decoder attends to, computed once per batch.

    keys ``[B, S, H]`` encoder states h̄_s; prepared ``[B, S, *]`` their projection by ``Attention.prepare``;
    mask ``[B, S]`` bool, True on real source tokens.
    """

    keys: torch.Tensor
    prepared: torch.Tensor
    mask: torch.Tensor

    def select(self, index: torch.Tensor) -> Memory:
        """Rows ``index`` ``[B']`` of every tensor (beam expansion and reordering)."""
        return Memory(*(t.index_select(0, index) for t in self))


class DecoderState(NamedTuple):
    """Recurrent decoder state: hidden ``[L, B, H]``; input_feed ``[B, R]`` the previous attentional vector
    h̃_{t-1} (Luong; R = the readout size: E with tied embeddings, else H) or ``[B, 0]`` (unused: Bahdanau, or
    Luong without input feeding); heads ``[B, heads, S]``: every head's attention weights at the step that made
    this state (multi-head attention, :mod:`nmt.models.multihead`; their mean is that step's weights), else None.

    previous ``[B, S]``: the weights a_{t-1} of the step that made this state, and coverage ``[B, S]``: their sum
    over all steps so far, β_t = Σ_{t'<t} a_{t'}; carried only for an attention with Markov or fertility biases
    (:mod:`nmt.models.biases`), else None (also before the first step, where both count as zeros).
    """

    hidden: torch.Tensor
    input_feed: torch.Tensor
    step: int = 0  # the target position t of the next output word (position-based attention reads it)
    heads: torch.Tensor | None = None
    previous: torch.Tensor | None = None
    coverage: torch.Tensor | None = None

    def select(self, index: torch.Tensor) -> DecoderState:
        """Rows ``index`` ``[B']`` (beam search reorders hypotheses only through this, per-head weights, previous
        weights and coverage included)."""
        return DecoderState(self.hidden.index_select(1, index), self.input_feed.index_select(0, index), self.step,
                            _rows(self.heads, index), _rows(self.previous, index), _rows(self.coverage, index))

    def after(self, hidden: torch.Tensor, input_feed: torch.Tensor, heads: torch.Tensor | None,
              weights: torch.Tensor, history: bool) -> DecoderState:
        """The state after this step: its hidden ``[L, B, H]``, input feed, per-head weights and, with
        ``history``, its weights ``[B, S]`` as ``previous`` and added to the coverage."""
        if not history:
            return DecoderState(hidden, input_feed, self.step + 1, heads)
        coverage = weights if self.coverage is None else self.coverage + weights
        return DecoderState(hidden, input_feed, self.step + 1, heads, weights, coverage)
