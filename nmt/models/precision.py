"""Numeric precision of training and translation: ``fp32``, or mixed precision with ``torch.autocast`` in
``bf16`` (CPU and GPU) or ``fp16`` (CUDA, with a gradient scaler). Weights, optimizer state and checkpoints stay
fp32 either way; only the forward's products and activations run in half precision. ``auto`` picks the faster
of fp32 and bf16 for this model on the device at hand (:func:`auto_precision`).
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from pathlib import Path

import torch

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
CHOICES = (*PRECISIONS, "auto")
BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # x86 CPU flags of hardware bf16 products (AVX-512 BF16, AMX)
KERNEL_CACHE = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"  # oneDNN's per-shape kernel cache, 1,024 shapes by default
TRAINING_KERNEL_CACHE = 256  # its size in bf16 training on a CPU: about 0.1 GB less at its peak, 3% slower


def cpu_has_bf16(cpuinfo: str | Path = "/proc/cpuinfo") -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware: one of ``BF16_FLAGS`` among the ``flags`` of
    ``cpuinfo`` (Linux). False where the file cannot be read (another system): bf16 is then not assumed fast."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return False
    flags = {flag for line in text.splitlines() if line.startswith("flags") for flag in line.split(":", 1)[-1].split()}
    return any(flag in flags for flag in BF16_FLAGS)


def auto_precision(device: torch.device) -> str:
    """``auto``: bf16 on a CPU with bf16 units (:func:`cpu_has_bf16`), where this model's products dominate a
    training step and run about 2.5 times as fast as in fp32; fp32 elsewhere: CPUs without them have no
    hardware path for bf16 products, and on a GPU this model is bound by kernel launches, not by its products,
    so bf16 only adds casts (docs/scaling.md, Mixed precision)."""
    return "bf16" if device.type == "cpu" and cpu_has_bf16() else "fp32"


def check_precision(precision: str, device: torch.device, key: str = "train.precision") -> str:
    """Refuse a precision setting (``key``) that cannot run here, before any work, and return the precision to
    run: ``precision`` itself, or for ``auto`` the one :func:`auto_precision` picks (fp32 or bf16).

    Raises:
        ValueError: for a name other than fp32/bf16/fp16/auto, or fp16 on a CPU (its gradient scaler and half
            kernels need CUDA; bf16 runs on both).
    """
    if precision not in CHOICES:
        raise ValueError(f"{key}={precision} is not one of {', '.join(CHOICES)}")
    if precision == "fp16" and device.type != "cuda":
        raise ValueError(f"{key}=fp16 needs a CUDA device (device=cuda); on a CPU use {key}=bf16")
    return auto_precision(device) if precision == "auto" else precision


def bound_kernel_cache(precision: str, device: torch.device, capacity: int = TRAINING_KERNEL_CACHE,
                       environ=os.environ) -> str:
    """Keep at most ``capacity`` shapes in oneDNN's kernel cache (``ONEDNN_PRIMITIVE_CACHE_CAPACITY``) for bf16
    on a CPU, unless that variable is set already (empty counts as unset); fp32 and GPU runs are left alone.

    bf16 products on a CPU run through oneDNN, which builds a kernel for every matrix shape it meets and keeps
    up to 1,024 of them; a recurrent model's products change shape with every batch (its sentence count and
    lengths), so in training the cache, not the model, is most of the difference between a bf16 and an fp32
    run's peak memory (docs/benchmarks.md). oneDNN reads the variable when it builds its first kernel, so this
    must run before the process's first bf16 product; later it changes nothing.

    Returns:
        what was done, a short phrase for the log.
    Raises:
        ValueError: ``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` set to anything but a whole number of shapes (oneDNN
            itself would turn its cache off for ``abc`` and keep 1,024 shapes for ``-5``, silently).
    """
    if precision != "bf16" or device.type != "cpu":
        return f"oneDNN kernel cache as it comes ({precision} on {device.type})"
    chosen = environ.get(KERNEL_CACHE, "").strip()
    if chosen and not (chosen.isascii() and chosen.isdigit()):
        raise ValueError(f"{KERNEL_CACHE}={environ[KERNEL_CACHE]}: oneDNN keeps this many kernel shapes, so set a "
                         f"whole number (0 turns the cache off), or unset it for {capacity} in bf16 training")
    if chosen:
        return f"oneDNN kernel cache of {KERNEL_CACHE}={chosen}"
    environ[KERNEL_CACHE] = str(capacity)
    return f"oneDNN kernel cache bounded to {capacity} shapes ({KERNEL_CACHE} unset or empty)"


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


def inference_context(device: torch.device | str):
    """The no-gradient context of translation and forced alignment on ``device``: ``torch.inference_mode``, or
    ``torch.no_grad`` while autocast is on there. Autocast keeps the half-precision copy of each weight for the
    rest of its context only outside inference mode; under ``inference_mode`` it casts every weight again at
    every call, which in search is every decoder step. Returns the context manager (not entered)."""
    device_type = torch.device(device).type
    return torch.no_grad() if torch.is_autocast_enabled(device_type) else torch.inference_mode()
