"""Random inputs shared by the attention and decoder tests (not a test module: imported by them)."""

import torch

from nmt.data.tokenizer import BOS_ID, PAD_ID


def make_batch(lengths, S=None, seed=1, hidden=8, scale=1.0):
    """Random queries ``[B, hidden]`` and keys ``[B, S, hidden]`` (times ``scale``: far from uniform rows when
    large) and the mask ``[B, S]`` of ``lengths`` (S: the longest plus 2 padding positions unless given)."""
    g = torch.Generator().manual_seed(seed)
    S = S or max(lengths) + 2
    query = scale * torch.randn(len(lengths), hidden, generator=g)
    keys = scale * torch.randn(len(lengths), S, hidden, generator=g)
    mask = torch.arange(S).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    return query, keys, mask


def padded(lengths, vocab, S=None, seed=1):
    """Source ids ``[B, S]``: random ids in ``[4, vocab)`` ending in EOS (3), then padding; and the mask."""
    g = torch.Generator().manual_seed(seed)
    S = S or max(lengths)
    src = torch.full((len(lengths), S), PAD_ID)
    for b, n in enumerate(lengths):
        src[b, : n - 1] = torch.randint(4, vocab, (n - 1,), generator=g)
        src[b, n - 1] = 3  # EOS
    return src, src != PAD_ID


def teacher_forced(model, src_row, ids):
    """Teacher forcing of the hypothesis ``ids`` for the source ``src_row`` ``[S_b]``: its alignment
    ``[len(ids), S_b]`` and per-head alignments ``[heads, len(ids), S_b]`` (None without multi-head attention)."""
    tgt_in = torch.tensor([[BOS_ID] + ids[:-1]])
    with torch.no_grad():
        _, weights, heads = model.teacher_force(src_row.unsqueeze(0), (src_row != PAD_ID).unsqueeze(0), tgt_in)
    return weights[0], None if heads is None else heads[0].transpose(0, 1)
