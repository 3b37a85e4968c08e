"""Multi-head attention as a score model of the RNN decoder (Vaswani et al. 2017, §3.2.2; Sockeye 1's ``mhdot``;
the multi-head additive attention of RNMT+, Chen et al. 2018).

The decoder state q asks H heads at once. Head i projects the query, the keys and the values into its own
subspace of size d and attends there; the heads' contexts are concatenated and projected back to the key size::

    a_t^i = softmax_s( score_i(W_i^Q q_t, W_i^K h̄_s) )        over the real source tokens, per head
    c_t^i = Σ_s a_t^i(s) W_i^V h̄_s                           [d]
    c_t   = W^O [c_t^1; ...; c_t^H]                          [Hk], the width the decoder expects
    a_t   = (1/H) Σ_i a_t^i                                  the exported alignment (Sockeye's choice)

with ``score: dot`` ``score_i(q, k) = qᵀ k / √d`` (Vaswani et al. 2017, eq. 1; ``scaled=false`` drops the 1/√d)
and ``score: additive`` ``score_i(q, k) = v_iᵀ tanh(q + k)``: Bahdanau's score inside each head, whose W_a, U_a
are the head's W_i^Q, W_i^K (RNMT+ uses 4 such heads). The projections have no bias, as in the paper's formula
(Sockeye adds biases), so an empty source (no real token) still gets zero weights and a zero context.

Same contract as :mod:`nmt.models.attention`: ``forward`` returns ``(context, weights)`` with the mean weights
``[B, S]`` (``[B, K, S]`` for a ``[B, K, Hq]`` query): rows sum to 1, exact zeros on padding. Every head's own
matrix comes from :meth:`MultiHead.attend`, the third result, ``[B, H, S]`` (``[B, K, H, S]``); the decoder
passes it on in :attr:`nmt.models.state.DecoderState.heads` (search) and from
:meth:`nmt.models.decoder.Decoder.teacher_force`, and the evaluation writes it beside the combined matrices
(``P.alignments.heads.npz``, :func:`nmt.decoding.artifacts.heads_path`).

``prepare(keys)`` projects keys and values once per batch: ``[B, S, 2·H·d]`` (keys first, then values).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from nmt.models.attention import Attention, masked_softmax

HEAD_SCORES = ("dot", "additive")


class MultiHead(Attention):
    """H heads of dot or additive attention over projected keys and values (see the module docstring).

    Args:
        heads: H >= 1, the number of heads.
        score: ``"dot"`` (scaled dot product per head, Vaswani et al. 2017; Sockeye's ``mhdot``) or
            ``"additive"`` (v_iᵀ tanh(q + k) per head, RNMT+).
        head_size: d, the size of a head's query, key and value; None means ``key_size // heads`` (which must
            then divide: H·d = Hk as in Vaswani et al. and Sockeye).
        scaled: divide a dot score by √d (eq. 1); the additive score ignores it.

    Raises:
        ValueError: for ``heads < 1``, an unknown score, ``head_size < 1``, or ``head_size=None`` with a key size
            that ``heads`` does not divide.
    """

    def __init__(self, query_size: int, key_size: int, heads: int = 4, score: str = "dot",
                 head_size: int | None = None, scaled: bool = True):
        super().__init__(query_size, key_size)
        if heads < 1:
            raise ValueError(f"multihead heads must be >= 1, got {heads}")
        if score not in HEAD_SCORES:
            raise ValueError(f"multihead score must be one of {', '.join(HEAD_SCORES)}, got {score!r}")
        if head_size is None:
            if key_size % heads:
                raise ValueError(f"multihead: {heads} heads do not divide the key size {key_size}; choose a divisor "
                                 "or set attention.head_size")
            head_size = key_size // heads
        if head_size < 1:
            raise ValueError(f"multihead head_size must be >= 1, got {head_size}")
        self.heads, self.head_size, self.kind = heads, head_size, score
        width = heads * head_size
        self.W_q = nn.Linear(query_size, width, bias=False)  # the W_i^Q of all heads, side by side
        self.W_kv = nn.Linear(key_size, 2 * width, bias=False)  # W_i^K then W_i^V: one product per batch
        self.W_o = nn.Linear(width, key_size, bias=False)  # W^O
        self.scale = 1.0 / math.sqrt(head_size) if scaled and score == "dot" else 1.0
        if score == "additive":
            bound = 1.0 / math.sqrt(head_size)  # nn.Linear(d, 1)'s initialization, per head
            self.v = nn.Parameter(torch.empty(heads, head_size).uniform_(-bound, bound))  # v_i

    def prepare(self, keys):
        """Keys and values of every head: keys ``[B, S, Hk]`` -> ``[B, S, 2·H·d]`` (``W^K h̄_s`` then
        ``W^V h̄_s``), once per batch."""
        return self.W_kv(keys)  # [B, S, 2·H·d]

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, N, H·d]`` -> ``[B, H, N, d]``: one slice per head."""
        return x.unflatten(-1, (self.heads, self.head_size)).transpose(1, 2)

    def head_scores(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """Raw scores of every head: projected queries ``[B, H, K, d]``, projected keys ``[B, H, S, d]`` ->
        ``[B, H, K, S]``."""
        if self.kind == "dot":
            return torch.matmul(query, keys.transpose(-1, -2)) * self.scale  # [B, H, K, S]
        energy = torch.tanh(query.unsqueeze(-2) + keys.unsqueeze(-3))  # [B, H, K, S, d]
        return torch.matmul(energy, self.v[:, None, :, None]).squeeze(-1)  # [B, H, K, S] = v_iᵀ tanh(q + k)

    def attend(self, query, keys, mask, prepared=None, positions=None, bias=None):
        """Context ``[B, Hk]``, mean weights ``[B, S]`` and every head's weights ``[B, H, S]`` (``[B, K, Hk]``,
        ``[B, K, S]``, ``[B, K, H, S]`` for a ``[B, K, Hq]`` query, whose K rows share their sentence's keys).
        ``positions`` is not used; ``bias`` ``[B, S]`` (``[B, K, S]``) is added to every head's scores."""
        if prepared is None:
            prepared = self.prepare(keys)
        single = query.dim() == 2
        q = self._split(self.W_q(query.unsqueeze(1) if single else query))  # [B, H, K, d]
        k, v = (self._split(x) for x in prepared.chunk(2, dim=-1))  # [B, H, S, d] each
        scores = self.head_scores(q, k)  # [B, H, K, S]
        if bias is not None:
            scores = scores + (bias.unsqueeze(1) if single else bias).unsqueeze(1)  # [B, 1, K, S]: every head
        heads = masked_softmax(scores, mask[:, None, None, :])  # [B, H, K, S], rows sum to 1
        context = self.W_o(torch.matmul(heads, v).transpose(1, 2).flatten(2))  # [B, K, H·d] -> [B, K, Hk]
        heads = heads.transpose(1, 2)  # [B, K, H, S]
        weights = heads.mean(dim=2)  # [B, K, S]: exactly 0 where every head is
        if single:
            return context.squeeze(1), weights.squeeze(1), heads.squeeze(1)
        return context, weights, heads

    def forward(self, query, keys, mask, prepared=None, positions=None, bias=None):
        """Context ``[B, Hk]`` and the heads' mean weights ``[B, S]`` (``[B, K, Hk]``, ``[B, K, S]`` for a
        ``[B, K, Hq]`` query): the contract of :class:`nmt.models.attention.Attention`; :meth:`attend` also
        returns every head's weights."""
        context, weights, _ = self.attend(query, keys, mask, prepared, positions, bias)
        return context, weights
