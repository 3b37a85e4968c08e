"""Ensemble decoding: several models of one vocabulary and direction search as one.

At every step each member computes its next-token log-probabilities from its own state and attention, and
the ensemble combines them: ``prob`` (the default, as fairseq and OpenNMT-py do) averages the probabilities,
``log p(y) = log (1/M) Σ_m p_m(y)``; ``loglinear`` (as Marian does) averages the log-probabilities, a geometric
mean that the search renormalizes. Greedy and beam search run unchanged on an :class:`Ensemble`: it offers the
``encode`` / ``decoder.step`` / ``decoder.input_gate_table`` interface of :class:`nmt.models.seq2seq.Seq2Seq`.
The exported alignment of a step is the mean of the members' attention weights (each member's own weights are
in :attr:`EnsembleDecoder.last_member_weights` after a step).

Members must share their SentencePiece models (checkpoints of one run, or runs trained with one subword model)
and their translation direction: :func:`load_ensemble` refuses others by name.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from nmt.decoding.hypothesis import log_probs
from nmt.models import checkpoint
from nmt.models.checkpoint import CheckpointError

COMBINATIONS = ("prob", "loglinear")


class _Members(tuple):
    """One entry per member (its memory or its decoder state); ``select`` reorders every member's rows alike."""

    def select(self, index: torch.Tensor) -> _Members:
        """The rows ``index`` ``[N]`` of each member's entry."""
        return _Members(entry.select(index) for entry in self)


class EnsembleDecoder:
    """The members' decoders stepping together (see the module docstring).

    Args:
        decoders: the members' :class:`nmt.models.decoder.Decoder` modules, all with the same target vocabulary.
        combine: ``prob`` or ``loglinear``.
    """

    def __init__(self, decoders: list, combine: str):
        self.decoders, self.combine = decoders, combine
        self.last_member_weights: list[torch.Tensor] = []

    def input_gate_table(self) -> tuple:
        """Each member's ``[V, 3H]`` table of the embedding's input-gate products (built once per search)."""
        return tuple(decoder.input_gate_table() for decoder in self.decoders)

    def step(self, y_prev: torch.Tensor, state: _Members, memory: _Members, gate_table: tuple | None = None):
        """One step of every member: ``y_prev`` ``[B]`` -> combined log-probabilities ``[B, V]`` (PAD and BOS at
        -inf), the members' new states, and the mean attention weights ``[B, S]``."""
        tables = gate_table if gate_table is not None else (None,) * len(self.decoders)
        outputs = [decoder.step(y_prev, s, m, g) for decoder, s, m, g in zip(self.decoders, state, memory, tables)]
        member_logp = torch.stack([log_probs(logits) for logits, _, _ in outputs])  # [M, B, V]
        if self.combine == "prob":
            combined = torch.logsumexp(member_logp, dim=0) - math.log(len(outputs))
        else:
            combined = member_logp.mean(dim=0)
        self.last_member_weights = [w for _, _, w in outputs]
        weights = torch.stack([w.float() for w in self.last_member_weights]).mean(dim=0)  # [B, S]
        return combined, _Members(s for _, s, _ in outputs), weights


class Ensemble:
    """Several trained models that translate as one (the search interface of a single model).

    Args:
        models: :class:`nmt.models.seq2seq.Seq2Seq` members on one device.
        combine: ``prob`` (average the probabilities) or ``loglinear`` (average the log-probabilities).
    Raises:
        ValueError: for no members, or an unknown ``combine``.
    """

    def __init__(self, models: list, combine: str = "prob"):
        if not models:
            raise ValueError("an ensemble needs at least one model")
        if combine not in COMBINATIONS:
            raise ValueError(f"ensemble combination {combine!r} is not one of {', '.join(COMBINATIONS)}")
        self.models = models
        self.decoder = EnsembleDecoder([m.decoder for m in models], combine)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> tuple[_Members, _Members]:
        """src ``[B, S]``, src_mask ``[B, S]`` -> (the members' memories, the members' initial states)."""
        pairs = [model.encode(src, src_mask) for model in self.models]
        return _Members(m for m, _ in pairs), _Members(s for _, s in pairs)

    def eval(self) -> Ensemble:
        """Every member in eval mode (no dropout); returns the ensemble."""
        for model in self.models:
            model.eval()
        return self


def _subwords(payload: dict) -> tuple:
    """What must be equal for members to share tokens: both SentencePiece models and any restricted vocabularies."""
    spm = payload["spm"]
    return tuple(spm[key].cpu().numpy().tobytes() if key in spm else None
                 for key in ("src", "tgt", "src_vocab", "tgt_vocab"))


def load_ensemble(paths: list[str | Path], device: str | torch.device = "cpu", combine: str = "prob"):
    """Load the checkpoints (files or run folders, as :func:`nmt.models.checkpoint.run_model` reads them) as one
    ensemble.

    Returns:
        ``(ensemble, cfg, src_tok, tgt_tok)``, the config and tokenizers of the first member.
    Raises:
        FileNotFoundError / CheckpointError: an unreadable checkpoint (named), and a member whose SentencePiece
            models or translation direction differ from the first member's.
        ValueError: an unknown ``combine``, or no paths.
    """
    if not paths:
        raise ValueError("an ensemble needs at least one checkpoint or run folder; the list is empty: give one "
                         "or more (on the command line checkpoint=RUN_DIR or checkpoint=[RUN_A,RUN_B/checkpoints/best.pt])")
    files = [checkpoint.run_model(p) for p in paths]
    loaded = [checkpoint.load(f, device) for f in files]
    _, first_cfg, src_tok, tgt_tok, first_payload = loaded[0]
    direction = (first_cfg.data.src_lang, first_cfg.data.tgt_lang)
    for file, (_, cfg, _, _, payload) in zip(files[1:], loaded[1:]):
        if (cfg.data.src_lang, cfg.data.tgt_lang) != direction:
            raise CheckpointError(f"{file}: translates {cfg.data.src_lang}->{cfg.data.tgt_lang}, {files[0]} "
                                  f"{direction[0]}->{direction[1]}: an ensemble needs one direction")
        if _subwords(payload) != _subwords(first_payload):
            raise CheckpointError(f"{file}: its subword models differ from {files[0]}'s: an ensemble needs members "
                                  "of one vocabulary (checkpoints of one run, or runs trained with the "
                                  "same SentencePiece models)")
    return Ensemble([model for model, *_ in loaded], combine).eval(), first_cfg, src_tok, tgt_tok
