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


class SampleAhead:
    """A source whose first snapshot is taken on a thread from construction on.

    The monitor spends its first few hundred milliseconds importing and starting the
    UI; the first live sample (NVML and /proc reads, which release the GIL) is taken
    meanwhile, so the first frame shows data as soon as the UI can draw it.  The
    sample waits until ``rate_window_s`` after the source opened (its ``opened_at``),
    so that its rates span a real interval, as ``--once`` does.
    """

    def __init__(self, source: SnapshotSource, rate_window_s: float = 0.0) -> None:
        self.source = source
        self.label = source.label
        self.is_recording = source.is_recording
        self.natural_interval_s = source.natural_interval_s
        self._rate_window_s = rate_window_s
        self._first: Snapshot | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = threading.Thread(
            target=self._take_first, name="gputui-first-sample", daemon=True
        )
        self._thread.start()

    def __getattr__(self, name: str) -> object:
        # Optional source attributes (opened_at, recorded_at_s) read through getattr().
        return getattr(self.source, name)

    def _take_first(self) -> None:
        opened = getattr(self.source, "opened_at", None)
        if opened is not None:
            time.sleep(max(0.0, self._rate_window_s - (time.monotonic() - opened)))
        start = time.perf_counter()
        try:
            snapshot = self.source.sample()
        except BaseException as exc:  # handed to whoever asks for the snapshot
            self._error = exc
            return
        if snapshot.sample_latency_ms is None:
            latency = (time.perf_counter() - start) * 1000.0
            snapshot = dataclasses.replace(snapshot, sample_latency_ms=latency)
        self._first = snapshot

    def sample(self) -> Snapshot:
        thread = self._thread
        if thread is None:
            return self.source.sample()
        thread.join()
        self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        first, self._first = self._first, None
        assert first is not None
        return first

    def close(self) -> None:
        # Never close the collector under the first sample.
        if self._thread is not None:
            self._thread.join(5.0)
        self.source.close()


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
