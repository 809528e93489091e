"""A screen that runs for days, and its own footprint.

**One malloc arena, trimmed.**  glibc gives a thread that finds the heap's lock
taken an arena of its own (64 MiB reserved, what it touches resident), and
keeps the free space of every arena.  The monitor's threads (the screen, the
sampler, Textual's writer and input threads) start together, so whether
one more arena is made depends on which thread reaches malloc first: on the GPU
machines the live monitor's RSS was 71 MB in some runs and 81 MB in others, the
difference an arena's anonymous memory.  The start-up (imports, NVML's
initialisation, the first frames) also frees megabytes that the heaps keep.  So
a screen asks glibc for a single arena before its threads start
(:func:`one_arena`), and hands the heap's free pages back to the kernel once
started and then now and then (:func:`trim`).  Both are no-ops where the C
library has neither call (musl, macOS).  Python's own small objects live in its
arenas, not malloc's: only larger blocks (strings, lists, NVML's and the
terminal's buffers) take malloc's lock: with one arena the monitor's CPU
stayed within its windows' spread (docs/benchmarks.md).

**No TLS library.**  asyncio imports ``ssl`` when it can, and with it OpenSSL's
two libraries (about 5 MB resident); the monitor's event loop never opens a TLS
connection.  :func:`asyncio_without_tls` imports asyncio while ``ssl`` cannot be
imported (asyncio is written for Pythons built without it), then lets ``ssl``
be imported again by whatever asks for it later.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

#: mallopt's parameter for the most arenas (glibc's malloc.h)
M_ARENA_MAX = -8

#: a screen trims its heap this long after it starts (the first frames drawn)...
FIRST_TRIM_S = 5.0
#: ...and then this often (a trim costs well under a millisecond)
TRIM_EVERY_S = 60.0


@functools.cache
def _libc() -> Any | None:
    """The process's C library, if it is glibc (None elsewhere)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        lib = ctypes.CDLL(None)
        if not (hasattr(lib, "mallopt") and hasattr(lib, "malloc_trim")):
            return None
        lib.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        lib.malloc_trim.argtypes = [ctypes.c_size_t]
        return lib
    except (OSError, AttributeError, ImportError):
        return None


def one_arena() -> bool:
    """Ask for one malloc arena for every thread from now on; True if done.
    Call it before the process starts its threads."""
    lib = _libc()
    return bool(lib is not None and lib.mallopt(M_ARENA_MAX, 1) == 1)


def trim() -> bool:
    """Return the heap's free pages to the kernel; True if some were."""
    lib = _libc()
    return bool(lib is not None and lib.malloc_trim(0) == 1)


def asyncio_without_tls() -> bool:
    """Import asyncio without ``ssl``, if neither is loaded yet; True if done.
    Call it before the process starts its threads: an import of ``ssl`` on
    another thread meanwhile would fail."""
    if "asyncio" in sys.modules or "ssl" in sys.modules:
        return False
    sys.modules["ssl"] = None  # type: ignore[assignment]  # "import ssl" fails
    try:
        import asyncio  # noqa: F401  (asyncio's own modules take ssl = None)
    finally:
        if "ssl" in sys.modules and sys.modules["ssl"] is None:
            del sys.modules["ssl"]
    return True
