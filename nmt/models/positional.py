"""Attention that uses the target position t: Luong et al.'s (2015) monotonic local attention (local-m) and
location-based attention. Same contract as :mod:`nmt.models.attention` (shapes, exact zeros on padding, a
``[B, K, Hq]`` beam query equal to K copies), plus ``positions``: the target step t of each query (0 for the
first output word), an int or a tensor broadcastable to the query's leading shape (``[B]``, ``[B, K]`` or
``[B, T]``); the decoder passes it to every score model, and local-m refuses to run without it.
"""

from __future__ import annotations

import torch
from torch import nn

from nmt.models.attention import Attention, add_bias, context_vectors, masked_softmax, window_score


def _positions(positions, query: torch.Tensor, name: str) -> torch.Tensor:
    """``positions`` as a float tensor of the query's leading shape ``[B]`` / ``[B, K]`` / ``[B, T]``."""
    if positions is None:
        raise ValueError(f"{name} attention needs the target positions of its queries (positions=t)")
    # float32 even under bf16 autocast, whose 8-bit mantissa would round positions above 256
    return torch.as_tensor(positions, dtype=torch.float32, device=query.device).expand(query.shape[:-1])


class LocalM(Attention):
    """Monotonic local attention, local-m (Luong et al. 2015, §3.2).

    The window is centred at the target step, ``p_t = t``, taken as a source position and clamped to the last
    real source token (``min(t, S_b - 1)``: a target longer than its source keeps a window on its end). The
    weights are the wrapped score's softmax over the source positions with ``|s - p_t| <= D`` (real tokens
    only), zero elsewhere: rows sum to 1, as in global attention, without local-p's Gaussian.

    Args:
        window: D, the half-width of the window in source positions (the paper uses 10); must be >= 1.
        score: the wrapped score function, ``"general"`` (the paper's choice), ``"dot"`` or ``"additive"``.
        scaled: divide a ``dot`` or ``general`` score by sqrt(query_size) (see :class:`nmt.models.attention.General`).
    Raises:
        ValueError: for ``window < 1``, an unknown score name, or ``score="dot"`` with ``query_size != key_size``.
    """

    def __init__(self, query_size: int, key_size: int, window: int = 10, score: str = "general",
                 scaled: bool = False):
        super().__init__(query_size, key_size)
        self.inner = window_score("local_m", query_size, key_size, window, score, scaled)
        self.window = float(window)

    def prepare(self, keys):
        """The wrapped score's key projection: keys ``[B, S, Hk]`` -> ``[B, S, *]``, once per batch."""
        return self.inner.prepare(keys)

    def forward(self, query, keys, mask, prepared=None, positions=None, bias=None):
        """Context ``[B, Hk]`` and weights ``[B, S]`` (``[B, K, Hk]``, ``[B, K, S]`` for a ``[B, K, Hq]`` query);
        ``bias`` is added to the wrapped score before the softmax over the window.

        Raises:
            ValueError: without ``positions``.
        """
        if prepared is None:
            prepared = self.prepare(keys)
        t = _positions(positions, query, "local_m")  # [B, (K|T)]
        last = (mask.sum(dim=1) - 1).clamp(min=0).float()  # [B]
        if query.dim() == 3:
            last, mask = last.unsqueeze(1), mask.unsqueeze(1)  # [B, 1], [B, 1, S]
        centre = torch.minimum(t, last).unsqueeze(-1)  # [B, (K,) 1]
        source = torch.arange(keys.size(1), device=keys.device, dtype=torch.float32)  # [S]
        in_window = mask & ((source - centre).abs() <= self.window)  # [B, (K,) S]
        weights = masked_softmax(add_bias(self.inner.score(query, prepared), bias), in_window)
        return context_vectors(weights, keys), weights


class Location(Attention):
    """Location-based attention (Luong et al. 2015, §3.1, eq. 8 "location"): ``a_t = softmax(W_a h_t)``, the
    weights computed from the decoder state alone, one score per source position, softmaxed over the real
    source tokens. It sees no encoder state, so it learns where a target step tends to look, not what it looks
    at: a baseline for what content-based scores add. Source positions at or beyond ``max_len`` share the
    score of the last one.

    Args:
        max_len: the source positions with their own score (decoding cuts sources at ``decode.max_src_len``,
            250 by default).
    Raises:
        ValueError: for ``max_len < 1``.
    """

    def __init__(self, query_size: int, key_size: int, max_len: int = 256):
        super().__init__(query_size, key_size)
        if max_len < 1:
            raise ValueError(f"location max_len must be >= 1 source position, got {max_len}")
        self.max_len = max_len
        self.W_a = nn.Linear(query_size, max_len)

    def score(self, query, prepared):
        """Scores ``[B, S]`` (``[B, K, S]``) from the query alone; ``prepared`` (the keys) gives only S."""
        source = prepared.size(1)
        index = torch.arange(source, device=query.device).clamp(max=self.max_len - 1)  # [S]
        return self.W_a(query).index_select(-1, index)

    def forward(self, query, keys, mask, prepared=None, positions=None, bias=None):
        """Context ``[B, Hk]`` and weights ``[B, S]`` (``[B, K, ...]`` for a ``[B, K, Hq]`` query); ``positions``
        is not needed (the target position is in the state)."""
        return super().forward(query, keys, mask, prepared, bias=bias)
