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

Nothing is changed where the user chose the allocator (``LD_PRELOAD`` of jemalloc, tcmalloc or mimalloc,
``GLIBC_TUNABLES`` with malloc settings, glibc's ``MALLOC_*_`` variables), where the C library is not glibc
(macOS, Windows, musl), or with ``NMT_MALLOC=default`` in the environment (``NMT_MALLOC=reuse``, or no value,
tunes it; any other value leaves it alone and says so).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's <malloc.h>
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's upper limit for M_MMAP_THRESHOLD on 64-bit systems
TRIM_THRESHOLD = 256 * 1024 * 1024
GLIBC_ENV = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_",
             "MALLOC_ARENA_MAX")

_done: str | None = None


def user_choice(environ=os.environ) -> str | None:
    """The reason to leave the allocator as it is (a phrase), or None: ``NMT_MALLOC=default`` (or a value other
    than ``reuse``), an allocator in ``LD_PRELOAD``, or malloc settings in ``GLIBC_TUNABLES`` or glibc's
    ``MALLOC_*_`` variables."""
    chosen = environ.get("NMT_MALLOC", "")
    if chosen.lower() == "default":
        return "NMT_MALLOC=default"
    if chosen and chosen.lower() != "reuse":
        return f"NMT_MALLOC={chosen} is neither 'default' nor 'reuse'"
    preload = environ.get("LD_PRELOAD", "")
    if "malloc" in preload:
        return f"LD_PRELOAD={preload}"
    if "glibc.malloc" in environ.get("GLIBC_TUNABLES", ""):
        return "GLIBC_TUNABLES sets malloc"
    named = [name for name in GLIBC_ENV if name in environ]
    return f"{named[0]} is set" if named else None


def reuse_freed_memory() -> str:
    """Tune glibc's malloc for a process of repeated same-sized tensors (see the module's text); once per process,
    later calls return the first answer.

    Returns:
        what was done, a short phrase for the log: ``"glibc malloc: ..."`` or why nothing was changed.
    Raises nothing: a C library without ``mallopt`` is left alone.
    """
    global _done
    if _done is not None:
        return _done
    reason = user_choice()
    if reason:
        _done = f"allocator left as chosen ({reason})"
        return _done
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version.restype = ctypes.c_char_p
        version = libc.gnu_get_libc_version().decode()
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        _done = "allocator left as it is (not glibc)"
        return _done
    if not (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        _done = f"allocator left as it is (glibc {version} refused mallopt)"
        return _done
    _done = f"glibc {version} malloc: freed blocks up to 32 MB reused, heap trimmed above 256 MB free"
    return _done
