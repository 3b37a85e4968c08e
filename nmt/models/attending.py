"""How the decoder calls its attention (shape letters as in :mod:`nmt.models.decoder`): one query row per
sentence, K hypotheses of a beam sharing their sentence's keys, one target step after another from a state, or
all T queries of a sentence at once.
"""

from __future__ import annotations

import torch

from nmt.models.attention import Attention
from nmt.models.state import DecoderState, Memory

ATTEND_ELEMENTS = 1 << 24  # floats per slice of queries when attending with all T at once without autograd


def attend(attention: Attention, query: torch.Tensor, memory: Memory, state: DecoderState) -> tuple:
    """Attention for query ``[N, H]`` at target position ``state.step`` over memory of M rows -> context
    ``[N, H]``, weights ``[N, S]``, per-head weights ``[N, heads, S]`` or None (``Attention.attend``); an
    attention with Markov or fertility biases (``uses_history``) also reads the state's previous weights and
    coverage ``[N, S]``.

    N = M (one query per sentence) or N = K·M: K consecutive query rows per memory row, the K hypotheses
    of a beam, which then share their sentence's keys instead of K copies of them.

    Raises:
        ValueError: if N is not a multiple of M.
    """
    M = memory.keys.size(0)
    history = {"previous": state.previous, "coverage": state.coverage} if attention.uses_history else {}
    if query.size(0) == M:
        return attention.attend(query, memory.keys, memory.mask, memory.prepared, positions=state.step, **history)
    if M == 0 or query.size(0) % M:
        raise ValueError(f"{query.size(0)} decoder rows cannot share a memory of {M} rows: "
                         "need a multiple (K hypotheses per sentence)")
    history = {key: None if x is None else x.view(M, -1, x.size(-1)) for key, x in history.items()}  # [M, K, S]
    attended = attention.attend(query.view(M, -1, query.size(-1)), memory.keys, memory.mask, memory.prepared,
                                positions=state.step, **history)  # [M, K, H], [M, K, S], [M, K, heads, S]
    return tuple(None if x is None else x.flatten(0, 1) for x in attended)


def attend_steps(attention: Attention, queries: torch.Tensor, memory: Memory, state: DecoderState) -> tuple:
    """As :func:`attend_all`, one target step after another from ``state``: for an attention whose step t
    reads the weights of the steps before it (Markov and fertility biases), as search computes it."""
    parts = []
    for query in queries.unbind(1):
        context, weights, heads = attend(attention, query, memory, state)  # [B, H], [B, S], [B, heads, S]
        state = state.after(state.hidden, state.input_feed, heads, weights, attention.uses_history)
        parts.append((context, weights, heads))
    return tuple(None if part[0] is None else torch.stack(part, dim=1) for part in zip(*parts))


def attend_all(attention: Attention, queries: torch.Tensor, memory: Memory) -> tuple:
    """Attention for all T queries ``[B, T, H]`` of a sentence at once -> context ``[B, T, H]``, weights
    ``[B, T, S]``, per-head weights ``[B, T, heads, S]`` or None. Without autograd (validation, forced
    alignment) the queries go in slices of T, so that the additive energies ``[B, t, S, A]`` stay near
    ``ATTEND_ELEMENTS`` floats instead of growing as B·T·S·A; training needs every slice's energies for
    backward anyway, as the stepping decoder does."""
    B, T, _ = queries.shape
    A = max(memory.prepared.size(-1), memory.keys.size(-1))  # the widest per-(query, source) tensor
    step = T if torch.is_grad_enabled() else max(1, ATTEND_ELEMENTS // max(1, B * memory.keys.size(1) * A))
    positions = torch.arange(T, device=queries.device).unsqueeze(0)  # [1, T]: target position t of each query
    if step >= T:
        return attention.attend(queries, memory.keys, memory.mask, memory.prepared, positions=positions)
    parts = [attention.attend(q, memory.keys, memory.mask, memory.prepared, positions=p)
             for q, p in zip(queries.split(step, dim=1), positions.split(step, dim=1))]
    return tuple(None if part[0] is None else torch.cat(part, dim=1) for part in zip(*parts))
