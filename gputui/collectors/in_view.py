"""Which GPU processes the user sees now: a value the UI sets and the collector reads.

The monitor's process table says which pids are on screen when it draws, the
detail screen which process it shows; the live collector, on its own thread,
reads the host-side numbers of those processes at every refresh and of the
others in turns (:mod:`gputui.collectors.host`).  Only frozen sets of pids
cross between the threads.  Nothing set (``--once``, ``--json``, the exporter,
``record``, ``serve``, a monitor that has not drawn yet) means every process.
"""

from __future__ import annotations

import threading


class InView:
    """Named sets of pids in view ("table", "detail"), replaced whole; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parts: dict[str, frozenset[int]] = {}
        self._union: frozenset[int] | None = None

    def set(self, part: str, pids: frozenset[int]) -> None:
        """What ``part`` of the UI shows now."""
        with self._lock:
            if self._parts.get(part) == pids:
                return
            self._parts[part] = pids
            self._union = None

    def clear(self, part: str) -> None:
        """``part`` shows nothing any more (a screen closed)."""
        with self._lock:
            if self._parts.pop(part, None) is not None:
                self._union = None

    def pids(self) -> frozenset[int] | None:
        """Every pid some part shows; None while no part has said (then: all)."""
        with self._lock:
            if not self._parts:
                return None
            if self._union is None:
                self._union = frozenset().union(*self._parts.values())
            return self._union
