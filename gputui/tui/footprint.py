"""A screen that runs for days, and its own footprint.

**One malloc arena, trimmed.**  glibc gives a thread that finds the heap's lock
taken an arena of its own (64 MiB reserved, what it touches resident), and
keeps the free space of every arena.  The monitor's threads (the screen, the
poller, Textual's writer and input threads) start together, so whether
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

**Thousands of processes out of the cyclic collector.**  A node with thousands
of GPU processes makes thousands of process values a refresh, and each lives
for many refreshes.  The young collection that follows a refresh walks the
new ones and the lists of thousands that hold them (cold in the cache: about
8 ms for 20,000 processes on the 2-core VM), and each middle collection the
last ten refreshes' (50-80 ms).  With :data:`FREEZE_PROCESSES` or more,
:class:`SampleFreezer` takes what the collector tracks out of it after each
sample (``gc.freeze``; a replay's decoder does it before the collector
resumes: ``gputui.recording.snapshot_lines.freeze_from``), and every
:data:`THAW_EVERY_S` gives it back for one full collection, then freezes what
survived (reachable: no garbage held).  Reference counting frees what is
dropped meanwhile; what stays is cyclic garbage made since the last full
collection (the screen's strips and caches).  Below the threshold nothing
changes.
"""

from __future__ import annotations

import functools
import gc
import sys
import time
from collections.abc import Callable
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


#: the young generation's threshold for a screen (Python's default: 700).  What
#: a refresh makes and keeps for a while (the snapshot, history points, strips)
#: filled the young generation every two or three seconds, and each pass walked
#: the containers that hold it (about 0.25 ms); ten times the default, it is
#: walked every twenty to forty seconds, and what dies meanwhile is never
#: walked (docs/benchmarks.md).  The older generations keep their thresholds.
YOUNG_THRESHOLD = 7000


def fewer_young_passes() -> tuple[int, int, int]:
    """Raise the young generation's threshold to :data:`YOUNG_THRESHOLD` (never
    lower it); the thresholds before."""
    before = gc.get_threshold()
    if before[0] and before[0] < YOUNG_THRESHOLD:
        gc.set_threshold(YOUNG_THRESHOLD, *before[1:])
    return before


#: GPU processes in a sample from which :class:`SampleFreezer` freezes
FREEZE_PROCESSES = 1000
#: how often frozen objects go back to the collector for one full collection
THAW_EVERY_S = 60.0


class SampleFreezer:
    """Keeps a large snapshot's values out of the cyclic collector (the module's
    notes).  :meth:`after_sample` runs after each sample, on the poller thread."""

    def __init__(
        self,
        threshold: int = FREEZE_PROCESSES,
        thaw_every_s: float = THAW_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.threshold = threshold
        self.thaw_every_s = thaw_every_s
        self.clock = clock
        #: when objects were first frozen since the last full collection
        self.frozen_since: float | None = None
        self.thaws = 0

    def engage(self) -> None:
        """A replay's decoder freezes from the threshold on too."""
        from gputui.recording import snapshot_lines

        snapshot_lines.freeze_from = self.threshold

    def after_sample(self, processes: int) -> None:
        now = self.clock()
        if self.frozen_since is not None and now - self.frozen_since >= self.thaw_every_s:
            self.thaw()
        if processes >= self.threshold:
            gc.freeze()
            if self.frozen_since is None:
                self.frozen_since = now

    def thaw(self) -> None:
        """One full collection of everything frozen, then what survived frozen
        again (reachable: no garbage held)."""
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self.thaws += 1
        self.frozen_since = None
