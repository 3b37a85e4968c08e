"""Where the model runs: the torch device from ``device=`` and the CPU threads from ``threads=``.
"""

from __future__ import annotations

import torch


def pick_device(name: str) -> torch.device:
    """``auto`` -> cuda when available, else cpu; anything else is passed to ``torch.device``.

    Raises:
        ValueError: naming ``device=`` for a name torch does not know, or for CUDA on a machine without it.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise ValueError(f"device={name} is not a device: use device=auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={name}: this machine (torch {torch.__version__}) has no usable CUDA GPU; use "
                         "device=cpu or device=auto") from None
    return device


def set_threads(threads) -> None:
    """``threads=N``: torch's intra-op CPU threads; null leaves torch's default (all cores).

    Raises:
        ValueError: naming ``threads=`` for anything but null or a whole number >= 1.
    """
    if threads is None:
        return
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads={threads} must be a whole number of CPU threads >= 1 (or null: all cores)")
    torch.set_num_threads(threads)
