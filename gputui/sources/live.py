"""The live source: this machine now, NVML joined with the host's side.

:func:`open_live` opens NVML ahead of every other collector; :class:`SampleAhead`
opens it, and takes the first snapshot, on a thread while the UI imports.  The
poller (:mod:`gputui.sources.poller`) calls a source at the monitor's cadence.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gputui.host.kept import KeptRun
from gputui.sources.base import SnapshotSource

if TYPE_CHECKING:  # the snapshot model loads with the collectors, after NVML opens
    from gputui.host.in_view import InView
    from gputui.recording.replay import ReplayProgress
    from gputui.snapshot.model import ProcessSnapshot, Snapshot


class LiveSource(SnapshotSource):
    """This machine now: NVML for the GPUs, psutil for the host and processes."""

    def __init__(
        self,
        gpu: object | None = None,
        host: object | None = None,
        pids: object | None = None,
        containers: object | None = None,
    ) -> None:
        from gputui.host.attribution import ContainerAttributor
        from gputui.host.collector import HostCollector
        from gputui.host.pid_namespace import PidMapper
        from gputui.nvml.collector import NvmlCollector

        self._gpu = gpu if gpu is not None else NvmlCollector()
        self._host = host if host is not None else HostCollector()
        self._pids = pids if pids is not None else PidMapper()
        self._containers = containers if containers is not None else ContainerAttributor()
        self.label = "live"
        #: the hooked processes' marked values, kept while the process is the same
        self._marked: KeptRun[ProcessSnapshot, bool | None, ProcessSnapshot] = KeptRun(_marked)

    def sample(self) -> Snapshot:
        from gputui.snapshot.model import Snapshot

        start = time.perf_counter()
        gpu = self._gpu.sample()  # type: ignore[attr-defined]
        processes = self._pids.map(gpu.processes)  # type: ignore[attr-defined]
        processes = self._host.enrich(processes)  # type: ignore[attr-defined]
        processes = self._containers.attribute(processes)  # type: ignore[attr-defined]
        hooked = _hooked_pids()
        if hooked:
            processes = self._mark_hooked(processes, hooked)
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

    def _mark_hooked(
        self, processes: tuple[ProcessSnapshot, ...], hooked: set[int]
    ) -> tuple[ProcessSnapshot, ...]:
        """``processes`` with the hooked ones marked; a process that is the object
        of the last refresh keeps its marked value of then."""
        marks = [True if p.pid in hooked and not p.pid_is_host else None for p in processes]
        return self._marked.values(processes, marks)

    def use_view(self, in_view: InView) -> None:
        """Read the host side of the processes ``in_view`` says are on screen at
        every sample, the others in turns (many GPU processes only: see
        :mod:`gputui.host.collector`).  Without it every process is read."""
        if hasattr(self._host, "in_view"):
            self._host.in_view = in_view

    def close(self) -> None:
        self._gpu.close()  # type: ignore[attr-defined]


def open_live(
    text_one_shot: bool = False,
    starting: threading.Event | None = None,
    *,
    screen: bool = False,
) -> LiveSource:
    """The live source, NVML first: pynvml is imported and NVML started (with each
    GPU's handle) before any other collector module loads, and the host-side
    collectors (psutil, the pid and container mappers) load on a second thread
    while NVML opens, which waits in the driver with the GIL released.

    ``text_one_shot``: the source serves one text report of instant values
    (``gputui --once``): the NVML queries it does not print are not made
    (:data:`nvml_open.TEXT_ONE_SHOT_SKIPS`).

    ``screen``: the source feeds the monitor's screen, which shows neither energy,
    BAR1 (:data:`nvml_open.MONITOR_SKIPS`: not read) nor each core's CPU time (the
    whole CPU's is read).

    ``starting`` is set once NVML starts opening (or cannot): from then on the
    driver waits without the GIL, and other threads' imports cost this one nothing."""
    from gputui.nvml import startup as nvml_open

    # The host side's thread is started now and waits: started at the moment
    # NVML begins to open, starting it would hand the GIL around and delay
    # nvmlInit by a switch interval or two.
    host = _Opening(lambda: _open_host_side(per_core=not screen))

    def begin() -> None:
        host.go()
        if starting is not None:
            starting.set()

    try:
        nvml = nvml_open.import_pynvml()  # not installed: NvmlUnavailable, as before
    except BaseException:
        host.cancel()
        if starting is not None:
            starting.set()
        raise
    started = nvml_open.start(nvml, begin)
    from gputui.nvml.collector import NvmlCollector

    skip: frozenset[str] = frozenset()
    if text_one_shot:
        skip = nvml_open.TEXT_ONE_SHOT_SKIPS
    elif screen:
        skip = nvml_open.MONITOR_SKIPS
    try:
        gpu = NvmlCollector(started=started, skip=skip)
    except BaseException:
        host.wait()  # never left running: its error is the lesser one
        raise
    try:
        return LiveSource(gpu, *host.result())
    except BaseException:
        gpu.close()
        raise


def _open_host_side(per_core: bool = True) -> tuple[object, object, object]:
    from gputui.host.attribution import ContainerAttributor
    from gputui.host.collector import HostCollector
    from gputui.host.pid_namespace import PidMapper

    return HostCollector(per_core=per_core), PidMapper(), ContainerAttributor()


class _Opening:
    """``make()`` run on a thread once :meth:`go` is called; :meth:`result` waits
    and returns (or raises) it; :meth:`cancel` ends the thread without it."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._value: Any = None
        self._error: BaseException | None = None
        self._go = threading.Event()
        self._cancelled = False
        self._thread = threading.Thread(target=self._run, name="gputui-open", daemon=True)
        self._thread.start()

    def go(self) -> None:
        self._go.set()

    def cancel(self) -> None:
        self._cancelled = True
        self._go.set()

    def _run(self) -> None:
        self._go.wait()
        if self._cancelled:
            return
        try:
            self._value = self._make()
        except BaseException as exc:  # handed to result()'s caller
            self._error = exc

    def wait(self) -> None:
        self._thread.join()

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


class SampleAhead(SnapshotSource):
    """A live source opened, and its first snapshot taken, on a thread.

    The monitor spends its first few hundred milliseconds (``--once``: about a
    hundred) importing Rich or Textual.  Opening NVML and taking the first sample
    (calls that mostly wait in the driver and /proc, with the GIL released) happen
    meanwhile, so the first frame shows data as soon as it can be drawn.  With a
    ``rate_window_s``, a warm-up sample is taken at once and the first snapshot
    that long after it, so that its rates span a real interval.

    ``opened()`` waits for the open step and raises its error (no driver, say), so
    the caller can still fall back to something else; ``sample()`` hands out the
    first snapshot, then passes through to the source, as every capability
    :class:`SnapshotSource` declares does.
    """

    def __init__(
        self, open_source: Callable[[], SnapshotSource], rate_window_s: float = 0.0
    ) -> None:
        self._open_source = open_source
        self._rate_window_s = rate_window_s
        self._source: SnapshotSource | None = None
        self._open_error: BaseException | None = None
        self._is_open = threading.Event()
        self._first: Snapshot | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = threading.Thread(
            target=self._open_and_sample, name="gputui-first-sample", daemon=True
        )
        self._thread.start()

    def opened(self) -> SnapshotSource:
        """The source, once open; raises what opening it raised."""
        self._is_open.wait()
        if self._open_error is not None:
            raise self._open_error
        assert self._source is not None
        return self._source

    def _opened(self) -> SnapshotSource:
        # what the poller's thread asks at every sample: the source, without the
        # wait once it is open
        source = self._source
        return source if source is not None else self.opened()

    @property
    def label(self) -> str:  # type: ignore[override]
        return self._opened().label

    @property
    def is_recording(self) -> bool:  # type: ignore[override]
        return self._opened().is_recording

    @property
    def natural_interval_s(self) -> float | None:  # type: ignore[override]
        return self._opened().natural_interval_s

    @property
    def recorded_at_s(self) -> float | None:
        return self._opened().recorded_at_s

    def use_view(self, in_view: InView) -> None:
        self._opened().use_view(in_view)

    def progress(self) -> ReplayProgress | None:
        return self._opened().progress()

    def _open_and_sample(self) -> None:
        try:
            source = self._open_source()
        except BaseException as exc:  # handed to whoever asks for the source
            self._open_error = exc
            self._is_open.set()
            return
        self._source = source
        self._is_open.set()
        if self._rate_window_s > 0:
            # A warm-up sample fills the static and slow caches and starts every
            # rate (GPM, PCIe, process CPU); the first snapshot follows one window
            # after it, so its rates span a real interval and it costs what a
            # steady-state sample costs.  An error here comes back from that one.
            with contextlib.suppress(Exception):
                source.sample()
            # a whole window after the warm-up ended, so that every reading in the
            # first snapshot is at least that long after its counterpart
            time.sleep(self._rate_window_s)
        start = time.perf_counter()
        try:
            snapshot = source.sample()
        except BaseException as exc:  # handed to whoever asks for the snapshot
            self._error = exc
            return
        if snapshot.sample_latency_ms is None:
            latency = (time.perf_counter() - start) * 1000.0
            snapshot = dataclasses.replace(snapshot, sample_latency_ms=latency)
        self._first = snapshot

    def sample(self) -> Snapshot:
        source = self.opened()
        thread = self._thread
        if thread is None:
            return source.sample()
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
        if self._source is not None:
            self._source.close()


def _marked(process: ProcessSnapshot, hooked: bool | None) -> ProcessSnapshot:
    return process if hooked is None else dataclasses.replace(process, hooked=True)


def _hooked_pids() -> set[int]:
    try:
        from gputui.protocol.paths import hooked_pids
    except ImportError:
        return set()
    try:
        return hooked_pids()
    except OSError:
        return set()
