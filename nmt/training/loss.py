"""Label-smoothed cross-entropy with a fused backward pass: the training loss of the output layer.

``F.cross_entropy(..., label_smoothing=eps)`` gives the same values and gradients, but its backward runs through
the NLL, the smoothing sum and the log-softmax separately: about seven passes over the ``[N, V]`` logits
(zero-fill, scatter, expand, add, copy, exp, multiply-add), the second largest cost of a training step after the
matrix products. The gradient has a closed form, ``softmax(z) - q`` with q the smoothed target distribution
(Szegedy et al. 2016, §7), which is computed here in three passes.

:func:`loss_fn` sums it over the non-pad target tokens of a batch.
"""

from __future__ import annotations

import logging

import torch

from nmt.data.tokenizer import PAD_ID

log = logging.getLogger(__name__)


def loss_fn(logits: torch.Tensor, tgt_out: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """Summed cross-entropy (nats) over non-pad target tokens: logits ``[B, T, V]``, tgt_out ``[B, T]``."""
    return label_smoothed_cross_entropy(logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1), label_smoothing,
                                        ignore_index=PAD_ID)


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Summed label-smoothed cross-entropy over the rows whose target is not ``ignore_index``."""

    @staticmethod
    def forward(ctx, logits, target, smoothing, ignore_index):
        log_probs = torch.log_softmax(logits, dim=-1)  # [N, V]
        keep = target != ignore_index  # [N]
        drop = ~keep
        safe = target.masked_fill(drop, 0)
        nll = -log_probs.gather(1, safe.unsqueeze(1)).squeeze(1)  # [N]
        loss = (1.0 - smoothing) * nll
        if smoothing:
            loss = loss - smoothing * log_probs.mean(dim=1)  # uniform part: -(eps/V) * sum_v log p_v
        ctx.save_for_backward(log_probs, safe, keep)
        ctx.smoothing = smoothing
        return loss.masked_fill(drop, 0.0).sum()

    @staticmethod
    def backward(ctx, grad):
        if torch.is_grad_enabled():  # create_graph=True: the closed form below is not differentiable again
            raise RuntimeError("label_smoothed_cross_entropy has first derivatives only (create_graph=True was "
                               "asked for); use torch.nn.functional.cross_entropy for higher-order gradients")
        log_probs, safe, keep = ctx.saved_tensors
        eps, vocab = ctx.smoothing, log_probs.size(1)
        grad_logits = log_probs.exp()  # softmax(z)  [N, V]
        if eps:
            grad_logits.sub_(eps / vocab)
        grad_logits.scatter_add_(1, safe.unsqueeze(1), grad_logits.new_full((safe.size(0), 1), eps - 1.0))
        grad_logits.mul_((keep.to(grad_logits.dtype) * grad).unsqueeze(1))  # 0 on ignored rows
        return grad_logits, None, None, None


def label_smoothed_cross_entropy(logits: torch.Tensor, target: torch.Tensor, smoothing: float = 0.0,
                                 ignore_index: int = -100) -> torch.Tensor:
    """Summed cross-entropy (nats) between ``softmax(logits)`` and the smoothed target distribution
    ``q = (1 - eps) * onehot(target) + eps / V`` (Szegedy et al. 2016, §7; the form of PyTorch's
    ``F.cross_entropy(label_smoothing=eps, reduction="sum")``, whose values and gradients it reproduces).

    Args:
        logits: ``[N, V]`` unnormalized scores (float).
        target: ``[N]`` int64 class ids; rows equal to ``ignore_index`` add nothing to the loss or the gradient.
        smoothing: eps in [0, 1).

    Returns:
        a scalar tensor: the sum over the kept rows.

    Raises:
        ValueError: for smoothing outside [0, 1) or mismatched shapes.
        RuntimeError: from autograd, when a second derivative is asked for (the backward is first-order only).
    """
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"label smoothing must be in [0, 1), got {smoothing}")
    if logits.dim() != 2 or target.shape != logits.shape[:1]:
        raise ValueError(f"expected logits [N, V] and target [N], got {tuple(logits.shape)} and {tuple(target.shape)}")
    return _SmoothedCrossEntropy.apply(logits, target, float(smoothing), ignore_index)
