"""Agreement-based joint training of the two directions (Cheng et al. 2016, "Agreement-based joint training for
bidirectional attention-based neural machine translation", IJCAI): one run trains a source -> target model and a
target -> source model on the same batches, with a term that rewards agreement of their attention matrices::

    J = NLL(y | x; θ_xy) + NLL(x | y; θ_yx) + λ · Σ_sentences Δ(A_xy, A_yxᵀ)

A_xy ``[B, T, S]`` is the forward model's teacher-forced attention (row t: target piece y_t, column s: source
piece x_s), A_yx ``[B, S, T]`` the reverse model's on the same pair read the other way round, so ``A_yxᵀ[t, s]``
links the same two pieces. Cheng et al.'s disagreement measures Δ (their eqs. 10 and 12; ``train.agreement.loss``):

- ``square`` (square of subtraction): Δ = Σ_t Σ_s (A_xy[t, s] − A_yx[s, t])²
- ``product`` (multiplication, their best for AER): Δ = −log Σ_t Σ_s A_xy[t, s] · A_yx[s, t]

The choices the paper leaves open, as taken here:

- Δ is computed on the subword-piece matrices, over the real pieces only: padding is excluded, and so are the
  end-of-sentence row and column of each matrix (the forward model's </s> row and column are the reverse model's
  </s> column and row). BOS is never a row or a column (it is the decoder's first input, not an output). Keeping
  </s> would let ``product`` be satisfied by both models putting their </s> row's mass on the other </s>, an
  agreement that says nothing about the words; the gold links never involve it either.
- Δ is summed over the sentences of a batch and, like both NLL sums (with label smoothing, as training uses),
  divided by the update's number of target tokens (:func:`nmt.training.step.train_step`), so λ = 1 weighs one
  sentence's Δ like one target token's loss. The training loss reported (log, ``metrics.jsonl``, divergence check)
  stays the forward model's alone, comparable with one-direction runs.
- Both models share one Adam optimizer and one gradient-norm clipping (``train.clip``) over all their weights.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from nmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from nmt.training.loss import loss_fn

LOSSES = ("product", "square")  # train.agreement.loss
TINY = 1e-12  # the floor of the agreement mass under -log (attention weights may be exactly 0: local attention)


def agreement_settings(t) -> dict | None:
    """``train.agreement`` (``t`` is ``cfg.train``) as ``{"loss", "weight"}``, or None when it is off (the node or
    its ``weight`` null).

    Raises:
        ValueError: an unknown key or loss (listing the valid ones), or a weight that is not a finite number >= 0,
            each naming the setting.
    """
    node = t.get("agreement")
    if node is None:
        return None
    if not hasattr(node, "keys"):
        raise ValueError(f"train.agreement={node!r} must be null or a mapping {{weight: λ, loss: product|square}}")
    given = dict(node)
    if unknown := sorted(set(given) - {"weight", "loss"}):
        raise ValueError(f"train.agreement: unknown key(s) {', '.join(map(str, unknown))}; keys: weight, loss")
    weight, loss = given.get("weight"), given.get("loss") or "product"
    if weight is None:
        return None
    if loss not in LOSSES:
        raise ValueError(f"train.agreement.loss={loss!r}; valid: {', '.join(LOSSES)} (Cheng et al. 2016: "
                         "product = -log Σ A_xy·A_yxᵀ, square = Σ (A_xy - A_yxᵀ)²)")
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight < 0:
        raise ValueError(f"train.agreement.weight={weight!r} must be a number >= 0 (λ, the weight of the agreement "
                         "term; null: one direction, no joint training)")
    return {"loss": loss, "weight": float(weight)}


def piece_pairs(src: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
    """The cells of the forward attention that the agreement compares: ``[B, T, S]`` bool, True where target
    piece t and source piece s are both real pieces (not padding, not </s>). src ``[B, S]``, tgt_out ``[B, T]``."""
    src_words = (src != PAD_ID) & (src != EOS_ID)  # [B, S]
    tgt_words = (tgt_out != PAD_ID) & (tgt_out != EOS_ID)  # [B, T]
    return tgt_words.unsqueeze(2) & src_words.unsqueeze(1)  # [B, T, S]


def agreement_loss(a_xy: torch.Tensor, a_yx: torch.Tensor, pairs: torch.Tensor, loss: str) -> torch.Tensor:
    """Δ per sentence (Cheng et al. 2016): ``[B]``.

    Args:
        a_xy: ``[B, T, S]`` the forward model's attention. a_yx: ``[B, S, T]`` the reverse model's.
        pairs: ``[B, T, S]`` bool, the cells compared (:func:`piece_pairs`); a sentence without any gets Δ = 0.
        loss: ``"square"``: Σ (A_xy − A_yxᵀ)²; ``"product"``: −log Σ A_xy · A_yxᵀ (both over ``pairs``).

    Raises:
        ValueError: an unknown ``loss`` or shapes that do not transpose onto each other.
    """
    if a_yx.shape != (a_xy.size(0), a_xy.size(2), a_xy.size(1)) or pairs.shape != a_xy.shape:
        raise ValueError(f"expected a_xy [B, T, S], a_yx [B, S, T] and pairs [B, T, S], got {tuple(a_xy.shape)}, "
                         f"{tuple(a_yx.shape)} and {tuple(pairs.shape)}")
    a_xy, a_yx_t = a_xy.float(), a_yx.float().transpose(1, 2)  # [B, T, S] each
    keep = pairs.to(a_xy.dtype)
    if loss == "square":
        delta = ((a_xy - a_yx_t).square() * keep).sum(dim=(1, 2))  # [B]
    elif loss == "product":
        delta = -torch.log((a_xy * a_yx_t * keep).sum(dim=(1, 2)).clamp_min(TINY))  # [B]
    else:
        raise ValueError(f"agreement loss {loss!r}; valid: {', '.join(LOSSES)}")
    return torch.where(pairs.flatten(1).any(dim=1), delta, torch.zeros_like(delta))


def reverse_batch(src: torch.Tensor, tgt_out: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The same sentence pairs for the reverse model, from the same token ids: src ``[B, S]`` (x + </s>),
    tgt_out ``[B, T]`` (y + </s>) -> ``(src' [B, T], src_mask' [B, T], tgt_in' [B, S], tgt_out' [B, S])`` with
    src' = y + </s>, tgt_in' = BOS + x, tgt_out' = x + </s> (padded as :func:`nmt.data.batches.collate` pads)."""
    shifted = torch.cat([torch.full_like(src[:, :1], BOS_ID), src[:, :-1]], dim=1)  # [B, S]
    tgt_in = shifted.masked_fill(shifted == EOS_ID, PAD_ID)  # the </s> of x is an output, never an input
    return tgt_out, tgt_out != PAD_ID, tgt_in, src


class Bidirectional(nn.Module):
    """The two models of an agreement run and their joint objective (the module the updates run through).

    Args:
        xy: the source -> target model (:class:`nmt.models.seq2seq.Seq2Seq`), the run's main model.
        yx: the target -> source model, with the two vocabularies the other way round.
        loss: ``"product"`` or ``"square"`` (:func:`agreement_loss`). weight: λ >= 0.
    """

    def __init__(self, xy: nn.Module, yx: nn.Module, loss: str, weight: float):
        super().__init__()
        self.xy, self.yx, self.loss, self.weight = xy, yx, loss, weight

    def forward(self, src, src_mask, tgt_in, tgt_out, label_smoothing: float = 0.0):
        """Teacher-forced batch (as :class:`nmt.data.batches.Batch`) -> ``(objective, nll_xy, nll_yx, delta)``:
        the summed objective to minimise, the two summed label-smoothed NLLs and Σ Δ over the batch (scalars)."""
        logits, a_xy = self.xy(src, src_mask, tgt_in)  # [B, T, V], [B, T, S]
        r_src, r_mask, r_tgt_in, r_tgt_out = reverse_batch(src, tgt_out)
        r_logits, a_yx = self.yx(r_src, r_mask, r_tgt_in)  # [B, S, V'], [B, S, T]
        nll_xy = loss_fn(logits.float(), tgt_out, label_smoothing)
        nll_yx = loss_fn(r_logits.float(), r_tgt_out, label_smoothing)
        delta = agreement_loss(a_xy, a_yx, piece_pairs(src, tgt_out), self.loss).sum()
        return nll_xy + nll_yx + self.weight * delta, nll_xy, nll_yx, delta


def joint_objective(model, batch, label_smoothing: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss of one batch for :func:`nmt.training.step.train_step` with agreement: ``model`` is the
    :class:`Bidirectional` module (or its DDP wrapper) -> ``(objective, forward NLL)``, both summed."""
    objective, nll_xy, _, _ = model(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_out, label_smoothing)
    return objective, nll_xy
