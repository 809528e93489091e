"""Snapshot sources and the sampler thread.

A source turns one call of ``sample()`` into one whole :class:`Snapshot`.  The
live source reads NVML and psutil; the replay source reads a recording.  The
:class:`Sampler` calls a source on its own thread at a fixed cadence and hands
each snapshot to a callback, so no view ever waits on a collector.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Protocol

from gputui.model import Snapshot


class SnapshotSource(Protocol):
    """Anything that yields whole snapshots."""

    #: shown to the user: "live", "recording: FILE", "demo recording (...)"
    label: str
    #: True when the data is a recording, not this machine now
    is_recording: bool
    #: the natural time between snapshots (a recording's own cadence), or None
    natural_interval_s: float | None

    def sample(self) -> Snapshot: ...

    def close(self) -> None: ...


class LiveSource:
    """This machine now: NVML for the GPUs, psutil for the host and processes."""

    is_recording = False
    natural_interval_s: float | None = None

    def __init__(self, gpu: object | None = None, host: object | None = None) -> None:
        from gputui.collectors.host import HostCollector
        from gputui.collectors.nvml import NvmlCollector

        self._gpu = gpu if gpu is not None else NvmlCollector()
        #: when the GPU collector took its first rate readings (monotonic clock)
        self.opened_at = time.monotonic()
        self._host = host if host is not None else HostCollector()
        self.label = "live"

    def sample(self) -> Snapshot:
        start = time.perf_counter()
        gpu = self._gpu.sample()  # type: ignore[attr-defined]
        processes = self._host.enrich(gpu.processes)  # type: ignore[attr-defined]
        hooked = _hooked_pids()
        if hooked:
            processes = tuple(
                dataclasses.replace(p, hooked=True) if p.pid in hooked else p for p in processes
            )
        host = self._host.sample()  # type: ignore[attr-defined]
        return Snapshot(
            timestamp_s=time.time(),
            host=host,
            devices=gpu.devices,
            processes=processes,
            driver_version=gpu.driver_version,
            cuda_driver_version=gpu.cuda_driver_version,
            nvml_version=gpu.nvml_version,
            sample_latency_ms=(time.perf_counter() - start) * 1000.0,
            error=gpu.error,
        )

    def close(self) -> None:
        self._gpu.close()  # type: ignore[attr-defined]


def _hooked_pids() -> set[int]:
    try:
        from gputui.protocol.paths import hooked_pids
    except ImportError:
        return set()
    try:
        return hooked_pids()
    except OSError:
        return set()


class Sampler:
    """Calls ``source.sample()`` every ``interval_s`` on a daemon thread.

    Polls never overlap: the next one is scheduled after the previous one ends.
    Pausing stops sampling without stopping the thread; ``set_interval`` takes
    effect at once.  An exception in the source is passed to ``on_error`` and
    sampling goes on.
    """

    def __init__(
        self,
        source: SnapshotSource,
        interval_s: float,
        on_snapshot: Callable[[Snapshot], None],
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.source = source
        self._interval_s = max(0.1, interval_s)
        self._on_snapshot = on_snapshot
        self._on_error = on_error
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._paused = False
        self._thread = threading.Thread(target=self._run, name="gputui-sampler", daemon=True)

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
        self._interval_s = max(0.1, interval_s)
        self._wake.set()

    def set_paused(self, paused: bool) -> None:
        self._paused = paused
        self._wake.set()

    def sample_now(self) -> None:
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
