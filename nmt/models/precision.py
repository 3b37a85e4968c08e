"""Numeric precision of training and translation: ``fp32``, or mixed precision with ``torch.autocast`` in
``bf16`` (CPU and GPU) or ``fp16`` (CUDA, with a gradient scaler). Weights, optimizer state and checkpoints stay
fp32 either way; only the forward's products and activations run in half precision.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def check_precision(precision: str, device: torch.device, key: str = "train.precision") -> None:
    """Refuse a precision setting (``key``) that cannot run here, before any work.

    Raises:
        ValueError: for a name other than fp32/bf16/fp16, or fp16 on a CPU (its gradient scaler and half
            kernels need CUDA; bf16 runs on both).
    """
    if precision not in PRECISIONS:
        raise ValueError(f"{key}={precision} is not one of {', '.join(PRECISIONS)}")
    if precision == "fp16" and device.type != "cuda":
        raise ValueError(f"{key}=fp16 needs a CUDA device (device=cuda); on a CPU use {key}=bf16")


class Precision:
    """The autocast context of ``train.precision`` and, for fp16, the gradient scaler (fp16's small range
    underflows small gradients without one; bf16 has fp32's range and needs none)."""

    def __init__(self, precision: str, device: torch.device):
        self.name, self.device_type, self.dtype = precision, device.type, PRECISIONS[precision]
        self.scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None

    def autocast(self):
        """The context the forward and the loss run in."""
        return torch.autocast(self.device_type, dtype=self.dtype) if self.dtype is not None else nullcontext()


FP32 = Precision("fp32", torch.device("cpu"))
