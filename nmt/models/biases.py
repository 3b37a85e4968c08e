"""Structural alignment biases (Cohn et al. 2016, "Incorporating Structural Alignment Biases into an Attentional
Neural Translation Model", NAACL, §3.1-3.3) as options of any score model.

:class:`Biased` wraps a score model (additive, dot, general, multihead, local_m, local_p, location) and adds a
learned linear term of structural features to its raw scores, before the masked softmax::

    e_t(s) = score(q_t, h̄_s) + w_posᵀ ψ(s, t, S_b) + Σ_{d=-k..k} w_mar[d] a_{t-1}(s+d)
                                                  + Σ_{d=-k'..k'} w_fer[d] β_t(s+d)
    β_t(s) = Σ_{t'<t} a_{t'}(s)                               (the coverage of s before step t)

- **position** (§3.1): ψ(s, t, S_b) holds the terms of the quadratic expansion of Cohn et al.'s features
  (log(1+s), log(1+t), log(1+S_b)) that vary with s: ``[l_s, l_s², l_s·l_t, l_s·l_S]`` with l_x = log(1+x),
  S_b the sentence's real source length. The paper feeds the three features into its MLP; a linear term of them
  alone could not prefer any diagonal, since log(1+t) and log(1+S_b) are constant along a row and cancel in the
  softmax. The products can: ``-c (l_s - l_t)²`` is ``-c l_s² + 2c l_s·l_t`` up to a per-row constant.
- **markov** k (§3.2): the previous step's weights in a window of 2k+1 source positions around s, a_{t-1}(s-k..s+k).
- **fertility** k (§3.3, local fertility): the coverage β_t(s-k..s+k), the attention mass given so far around s.

The window features are zero beyond the sentence (padding has zero weight) and at the first step (a_{-1} = 0,
β_0 = 0). Every weight w starts at zero, so an untrained biased model computes exactly what its score model
alone does (the same initial weights from the same seed: the zeros draw no random numbers); a multi-head score
adds the same term to every head. Global fertility (the paper's extra loss term) is not implemented.

The decoder carries a_{t-1} and β_t in :class:`nmt.models.state.DecoderState` (``previous``, ``coverage``)
when :attr:`Biased.uses_history` is True, and passes them to :meth:`Biased.attend`; teacher forcing then attends
step by step (it cannot take all T queries at once), so search and teacher forcing compute the same.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from nmt.models.attention import Attention

BIAS_KEYS = ("position", "markov", "fertility")  # the keys of the ``attention.bias`` settings
POSITION_FEATURES = 4  # l_s, l_s², l_s·l_t, l_s·l_S


def _window(name: str, k) -> int | None:
    """A window half-width k >= 0, or None (off).

    Raises:
        ValueError: for anything else (a bool, a negative or non-integer value).
    """
    if k is None:
        return None
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"attention.bias.{name} must be null (off) or a window half-width k >= 0 "
                         f"(2k+1 source positions), got {k!r}")
    return k


def _window_term(values: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``Σ_d w[d] x(s+d)`` for d = -k..k: values ``[..., S]`` (zero beyond the edges), weight ``[2k+1]`` ->
    ``[..., S]``."""
    size, k = values.size(-1), (weight.numel() - 1) // 2
    padded = F.pad(values, (k, k))  # [..., S + 2k]: padded[..., s + k + d] = x(s + d)
    term = weight[0] * padded[..., :size]
    for i in range(1, weight.numel()):
        term = term + weight[i] * padded[..., i : i + size]
    return term


class Biased(Attention):
    """A score model with Cohn et al.'s (2016) structural alignment biases (see the module docstring).

    Args:
        score: a factory of the wrapped score model, called as ``score(query_size=Hq, key_size=Hk)``.
        position: add the positional bias w_posᵀ ψ(s, t, S_b) (§3.1); needs the target positions.
        markov: k, the half-width of the window of the previous step's weights (§3.2); None: off.
        fertility: k, the half-width of the window of the coverage (§3.3, local fertility); None: off.

    Raises:
        ValueError: for a non-bool ``position``, a window that is not None or an int >= 0, or no bias at all.
    """

    def __init__(self, query_size: int, key_size: int, score: Callable[..., Attention], position: bool = False,
                 markov: int | None = None, fertility: int | None = None):
        super().__init__(query_size, key_size)
        if not isinstance(position, bool):
            raise ValueError(f"attention.bias.position must be true or false, got {position!r}")  # noqa: TRY004
        self.markov, self.fertility = _window("markov", markov), _window("fertility", fertility)
        if not position and self.markov is None and self.fertility is None:
            raise ValueError("Biased attention without a bias: set attention.bias.position, markov or fertility")
        self.inner = score(query_size=query_size, key_size=key_size)
        # zeros: no random numbers drawn, and the untrained model is exactly the wrapped one
        self.w_position = nn.Parameter(torch.zeros(POSITION_FEATURES)) if position else None
        self.w_markov = None if self.markov is None else nn.Parameter(torch.zeros(2 * self.markov + 1))
        self.w_fertility = None if self.fertility is None else nn.Parameter(torch.zeros(2 * self.fertility + 1))

    @property
    def uses_history(self) -> bool:
        """Whether the scores read the previous weights or the coverage (the decoder then carries them)."""
        return self.w_markov is not None or self.w_fertility is not None

    def prepare(self, keys):
        """The wrapped score model's key projection: keys ``[B, S, Hk]`` -> ``[B, S, *]``, once per batch."""
        return self.inner.prepare(keys)

    def position_features(self, query, mask, positions) -> torch.Tensor:
        """ψ(s, t, S_b) ``[B, (K|T,) S, 4]`` = ``[l_s, l_s², l_s·l_t, l_s·l_S]``, l_x = log(1+x), for the query
        ``[B, (K|T,) Hq]`` at target positions ``positions`` (an int or a tensor broadcastable to the query's
        leading shape), S_b the real source length from ``mask`` ``[B, S]``.

        Raises:
            ValueError: without ``positions``.
        """
        if positions is None:
            raise ValueError("attention.bias.position needs the target positions of the queries (positions=t)")
        lead = query.shape[:-1]  # [B] or [B, K]
        l_t = torch.log1p(torch.as_tensor(positions, dtype=torch.float32, device=query.device).expand(lead))
        l_S = torch.log1p(mask.sum(dim=1).float()).view(-1, *([1] * (len(lead) - 1)))  # [B, (1)]
        l_s = torch.log1p(torch.arange(mask.size(1), device=query.device, dtype=torch.float32))  # [S]
        l_t, l_S = l_t.unsqueeze(-1), l_S.unsqueeze(-1)  # [B, (K,) 1]
        l_s = l_s.expand(*lead, -1)  # [B, (K,) S]
        return torch.stack([l_s, l_s * l_s, l_s * l_t, l_s * l_S], dim=-1)  # [B, (K,) S, 4]

    def bias_term(self, query, mask, positions=None, previous=None, coverage=None) -> torch.Tensor | None:
        """The learned term added to the scores, ``[B, S]`` (``[B, K, S]`` for a ``[B, K, Hq]`` query), from the
        positions, the previous weights ``previous`` and the coverage ``coverage`` (``[B, (K,) S]``; None: zeros,
        the first step); None when no term applies (only window biases, at the first step)."""
        term = None
        if self.w_position is not None:
            term = torch.matmul(self.position_features(query, mask, positions), self.w_position).to(query.dtype)
        for weight, values in ((self.w_markov, previous), (self.w_fertility, coverage)):
            if weight is not None and values is not None:
                window = _window_term(values, weight)  # [B, (K,) S]
                term = window if term is None else term + window
        return term

    def attend(self, query, keys, mask, prepared=None, positions=None, bias=None, previous=None, coverage=None):
        """``(context, weights, heads)`` of the wrapped score model with the bias term added to its scores;
        arguments and results as :meth:`nmt.models.attention.Attention.attend`, plus ``previous`` (a_{t-1}) and
        ``coverage`` (β_t), ``[B, S]`` (``[B, K, S]`` for a ``[B, K, Hq]`` query) or None (zeros)."""
        term = self.bias_term(query, mask, positions, previous, coverage)
        if bias is not None:
            term = bias if term is None else bias + term
        return self.inner.attend(query, keys, mask, prepared, positions=positions, bias=term)

    def forward(self, query, keys, mask, prepared=None, positions=None, bias=None, previous=None, coverage=None):
        """Context and weights: the first two results of :meth:`attend`."""
        return self.attend(query, keys, mask, prepared, positions, bias, previous, coverage)[:2]


def with_biases(score: Callable[..., Attention], bias: Mapping | None) -> Callable[..., Attention]:
    """The attention factory of the settings ``attention.bias`` (``{position, markov, fertility}``) around the
    score model factory ``score``: ``score`` itself when every bias is off (the model is then exactly the score
    model's), else a factory of :class:`Biased`.

    Raises:
        ValueError: for unknown keys or invalid values in ``bias``.
    """
    if bias is not None and not isinstance(bias, Mapping):
        raise ValueError(f"attention.bias must be a mapping of {', '.join(BIAS_KEYS)}, got {bias!r}")
    bias = dict(bias or {})
    unknown = sorted(set(bias) - set(BIAS_KEYS))
    if unknown:
        raise ValueError(f"attention.bias takes {', '.join(BIAS_KEYS)}; unknown: {', '.join(map(str, unknown))}")
    position = bias.get("position", False)
    markov, fertility = _window("markov", bias.get("markov")), _window("fertility", bias.get("fertility"))
    if position is False and markov is None and fertility is None:
        return score
    return functools.partial(Biased, score=score, position=position, markov=markov, fertility=fertility)
