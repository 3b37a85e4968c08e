"""Exponential moving average of the weights during training (``train.ema_decay``).

After every update the average moves towards the new weights,
``θ̄_t = d_t θ̄_{t-1} + (1 - d_t) θ_t`` with ``d_t = min(d, (1 + t) / (10 + t))``: Polyak averaging with an
exponential window (Polyak and Juditsky 1992), as Marian's ``--exponential-smoothing`` and fairseq's ``--ema``;
the warm-up ``d_t`` is TensorFlow's ``ExponentialMovingAverage(num_updates=t)``, so the first steps' random
weights are soon forgotten. With ``d = 0.999`` the average spans about 1/(1 - d) = 1,000 updates.

Training updates the raw weights θ; validation, ``best.pt``, ``step_N.pt`` and so every translation use the
average θ̄ (:meth:`ExponentialMovingAverage.applied`). Full checkpoints store θ̄ as their ``model`` (what loads
for translation) and θ as ``train_weights`` (what a resumed run continues training), see :mod:`nmt.state`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn


class ExponentialMovingAverage:
    """A shadow copy of a model's parameters that follows them with decay ``decay`` per update.

    Args:
        model: the model trained; its parameters (shared ones once: tied embeddings) are copied as the start.
        decay: d in [0, 1); 0 makes the average the current weights.

    Raises:
        ValueError: for a decay outside [0, 1).
    """

    def __init__(self, model: nn.Module, decay: float):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"train.ema_decay={decay} must be in [0, 1) (or null: no averaging)")
        self.decay = float(decay)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.shadow = [p.detach().clone() for p in self.params]

    def rate(self, step: int) -> float:
        """d_t for update number ``step`` (1 for the first update): ``min(d, (1 + step) / (10 + step))``."""
        return min(self.decay, (1.0 + step) / (10.0 + step))

    @torch.no_grad()
    def update(self, step: int) -> None:
        """Move the average towards the model's current weights after update number ``step``."""
        weight = 1.0 - self.rate(step)
        torch._foreach_lerp_(self.shadow, [p.detach() for p in self.params], weight)

    @contextmanager
    @torch.no_grad()
    def applied(self) -> Iterator[None]:
        """Within the block the model holds the averaged weights; the raw ones come back on exit (also after an
        exception), bit for bit."""
        raw = [p.detach().clone() for p in self.params]
        torch._foreach_copy_([p.data for p in self.params], self.shadow)
        try:
            yield
        finally:
            torch._foreach_copy_([p.data for p in self.params], raw)
