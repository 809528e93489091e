"""Which GPU processes the user sees now: a value the UI sets and the collector reads.

The monitor's process table says which pids are on screen when it draws, the
detail screen which process it shows; the live collector, on its own thread,
reads the host-side numbers of those processes at every refresh and of the
others in turns (:mod:`gputui.host.collector`): often when the table is sorted
by a host value (%CPU, HOST-MEM), so that the order of the rows off screen is
recent, seldom otherwise, since nothing shows those values then.  Only frozen
sets of pids and flags cross between the threads.  Nothing set (``--once``,
``--json``, the exporter, ``record``, ``serve``, a monitor that has not drawn
yet) means every process.
"""

from __future__ import annotations

import threading


class InView:
    """Named sets of pids in view ("table", "detail"), replaced whole; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parts: dict[str, frozenset[int]] = {}
        self._union: frozenset[int] | None = None
        self._host_order: set[str] = set()

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
            self._host_order.discard(part)
            if self._parts.pop(part, None) is not None:
                self._union = None

    def order_by_host(self, part: str, wanted: bool) -> None:
        """Whether ``part`` orders its processes by a host value (%CPU,
        HOST-MEM): the values of the processes off screen then matter."""
        with self._lock:
            if wanted:
                self._host_order.add(part)
            else:
                self._host_order.discard(part)

    def host_order(self) -> bool:
        """Whether some part orders its processes by a host value."""
        with self._lock:
            return bool(self._host_order)

    def pids(self) -> frozenset[int] | None:
        """Every pid some part shows; None while no part has said (then: all)."""
        with self._lock:
            if not self._parts:
                return None
            if self._union is None:
                self._union = frozenset().union(*self._parts.values())
            return self._union
