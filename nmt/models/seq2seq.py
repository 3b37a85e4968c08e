"""The encoder-decoder: ``Seq2Seq(encoder, decoder)`` wires :mod:`nmt.models.encoder` to :mod:`nmt.models.decoder`
for teacher forcing (training) and step-by-step decoding (search).
"""

from __future__ import annotations

import torch
from torch import nn

from nmt.models.decoder import Decoder, DecoderState, Memory
from nmt.models.encoder import Encoder


class Seq2Seq(nn.Module):
    """Encoder + attentional decoder (Bahdanau et al. 2015; Luong et al. 2015)."""

    def __init__(self, encoder: Encoder, decoder: Decoder):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> tuple[Memory, DecoderState]:
        """src ``[B, S]``, src_mask ``[B, S]`` -> (:class:`Memory`, initial :class:`DecoderState`)."""
        keys, hidden = self.encoder(src, src_mask)
        memory = Memory(keys, self.decoder.attention.prepare(keys), src_mask)
        return memory, self.decoder.init_state(hidden)

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor):
        """Teacher forcing: src ``[B, S]``, src_mask ``[B, S]``, tgt_in ``[B, T]`` ->
        logits ``[B, T, V]``, alignments ``[B, T, S]``."""
        memory, state = self.encode(src, src_mask)
        return self.decoder(tgt_in, state, memory)

    def teacher_force(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor):
        """As :meth:`forward`, plus every head's alignments ``[B, T, heads, S]`` of a multi-head attention (their
        mean is the alignments), else None: ``(logits, alignments, heads)``."""
        memory, state = self.encode(src, src_mask)
        return self.decoder.teacher_force(tgt_in, state, memory)
