"""Alignment (score) models: additive, dot, general and local-p attention.

Shape letters used in comments throughout the package:
    B batch, S source length (padded), T target length, H hidden size, V vocabulary size, L layers.

One contract for every class (documented on :class:`Attention`):
``forward(query [B, Hq], keys [B, S, Hk], mask [B, S] bool, prepared=None) -> (context [B, Hk], weights [B, S])``.
``mask`` is True on real source tokens; weights are exactly 0 where it is False. A query ``[B, K, Hq]`` asks K
queries of each source sentence at once (the K hypotheses of a beam) against its keys, which are not copied:
context ``[B, K, Hk]``, weights ``[B, K, S]``.

Key projections (U_a h̄_s for additive, W_a h̄_s for general) are computed once per batch by ``prepare(keys)``
and passed back in as ``prepared``; nothing is stored on the module between calls.

``bias`` (optional, every class): an additive score term ``[B, S]`` (``[B, K, S]``) added to the raw scores
before the masked softmax, the hook of the structural alignment biases (:mod:`nmt.models.biases`); None adds
nothing, so the scores are exactly those of the score model alone.

``attend(...)`` (same arguments) returns ``(context, weights, heads)``: ``forward``'s two results and, for a score
model with several heads (:mod:`nmt.models.multihead`), every head's weights ``[B, H, S]`` (``[B, K, H, S]``),
whose mean is ``weights``; None for every other score model. The decoder calls ``attend``.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension with masked positions set to -inf first.

    Args:
        scores: ``[B, S]`` raw scores, or ``[B, K, S]`` (K queries per source sentence).
        mask: ``[B, S]`` (or ``[B, K, S]``) bool, True on real tokens.

    Returns:
        weights shaped like ``scores``, exactly 0 where ``mask`` is False, rows summing to 1; a row without a
        real token (an empty source) is all zeros, so its context vector is zero (softmax alone gives NaN).
    """
    if mask.dim() < scores.dim():
        mask = mask.unsqueeze(-2)  # [B, 1, S]: the same source mask for the K queries of a sentence
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1).masked_fill(~mask, 0.0)


def add_bias(scores: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``scores + bias`` (``[B, S]`` or ``[B, K, S]``), or ``scores`` itself when ``bias`` is None."""
    return scores if bias is None else scores + bias


def context_vectors(weights: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Context vectors ``c = Σ_s a(s) h̄_s`` (Luong et al. 2015, §3.1): weights ``[B, S]`` or ``[B, K, S]``,
    keys ``[B, S, Hk]`` -> context ``[B, Hk]`` or ``[B, K, Hk]``."""
    if weights.dim() == 2:
        return torch.bmm(weights.unsqueeze(1), keys).squeeze(1)
    return torch.bmm(weights, keys)


class Attention(nn.Module):
    """Global attention with a pluggable score function (Luong et al. 2015, §3.1, eqs. 7-8).

    ``a_t = softmax_s(score(q_t, h̄_s))`` over the real source tokens, ``c_t = Σ_s a_t(s) h̄_s``.

    Subclasses implement :meth:`score` (and :meth:`prepare` when keys can be projected once per batch).

    Args (of :meth:`forward`):
        query: ``[B, Hq]`` decoder state (Bahdanau: s_{t-1}; Luong: h_t), or ``[B, K, Hq]``: K queries per
            sentence sharing its keys (beam search), which then shapes the results ``[B, K, Hk]``, ``[B, K, S]``.
        keys: ``[B, S, Hk]`` encoder states h̄_s.
        mask: ``[B, S]`` bool, True on real tokens.
        prepared: ``[B, S, *]`` the result of ``prepare(keys)``; computed here when None.
        bias: ``[B, S]`` (``[B, K, S]``) added to the scores before the masked softmax, or None.

    Returns:
        context ``[B, Hk]`` and weights ``[B, S]`` (rows sum to 1 over real tokens, 0 on padding; a row whose
        mask is all False gets zero weights and a zero context).

    Args (of the constructor):
        query_size: Hq, the size of the decoder state that queries. key_size: Hk, the size of the encoder states.
    """

    uses_history = False  # True: attend also takes the previous weights and the coverage (nmt.models.biases)

    def __init__(self, query_size: int, key_size: int):
        super().__init__()
        self.query_size = query_size
        self.key_size = key_size

    def prepare(self, keys: torch.Tensor) -> torch.Tensor:
        """Per-batch key projection ``[B, S, Hk] -> [B, S, *]``; identity by default."""
        return keys

    def score(self, query: torch.Tensor, prepared: torch.Tensor) -> torch.Tensor:
        """Raw scores ``[B, S]`` from query ``[B, Hq]`` (or ``[B, K, S]`` from ``[B, K, Hq]``) and prepared
        keys ``[B, S, *]``.

        Raises:
            NotImplementedError: here; each score model implements it.
        """
        raise NotImplementedError

    def forward(self, query, keys, mask, prepared=None, positions=None, bias=None):
        """Context ``[B, Hk]`` and weights ``[B, S]`` (``[B, K, Hk]``, ``[B, K, S]`` for a ``[B, K, Hq]`` query) of
        ``query`` against ``keys`` ``[B, S, Hk]`` under ``mask`` ``[B, S]``; see the class docstring (eqs. 7-8).
        ``positions`` (the queries' target steps, for :mod:`nmt.models.positional`) is not used here; ``bias`` is
        added to the scores before the softmax."""
        if prepared is None:
            prepared = self.prepare(keys)
        weights = masked_softmax(add_bias(self.score(query, prepared), bias), mask)  # [B, S] or [B, K, S]
        return context_vectors(weights, keys), weights

    def attend(self, query, keys, mask, prepared=None, positions=None, bias=None):
        """``(context, weights, heads)``: :meth:`forward`'s results and the per-head weights ``[B, H, S]``
        (``[B, K, H, S]``) of a multi-head score model, which overrides this; None here (one head)."""
        context, weights = self(query, keys, mask, prepared, positions=positions, bias=bias)
        return context, weights, None


def _bilinear(query: torch.Tensor, prepared: torch.Tensor) -> torch.Tensor:
    """``qᵀ k_s`` for every key: query ``[B, H]`` -> ``[B, S]``, or ``[B, K, H]`` -> ``[B, K, S]``; prepared
    ``[B, S, H]``."""
    if query.dim() == 2:
        return torch.bmm(prepared, query.unsqueeze(2)).squeeze(2)
    return torch.bmm(query, prepared.transpose(1, 2))


class Dot(Attention):
    """Dot score ``score(q, h̄_s) = qᵀ h̄_s`` (Luong et al. 2015, eq. 8, "dot"). No parameters.

    Args:
        scaled: divide the score by √key_size (Vaswani et al. 2017, eq. 1): softer rows early in training. The
            class default is the paper's formula; the configuration default is scaled.

    Raises:
        ValueError: at build time if ``query_size != key_size`` (use ``general`` or ``additive`` instead).
    """

    def __init__(self, query_size: int, key_size: int, scaled: bool = False):
        super().__init__(query_size, key_size)
        if query_size != key_size:
            raise ValueError(
                f"dot attention needs query_size == key_size, got {query_size} and {key_size}; "
                "choose attention=general or attention=additive, which project the keys"
            )
        # scaled=True divides by sqrt(d) (Vaswani et al. 2017, eq. 1): softer rows early in training.
        self.scale = 1.0 / math.sqrt(key_size) if scaled else 1.0

    def score(self, query, prepared):
        """``qᵀ h̄_s`` (times 1/sqrt(Hk) when scaled): query ``[B, Hq]`` or ``[B, K, Hq]``, keys ``[B, S, Hk]``
        -> ``[B, S]`` or ``[B, K, S]``."""
        return _bilinear(query, prepared) * self.scale  # [B, S] or [B, K, S]


class General(Attention):
    """General (bilinear) score ``score(q, h̄_s) = qᵀ W_a h̄_s`` (Luong et al. 2015, eq. 8, "general").

    ``prepare`` computes ``W_a h̄_s`` ``[B, S, Hq]`` once per batch. ``scaled=True`` divides the score by
    sqrt(Hq), as scaled dot-product attention does (Vaswani et al. 2017, eq. 1), which keeps the softmax from
    saturating to one-hot rows early in training; the class default is the paper's formula, the configuration
    default (``conf/attention/general.yaml``, also for dot) is scaled, which trains much faster
    (docs/results.md).
    """

    def __init__(self, query_size: int, key_size: int, scaled: bool = False):
        super().__init__(query_size, key_size)
        self.W_a = nn.Linear(key_size, query_size, bias=False)
        self.scale = 1.0 / math.sqrt(query_size) if scaled else 1.0

    def prepare(self, keys):
        """``W_a h̄_s``: keys ``[B, S, Hk]`` -> ``[B, S, Hq]``, once per batch."""
        return self.W_a(keys)  # [B, S, Hq]

    def score(self, query, prepared):
        """``qᵀ (W_a h̄_s)`` (times 1/sqrt(Hq) when scaled): query ``[B, Hq]`` or ``[B, K, Hq]``, prepared
        ``[B, S, Hq]`` -> ``[B, S]`` or ``[B, K, S]``."""
        return _bilinear(query, prepared) * self.scale  # [B, S] or [B, K, S]


class Additive(Attention):
    """Additive score ``score(q, h̄_s) = v_aᵀ tanh(W_a q + U_a h̄_s)`` (Bahdanau et al. 2015, App. A.1.2;
    Luong et al. 2015, eq. 8, "concat").

    Args:
        hidden_size: size of the tanh layer; None means ``key_size``.

    ``prepare`` computes ``2 (U_a h̄_s + b)`` ``[B, S, hidden_size]`` once per batch (the factor 2: see below).

    The score is computed through ``tanh(x) = 2 sigmoid(2x) - 1``, which is the same function:
    ``v_aᵀ tanh(e) = 2 v_aᵀ sigmoid(2e) - Σ v_a``. PyTorch's CPU ``tanh`` is about 3x slower than its
    ``sigmoid`` (3.3 M elements on one thread: 14.1 vs 4.4 ms), and this ``[B, S, A]`` nonlinearity is the
    largest element-wise cost of a decoder step; the factor 2 rides on the prepared keys (once per batch) and on
    the ``[B, A]`` query term, and ``- Σ v_a`` on the ``[B, S]`` scores. Equal to the tanh form to float rounding
    (tests/test_attention.py checks it in float64 and float32).
    """

    def __init__(self, query_size: int, key_size: int, hidden_size: int | None = None):
        super().__init__(query_size, key_size)
        hidden_size = hidden_size or key_size
        self.W_a = nn.Linear(query_size, hidden_size, bias=False)
        self.U_a = nn.Linear(key_size, hidden_size, bias=True)
        self.v_a = nn.Linear(hidden_size, 1, bias=False)

    def prepare(self, keys):
        """``2 (U_a h̄_s + b)``: keys ``[B, S, Hk]`` -> ``[B, S, A]`` (A = ``hidden_size``), once per batch."""
        return 2.0 * self.U_a(keys)  # [B, S, A]: 2 (U_a h̄_s + b)

    def score(self, query, prepared):
        """``v_aᵀ tanh(W_a q + U_a h̄_s + b)``: query ``[B, Hq]`` or ``[B, K, Hq]``, prepared ``[B, S, A]`` ->
        ``[B, S]`` or ``[B, K, S]``."""
        if query.dim() == 3:
            prepared = prepared.unsqueeze(1)  # [B, 1, S, A]: shared by the K queries, broadcast, not copied
        energy = torch.add(prepared, self.W_a(query).unsqueeze(-2), alpha=2.0)  # [B, (K,) S, A] = 2 e, fresh
        # sigmoid in place: the sum's backward needs neither its inputs nor its output, and sigmoid's backward
        # uses only its output, so autograd allows it; one [B, S, A] tensor less per decoder step.
        v = self.v_a.weight.squeeze(0)  # [A]
        return 2.0 * torch.matmul(energy.sigmoid_(), v) - v.sum()  # [B, (K,) S] = v_aᵀ tanh(e)


SCORES = {"dot": Dot, "general": General, "additive": Additive}


def window_score(name: str, query_size: int, key_size: int, window: int, score: str, scaled: bool) -> Attention:
    """The score model a local attention (``name``: local_p, local_m) wraps, after checking its window.

    Raises:
        ValueError: for ``window < 1``, an unknown score name, or ``score="dot"`` with ``query_size != key_size``.
    """
    if window < 1:
        raise ValueError(f"{name} window D must be >= 1 source position, got {window}")
    if score not in SCORES:
        raise ValueError(f"{name} score must be one of {sorted(SCORES)}, got {score!r}")
    options = {"scaled": scaled} if score in ("dot", "general") else {}
    return SCORES[score](query_size, key_size, **options)


class LocalP(Attention):
    """Predictive local attention, local-p (Luong et al. 2015, §3.2, eqs. 9-10).

    - Centre: ``p_t = S_b · sigmoid(v_pᵀ tanh(W_p q_t))`` (eq. 9), S_b the length of *this* sentence
      (real tokens, from the mask), positions counted 0..S_b-1.
    - Window: hard cut, source positions with ``|s - p_t| <= D`` (and real tokens only).
    - Weights: ``a_t(s) = align(q_t, h̄_s) · exp(-(s - p_t)² / (2σ²))`` with ``σ = D/2`` (eq. 10), where align
      is the softmax of the wrapped score over the window only. As in the paper, the weights are **not**
      renormalised after the Gaussian, so a row sums to at most 1; the returned weights are exactly the ones
      that multiply the keys. They are 0 outside the window and on padding. Gradients reach p_t through the
      Gaussian, so no extra loss is needed.

    Args:
        window: D, the half-width of the window in source positions (the paper uses 10); must be >= 1.
        score: the wrapped score function, ``"general"`` (the paper's choice), ``"dot"`` or ``"additive"``.
        scaled: divide a ``dot`` or ``general`` score by sqrt(query_size) (equal to key_size for dot; see
            :class:`General`); the additive score has no product to scale and ignores it.

    Raises:
        ValueError: for ``window < 1``, an unknown score name, or ``score="dot"`` with
            ``query_size != key_size``.
    """

    def __init__(self, query_size: int, key_size: int, window: int = 10, score: str = "general",
                 scaled: bool = False):
        super().__init__(query_size, key_size)
        self.inner = window_score("local_p", query_size, key_size, window, score, scaled)
        self.window = float(window)
        self.sigma = self.window / 2.0
        self.W_p = nn.Linear(query_size, query_size, bias=False)
        self.v_p = nn.Linear(query_size, 1, bias=False)

    def prepare(self, keys):
        """The wrapped score's key projection: keys ``[B, S, Hk]`` -> ``[B, S, *]``, once per batch."""
        return self.inner.prepare(keys)

    def centre(self, query: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Predicted centre p_t ``[B]`` (``[B, K]`` for a ``[B, K, Hq]`` query) in source positions (eq. 9), in
        ``[0, S_b]``."""
        lengths = mask.sum(dim=1).to(query.dtype)  # [B]
        if query.dim() == 3:
            lengths = lengths.unsqueeze(1)  # [B, 1]
        return lengths * torch.sigmoid(self.v_p(torch.tanh(self.W_p(query)))).squeeze(-1)

    def forward(self, query, keys, mask, prepared=None, positions=None, bias=None):
        """Context ``[B, Hk]`` and weights ``[B, S]`` (``[B, K, Hk]``, ``[B, K, S]`` for a ``[B, K, Hq]`` query):
        the softmax over the window times the Gaussian around p_t (eqs. 9-10). Unlike the base contract, a row
        sums to at most 1 (not renormalised, as in the paper); 0 outside the window and on padding. ``bias`` is
        added to the wrapped score before the softmax over the window."""
        if prepared is None:
            prepared = self.prepare(keys)
        p_t = self.centre(query, mask).unsqueeze(-1)  # [B, (K,) 1]
        positions = torch.arange(keys.size(1), device=keys.device, dtype=query.dtype)  # [S]
        distance = positions - p_t  # [B, (K,) S]
        if query.dim() == 3:
            mask = mask.unsqueeze(1)  # [B, 1, S]
        in_window = mask & (distance.abs() <= self.window)  # [B, (K,) S]
        align = masked_softmax(add_bias(self.inner.score(query, prepared), bias), in_window)  # [B, (K,) S]
        weights = align * torch.exp(-(distance**2) / (2 * self.sigma**2))  # [B, (K,) S]
        return context_vectors(weights, keys), weights
