"""The bidirectional GRU encoder (Bahdanau et al. 2015, §3.2): source ids ``[B, S]`` -> keys ``[B, S, H]`` (the
two directions' states, H/2 each, concatenated) and the decoder's initial state ``[L, B, H]``.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from nmt.models.layers import Dropout, WordDropout


class Encoder(nn.Module):
    """Embeddings -> bidirectional GRU over packed sequences -> keys ``[B, S, H]`` and a bridge.

    Each direction has ``hidden_size // 2`` units, so the concatenated states h̄_s = [→h_s; ←h_s] have the
    decoder's size H and dot attention is legal by construction. The decoder's initial state is a learned
    bridge ``tanh(W_b [→h_S; ←h_1])`` from the final forward and backward states of the top layer, one H-vector
    per decoder layer.

    ``word_dropout``: the :class:`WordDropout` probability on the source embeddings (before ``dropout``).

    Raises:
        ValueError: if ``hidden_size`` is odd, or ``word_dropout`` is outside [0, 1).
    """

    def __init__(self, vocab_size: int, emb_size: int, hidden_size: int, num_layers: int = 1,
                 dropout: float = 0.3, decoder_layers: int = 1, pad_id: int = 0, word_dropout: float = 0.0):
        super().__init__()
        if hidden_size % 2:
            raise ValueError(f"hidden_size must be even (two directions of hidden_size/2), got {hidden_size}")
        self.embed = nn.Embedding(vocab_size, emb_size, padding_idx=pad_id)
        self.word_dropout = WordDropout(word_dropout)
        self.dropout = Dropout(dropout)
        self.rnn = nn.GRU(emb_size, hidden_size // 2, num_layers, batch_first=True, bidirectional=True,
                          dropout=dropout if num_layers > 1 else 0.0)
        self.bridge = nn.Linear(hidden_size, decoder_layers * hidden_size)
        self.decoder_layers = decoder_layers

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode a padded batch.

        Args:
            src: ``[B, S]`` source ids. src_mask: ``[B, S]`` bool, True on real tokens (padding at the end).

        Returns:
            keys ``[B, S, H]`` (zeros on padding) and the initial decoder hidden state ``[L, B, H]``.
        """
        lengths = src_mask.sum(dim=1)  # [B]
        emb = self.dropout(self.word_dropout(self.embed(src)))  # [B, S, E]
        packed = pack_padded_sequence(emb, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, h_n = self.rnn(packed)  # h_n [2*layers, B, H/2]
        keys, _ = pad_packed_sequence(out, batch_first=True, total_length=src.size(1))  # [B, S, H]
        final = torch.cat([h_n[-2], h_n[-1]], dim=1)  # [B, H]
        hidden = torch.tanh(self.bridge(final))  # [B, L*H]
        hidden = hidden.view(src.size(0), self.decoder_layers, -1).transpose(0, 1).contiguous()  # [L, B, H]
        return self.dropout(keys), hidden
