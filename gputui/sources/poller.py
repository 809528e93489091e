"""The poller: the thread that calls a source at the monitor's cadence.

The monitor (and the exporter) never wait on a collector: the :class:`Poller`
calls ``source.sample()`` on its own thread and hands each snapshot, or the
error that replaced it, to a callback.  It alone holds the interval.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the snapshot model loads with the collectors, after NVML opens
    from gputui.snapshot.model import Snapshot
    from gputui.sources.base import SnapshotSource

#: the shortest interval between two polls (GPM readings need that much)
MIN_INTERVAL_S = 0.1


class Poller:
    """Calls ``source.sample()`` every ``interval_s`` on a daemon thread.

    Polls never overlap: the next one is scheduled after the previous one ends.
    Pausing stops polling without stopping the thread; ``set_interval`` takes
    effect at once.  An exception in the source is passed to ``on_error`` and
    polling goes on.
    """

    def __init__(
        self,
        source: SnapshotSource,
        interval_s: float,
        on_snapshot: Callable[[Snapshot], None],
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.source = source
        self._interval_s = max(MIN_INTERVAL_S, interval_s)
        self._on_snapshot = on_snapshot
        self._on_error = on_error
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._paused = False
        self._thread = threading.Thread(target=self._run, name="gputui-poller", daemon=True)

    @property
    def interval_s(self) -> float:
        return self._interval_s

    @property
    def paused(self) -> bool:
        return self._paused

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def set_interval(self, interval_s: float) -> None:
        self._interval_s = max(MIN_INTERVAL_S, interval_s)
        self._wake.set()

    def set_paused(self, paused: bool) -> None:
        self._paused = paused
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            start = time.perf_counter()
            if not self._paused:
                try:
                    snapshot = self.source.sample()
                except Exception as exc:  # a source must never kill the thread
                    if self._on_error is not None:
                        self._on_error(exc)
                else:
                    if snapshot.sample_latency_ms is None:
                        latency = (time.perf_counter() - start) * 1000.0
                        snapshot = dataclasses.replace(snapshot, sample_latency_ms=latency)
                    self._on_snapshot(snapshot)
            # The next poll starts one interval after this one started, never before
            # this one ended: polls never overlap and cadence does not drift.
            delay = self._interval_s - (time.perf_counter() - start)
            if delay > 0:
                self._wake.wait(delay)
            self._wake.clear()
