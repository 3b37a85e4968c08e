"""R-Drop: consistency between two dropout samples of the model (Liang et al. 2021, "R-Drop: Regularized Dropout
for Neural Networks", NeurIPS, eq. 3), fairseq's ``--rdrop-alpha``, ``train.rdrop_alpha`` here::

    J = ½ (CE(P1) + CE(P2)) + α/4 · Σ_tokens (KL(P1 ‖ P2) + KL(P2 ‖ P1))

Every pair of a batch goes through the model twice, in one forward of the batch stacked on itself, so the two
copies draw other dropout masks (word dropout too); P1 and P2 are their output distributions at each target
position, CE the label-smoothed cross-entropy of the training loss. The paper's loss is twice this (the two
cross-entropies summed, α/2 on the summed KL terms), so α means what it means there and in fairseq (α = 5 for
their translation models); dividing by 2 keeps the update's scale that of one copy. Each update costs about two
forward and backward passes of its batch.

The reported training loss stays the cross-entropy (the mean of the two copies); the symmetric KL term per
target token of the batches since the last validation, without α, goes into ``metrics.jsonl`` as
``rdrop_term`` (nats) and the validation's log line.
"""

from __future__ import annotations

import torch

from nmt.data.batches import Batch
from nmt.data.tokenizer import PAD_ID
from nmt.training.loss import loss_fn


def symmetric_kl(logits_1: torch.Tensor, logits_2: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Σ over the kept positions of KL(P1 ‖ P2) + KL(P2 ‖ P1) = Σ_v (p1 − p2)(log p1 − log p2), P = softmax of the
    logits ``[N, V]`` (computed in float32); keep ``[N]`` bool -> a scalar (nats)."""
    log_p1 = torch.log_softmax(logits_1.float(), dim=-1)
    log_p2 = torch.log_softmax(logits_2.float(), dim=-1)
    per_position = ((log_p1.exp() - log_p2.exp()) * (log_p1 - log_p2)).sum(dim=-1)  # [N]
    return per_position.masked_fill(~keep, 0.0).sum()


class RDropObjective:
    """The loss of one batch with R-Drop (module docstring), for :func:`nmt.training.step.train_step`: calling it
    with ``(model, batch, label_smoothing)`` gives ``(½ (CE1 + CE2) + α/4 · KL term, ½ (CE1 + CE2))``, both summed
    over the batch's target tokens. :meth:`window` reports the KL term since its last call.

    Args:
        alpha: α > 0, the weight of the KL term (the paper's).

    Raises:
        ValueError: for α <= 0 or not finite.
    """

    def __init__(self, alpha: float):
        if not alpha > 0 or alpha == float("inf"):
            raise ValueError(f"train.rdrop_alpha={alpha}: the weight of the R-Drop term must be a positive number "
                             "(e.g. 5, the paper's for translation), or null: off")
        self.alpha = float(alpha)
        self.term: torch.Tensor | float = 0.0  # summed KL term (nats) since the last window(), detached
        self.tokens = 0  # target tokens of those batches (one copy's)

    def __call__(self, model, batch: Batch, label_smoothing: float) -> tuple[torch.Tensor, torch.Tensor]:
        logits, _ = model(batch.src.repeat(2, 1), batch.src_mask.repeat(2, 1), batch.tgt_in.repeat(2, 1))
        logits, vocab = logits.float(), logits.size(-1)  # cast once (bf16 under autocast): both terms read it
        cross_entropy = 0.5 * loss_fn(logits, batch.tgt_out.repeat(2, 1), label_smoothing)
        first, second = logits.chunk(2, dim=0)  # [B, T, V] each: the two dropout samples
        term = symmetric_kl(first.reshape(-1, vocab), second.reshape(-1, vocab), batch.tgt_out.reshape(-1) != PAD_ID)
        self.term = self.term + term.detach()  # no device sync per step: read once per window
        self.tokens += batch.num_tgt_tokens
        return cross_entropy + 0.25 * self.alpha * term, cross_entropy

    def window(self) -> dict:
        """``{"rdrop_term": nats per target token}`` of the batches since the last call (``{}`` when none), and a
        new window."""
        found = {"rdrop_term": float(self.term) / self.tokens} if self.tokens else {}
        self.term, self.tokens = 0.0, 0
        return found


def rdrop_objective(t) -> RDropObjective | None:
    """The training objective of ``train.rdrop_alpha`` (``t`` is ``cfg.train``); None when it is null (off).

    Raises:
        ValueError: for a weight that is not a positive number.
    """
    alpha = t.get("rdrop_alpha")
    return None if alpha is None else RDropObjective(alpha)


def check_rdrop(cfg) -> None:
    """The checks of ``train.rdrop_alpha`` that need no corpus (:func:`nmt.training.checks.check_settings`, whose
    :func:`~nmt.training.checks.check_numbers` has refused a weight that is not a positive number before).

    Raises:
        ValueError: R-Drop with ``train.agreement`` or ``train.guided_alignment`` (their terms are not combined
            with it).
    """
    if cfg.train.get("rdrop_alpha") is None:
        return
    for key in ("agreement", "guided_alignment"):
        node = cfg.train.get(key)
        if node is not None and node.get("weight") is not None:
            raise ValueError(f"train.rdrop_alpha does not combine with train.{key}: set one of "
                             f"train.rdrop_alpha=null or train.{key}.weight=null")

