"""The C allocator under torch's CPU tensors: keep freed memory for the next step instead of returning it.

A training or decoding step allocates and frees the same large buffers again and again (the ``[tokens, vocab]``
logits and their gradient, the decoder's per-step states). glibc's malloc serves a block above its mmap threshold
with a fresh ``mmap`` and gives it back with ``munmap`` when it is freed, and trims the top of its heap as soon as
128 KB there are free; every new block then costs one page fault per 4 KB page on first touch, in the kernel, on
the thread that writes it. On a 2-core machine that was thousands of page faults and a tenth of a training step
(docs/benchmarks.md). :func:`reuse_freed_memory` sets the mmap threshold to glibc's maximum (32 MB) and the trim
threshold to 256 MB with ``mallopt(3)``, so freed blocks stay in the heap and are reused; the peak memory of a
process is unchanged (the blocks were in use at the peak anyway), a process holds at most 256 MB more between its
peaks.

Each command has its default, which ``NMT_MALLOC`` overrides: ``translate.py`` (``nmt-translate``) keeps freed
memory, with which beam search decodes faster, while ``train.py``, ``nmt.align`` and ``nmt.report``'s gold scoring
leave glibc as it comes: it sped up ``bench/speed.py`` but not a real ``train.py`` run, where glibc's own adaptive
threshold already keeps most blocks (docs/benchmarks.md). ``NMT_MALLOC=reuse`` tunes it, ``NMT_MALLOC=default``
keeps glibc as it comes, and any other value is refused with a ValueError. Nothing is changed where the process's
``malloc`` is not glibc's (jemalloc, tcmalloc or mimalloc through ``LD_PRELOAD``; macOS, Windows, musl).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's <malloc.h>
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's upper limit for M_MMAP_THRESHOLD on 64-bit systems
TRIM_THRESHOLD = 256 * 1024 * 1024


def user_choice(environ=os.environ, default: str = "default") -> str | None:
    """The reason to leave glibc's malloc as it is (a phrase), or None to tune it: ``NMT_MALLOC=reuse``, or
    ``NMT_MALLOC`` unset or empty with ``default="reuse"`` (the calling command's default).

    Raises:
        ValueError: ``NMT_MALLOC`` set to anything but ``default`` or ``reuse``.
    """
    chosen = environ.get("NMT_MALLOC", "").strip().lower()
    if chosen not in ("", "default", "reuse"):
        raise ValueError(f"NMT_MALLOC={environ['NMT_MALLOC']}: use NMT_MALLOC=reuse (keep freed memory for the "
                         "next step) or NMT_MALLOC=default (glibc's malloc as it comes)")
    if (chosen or default) == "reuse":
        return None
    return "NMT_MALLOC=default" if chosen else "NMT_MALLOC=reuse not set"


def glibc_malloc() -> tuple[ctypes.CDLL | None, str]:
    """glibc, when the process's ``malloc`` is glibc's, and its version; else None and what malloc is instead."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version.restype = ctypes.c_char_p
        version = libc.gnu_get_libc_version().decode()
        process_malloc = ctypes.cast(ctypes.CDLL(None).malloc, ctypes.c_void_p).value
    except (OSError, AttributeError, TypeError):
        return None, "the C library is not glibc"
    if process_malloc != ctypes.cast(libc.malloc, ctypes.c_void_p).value:
        preload = os.environ.get("LD_PRELOAD")
        return None, "malloc is not glibc's" + (f", LD_PRELOAD={preload}" if preload else "")
    return libc, version


@functools.cache  # a ValueError is not cached: every call raises until NMT_MALLOC is fixed
def reuse_freed_memory(default: str = "default") -> str:
    """Tune glibc's malloc for a process of repeated same-sized tensors (see the module's text) when
    ``NMT_MALLOC=reuse``, or when it is unset and ``default="reuse"``; once per process and ``default``, later
    calls return the first answer.

    Args:
        default: the calling command's choice when ``NMT_MALLOC`` is unset: ``"reuse"`` or ``"default"``.

    Returns:
        what was done, a short phrase for the log: ``"glibc 2.36 malloc: ..."`` or why nothing was changed.
    Raises:
        ValueError: ``NMT_MALLOC`` set to anything but ``default`` or ``reuse``, at every call until it is fixed.
    """
    reason = user_choice(default=default)  # raises on a bad NMT_MALLOC before anything else
    if reason:
        return f"malloc as it comes ({reason})"
    libc, version = glibc_malloc()
    if libc is None:
        return f"allocator left as it is ({version})"
    if not (libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        return f"allocator left as it is (glibc {version} refused mallopt)"
    return f"glibc {version} malloc: freed blocks up to 32 MB reused, heap trimmed above 256 MB free"
