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

**No TLS or archive libraries.**  asyncio imports ``ssl`` when it can, and with
it OpenSSL's two libraries (about 5 MB resident); the monitor's event loop never
opens a TLS connection.  Textual's imports reach ``shutil`` (through
``tempfile``), which loads ``bz2`` and ``lzma`` and their C libraries (about
0.3 MB) to say which archive formats it can write; the monitor writes none.
:func:`lean_imports` imports asyncio and shutil while those three modules
cannot be imported (both are written for Pythons built without them), then lets
them be imported again by whatever asks for them later.  (In that process
``shutil.make_archive`` then offers no bzip2 or xz formats.)
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


#: what the monitor's imports would load and it never uses (see the module's doc)
UNUSED_LIBRARIES = ("ssl", "bz2", "lzma")


def lean_imports() -> bool:
    """Import asyncio and shutil (those not loaded yet) while those of
    :data:`UNUSED_LIBRARIES` not loaded yet cannot be; True if something was
    imported so.  Call it before the process starts its threads: an import of
    one of them on another thread meanwhile would fail."""
    wanted = [name for name in ("asyncio", "shutil") if name not in sys.modules]
    blocked = [name for name in UNUSED_LIBRARIES if name not in sys.modules]
    if not (wanted and blocked):
        return False
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]  # "import ssl" fails
    try:
        # asyncio's own modules take ssl = None, shutil its formats without bz2, lzma
        for name in wanted:
            __import__(name)
    finally:
        for name in blocked:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
    return True
