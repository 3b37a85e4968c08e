"""Exponential moving average of the weights during training (``train.ema_decay``).

After every update the average moves towards the new weights,
``θ̄_n = d_n θ̄_{n-1} + (1 - d_n) θ_n`` with ``d_n = min(d, (1 + n) / (10 + n))`` for the average's n-th update:
iterate averaging (Polyak and Juditsky 1992) with an exponential window, as Marian's exponential smoothing
(Junczys-Dowmunt et al. 2018; its ``--exponential-smoothing`` is 1 - d) and fairseq's ``--ema``; the warm-up d_n
is TensorFlow's ``ExponentialMovingAverage(num_updates=n)``, so the first updates' weights are soon forgotten. With
``d = 0.999`` the average spans about 1/(1 - d) = 1,000 updates.

Training updates the raw weights θ; validation, ``best.pt``, ``step_N.pt`` and so every translation use the
average θ̄. Full checkpoints store θ̄ as their ``model`` (what loads for translation) and θ as ``train_weights``
(what a resumed run continues training), see :mod:`nmt.training.state`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import torch
from torch import nn

# what d means, for the error messages (here and in training.check_numbers): Marian counts the other way round
DECAY_MEANING = "the share of the old average kept per update (Marian's --exponential-smoothing 1e-4 is 0.9999 here)"


class ExponentialMovingAverage:
    """A shadow copy of a model's trainable parameters that follows them with decay ``decay`` per update.

    Build it after the model is on its device: the average is kept on the same device and in the same dtype as
    each parameter (one extra copy of the weights). Parameters shared between modules (tied embeddings) are
    averaged once; parameters with ``requires_grad=False`` never change and are not tracked.

    Args:
        model: the model trained.
        decay: d in [0.5, 1) (``train.ema_decay``).
        start: a state dict (``model.state_dict()`` keys) whose values begin the average, e.g. the average saved in
            a checkpoint; None starts from the model's current weights.
        updates: how many updates the average has already followed (for the warm-up d_n after a resume).

    Raises:
        ValueError: for a decay outside [0.5, 1).
        KeyError: if ``start`` lacks a parameter of the model.
    """

    def __init__(self, model: nn.Module, decay: float, start: Mapping[str, torch.Tensor] | None = None,
                 updates: int = 0):
        if not 0.5 <= decay < 1.0:
            raise ValueError(f"train.ema_decay={decay} must be in [0.5, 1), {DECAY_MEANING}, or null: no average")
        self.decay = float(decay)
        self.updates = int(updates)
        named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]  # shared ones once
        self.params = [p for _, p in named]
        with torch.no_grad():
            self.shadow = [(p if start is None else start[name].to(p.device, p.dtype)).detach().clone()
                           for name, p in named]

    def rate(self, n: int) -> float:
        """d_n for the average's n-th update (1 for the first): ``min(d, (1 + n) / (10 + n))``."""
        return min(self.decay, (1.0 + n) / (10.0 + n))

    @torch.no_grad()
    def update(self) -> None:
        """Move the average towards the model's current weights (call after each optimizer step)."""
        self.updates += 1
        weight = 1.0 - self.rate(self.updates)
        for shadow, p in zip(self.shadow, self.params, strict=True):
            shadow.lerp_(p.detach(), weight)

    def averaged_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """``model.state_dict()`` with the average in place of each tracked parameter (the average's own tensors,
        not copies; a tied matrix appears under both names as one tensor, as in the model's own state dict)."""
        by_param = {id(p): shadow for p, shadow in zip(self.params, self.shadow, strict=True)}
        return {key: by_param.get(id(value), value.detach())  # keep_vars: the Parameter objects themselves
                for key, value in model.state_dict(keep_vars=True).items()}

    @contextmanager
    def applied(self) -> Iterator[None]:
        """Within the block the model holds the averaged weights (for validation); the raw ones come back on exit,
        also after an exception, bit for bit. Costs one copy of the weights. Not for use between a forward pass
        and its backward: the swap bumps the parameters' version counters, so autograd refuses such a backward."""
        with torch.no_grad():
            raw = [p.detach().clone() for p in self.params]
            for p, shadow in zip(self.params, self.shadow, strict=True):
                p.copy_(shadow)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, saved in zip(self.params, raw, strict=True):
                    p.copy_(saved)
