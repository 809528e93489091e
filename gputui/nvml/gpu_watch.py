"""The job's GPU, sampled while a viewer is attached.

The hook reports the CUDA device of the training thread with its UUID in
NVML's form; :class:`GpuWatch` finds that device among NVML's and samples it on
its own thread (utilization, GPM activity, clocks, throttle reasons, power,
PCIe), so the analyzer can join what the job measures with what the GPU did.
Without an NVIDIA driver, for a CPU job, or a device it cannot identify, it
stays idle and says why (:attr:`reason`).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any

from gputui.errors import NvmlUnavailable
from gputui.snapshot.model import DeviceSnapshot

#: seconds between samples (GPM needs 0.1 s at least between readings)
INTERVAL_S = 1.0
#: samples kept: two minutes at 1 s
KEEP = 120


class _SamplingThread:
    """An NVML collector sampled on a daemon thread every ``interval_s`` until
    :meth:`stop`: each pass's devices go to :meth:`_take`; a collector that
    cannot open, or a pass that fails, is told to :meth:`_report` as one line
    (the thread then ends)."""

    THREAD_NAME = "gputui-gpu-watch"

    def __init__(self, interval_s: float, open_collector: Callable[[], Any] | None) -> None:
        self.interval_s = max(0.1, interval_s)
        self._open = open_collector or _nvml_collector
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _start_thread(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.THREAD_NAME, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    def _report(self, reason: str) -> None:
        raise NotImplementedError

    def _take(self, devices: tuple[DeviceSnapshot, ...]) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        try:
            collector = self._open()
        except NvmlUnavailable as exc:
            self._report(str(exc).split(";")[0])
            return
        except Exception as exc:  # never let a viewer thread die noisily
            self._report(f"cannot read the GPU: {type(exc).__name__}: {exc}")
            return
        try:
            while not self._stop.is_set():
                self._take(collector.sample().devices)
                self._stop.wait(self.interval_s)
        except Exception as exc:
            self._report(f"GPU sampling stopped: {type(exc).__name__}: {exc}")
        finally:
            try:
                collector.close()
            except Exception:
                pass


class GpuWatch(_SamplingThread):
    """Samples one GPU (by UUID, else by index) on a daemon thread."""

    def __init__(
        self,
        uuid: str | None,
        index: int | None = None,
        interval_s: float = INTERVAL_S,
        open_collector: Callable[[], Any] | None = None,
        on_sample: Callable[[DeviceSnapshot], None] | None = None,
        on_reason: Callable[[str | None], None] | None = None,
    ) -> None:
        super().__init__(interval_s, open_collector)
        self.uuid = uuid
        self.index = index
        self._on_sample = on_sample
        self._on_reason = on_reason
        self._samples: collections.deque[DeviceSnapshot] = collections.deque(maxlen=KEEP)
        #: why nothing is sampled (no driver, device not found), or None
        self.reason: str | None = None

    def _say(self, reason: str | None) -> None:
        if reason != self.reason:
            self.reason = reason
            if self._on_reason is not None:
                self._on_reason(reason)

    _report = _say

    def start(self) -> None:
        if self._thread is not None:
            return
        if self.uuid is None and self.index is None:
            self._say("the job uses no CUDA device")
            return
        self._start_thread()

    @property
    def running(self) -> bool:
        """Sampling now (False before start, after stop, and when it gave up)."""
        return self._thread is not None and self._thread.is_alive()

    def samples(self) -> tuple[DeviceSnapshot, ...]:
        with self._lock:
            return tuple(self._samples)

    def _take(self, devices: tuple[DeviceSnapshot, ...]) -> None:
        device = self._pick(devices)
        if device is not None:
            with self._lock:
                self._samples.append(device)
            if self._on_sample is not None:
                self._on_sample(device)

    def _pick(self, devices: tuple[DeviceSnapshot, ...]) -> DeviceSnapshot | None:
        if self.uuid is not None:
            match = next((d for d in devices if d.uuid == self.uuid), None)
            self._say(
                None if match is not None else f"no GPU with UUID {self.uuid} on this machine"
            )
            return match
        # No UUID (a hook of an earlier version): the index is right only when the
        # job sees every GPU in NVML's order; better than nothing, and said so.
        if self.index is not None and 0 <= self.index < len(devices):
            self._say("GPU matched by index (the job did not report its UUID)")
            return devices[self.index]
        return None


def _nvml_collector() -> Any:
    from gputui.nvml.collector import NvmlCollector

    # the job's GPU's values only: its Xid errors are the monitor's to watch
    return NvmlCollector(kernel_log=None, skip=frozenset({"xid_events"}))


class GpuWatches(_SamplingThread):
    """The GPUs of several ranks, sampled together: one NVML pass a second for
    all of them (a watch per rank would sample every GPU once per rank), each
    sample handed to the callbacks of the ranks on that GPU (by UUID)."""

    THREAD_NAME = "gputui-gpu-watches"

    def __init__(
        self,
        interval_s: float = INTERVAL_S,
        open_collector: Callable[[], Any] | None = None,
    ) -> None:
        super().__init__(interval_s, open_collector)
        self._targets: list[
            tuple[str, Callable[[DeviceSnapshot], None], Callable[[str | None], None]]
        ] = []

    def add(
        self,
        uuid: str | None,
        on_sample: Callable[[DeviceSnapshot], None],
        on_reason: Callable[[str | None], None],
    ) -> None:
        """Watch ``uuid`` for one rank (None: the rank uses no CUDA device)."""
        if uuid is None:
            on_reason("the job uses no CUDA device")
            return
        with self._lock:
            self._targets.append((uuid, on_sample, on_reason))
        if self._thread is None:
            self._start_thread()

    def _report(self, reason: str) -> None:
        with self._lock:
            targets = list(self._targets)
        for _uuid, _sample, on_reason in targets:
            on_reason(reason)

    def _take(self, devices: tuple[DeviceSnapshot, ...]) -> None:
        by_uuid = {d.uuid: d for d in devices if d.uuid}
        with self._lock:
            targets = list(self._targets)
        for uuid, on_sample, on_reason in targets:
            device = by_uuid.get(uuid)
            if device is None:
                on_reason(f"no GPU with UUID {uuid} on this machine")
            else:
                on_reason(None)
                on_sample(device)
