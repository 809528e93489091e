"""Bounded history of the values the graphs draw.

Every series is a ``deque(maxlen=...)``: a monitor left running for a week uses
the same memory as one running for ten minutes.  Per-process series are kept for
at most ``MAX_PROCESSES`` processes: the first seen, and any the detail screen
asks for (``watch``); one not seen for ``PROCESS_EXPIRY_SAMPLES`` leaves room.  A
node with thousands of GPU processes costs a look-up per process and sample, not
four new series.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import compress, islice
from operator import attrgetter

from gputui.snapshot.model import ProcessSnapshot, Snapshot, replaced

_PID = attrgetter("pid")

#: points per GPU/host series: 3600 covers an hour at 1 s and 6 minutes at 0.1 s
SERIES_POINTS = 3600
#: points per process series (detail screen)
PROCESS_POINTS = 600
MAX_PROCESSES = 256
#: a process not seen for this many samples loses its history
PROCESS_EXPIRY_SAMPLES = 300

#: graph metric name -> (label, maximum for scaling, unit); None maximum = autoscale
GPU_METRICS: dict[str, tuple[str, float | None, str]] = {
    "util": ("GPU util", 100.0, "%"),
    "mem": ("memory", 100.0, "%"),
    "power": ("power", None, "W"),
    "tensor": ("tensor activity", 100.0, "%"),
    "sm": ("SM activity", 100.0, "%"),
}
PROCESS_METRICS = ("gpu_mem", "sm", "cpu", "rss")

Series = deque[float | None]


def _series(points: int) -> Series:
    return deque(maxlen=points)


def tail(series: Series, points: int) -> list[float | None]:
    """The newest ``points`` values, oldest first.

    Walks from the newest end, so a graph of the last few minutes does not copy an
    hour of samples every frame.
    """
    if points >= len(series):
        return list(series)
    out = list(islice(reversed(series), max(0, points)))
    out.reverse()
    return out


@dataclass
class _ProcessHistory:
    series: dict[str, Series]
    last_seen: int


@dataclass
class History:
    series_points: int = SERIES_POINTS
    gpu: dict[str, dict[str, Series]] = field(default_factory=dict)
    host: dict[str, Series] = field(default_factory=dict)
    processes: dict[tuple[str, int], _ProcessHistory] = field(default_factory=dict)
    #: snapshot data times (recorded time for recordings), parallel to host series
    times: Series = field(default_factory=lambda: _series(SERIES_POINTS))
    samples: int = 0
    #: the data time last given to ``add`` (the axis may have moved it forward)
    _last_input_s: float | None = None
    #: the pids of the processes with series (a quick test before the key's)
    _pids: set[int] = field(default_factory=set)
    #: the processes last passed over with every series taken, the pids with
    #: series then, and which of them had one
    _mask: tuple[tuple[ProcessSnapshot, ...], set[int], list[bool]] = field(
        default_factory=lambda: ((), set(), [])
    )

    def __post_init__(self) -> None:
        if self.times.maxlen != self.series_points:
            self.times = _series(self.series_points)

    def add(self, snapshot: Snapshot, data_time_s: float, step_s: float = 1.0) -> None:
        """Append one snapshot; ``step_s`` is the time step used when time goes backwards.

        A looping recording jumps back to its start (and a clock can be set back):
        the graphs' time axis keeps going forward by one sampling step instead, so
        the window stays the right length, and one empty point goes in first, so
        that no graph joins the end of a recording to its start.
        """
        self.samples += 1
        went_back = self._last_input_s is not None and data_time_s < self._last_input_s
        self._last_input_s = data_time_s
        last = self.times[-1] if self.times else None
        if last is not None and went_back:
            self._gap(last + step_s)
            last += step_s
        if last is not None and data_time_s <= last:
            data_time_s = last + step_s
        self.times.append(data_time_s)
        host = snapshot.host
        self._host("cpu").append(host.cpu_pct)
        mem = (
            100.0 * host.mem_used_bytes / host.mem_total_bytes
            if host.mem_used_bytes is not None and host.mem_total_bytes
            else None
        )
        self._host("mem").append(mem)
        seen: set[str] = set()
        for device in snapshot.devices:
            seen.add(device.uuid)
            series = self.gpu.get(device.uuid)
            if series is None:
                series = {name: _series(self.series_points) for name in GPU_METRICS}
                # A GPU that appears late is padded so that all graphs share one time axis.
                for s in series.values():
                    s.extend([None] * min(len(self.times) - 1, self.series_points))
                self.gpu[device.uuid] = series
            gpm = device.gpm
            series["util"].append(device.util_gpu_pct)
            series["mem"].append(device.mem_used_pct)
            series["power"].append(device.power_w)
            series["tensor"].append(gpm.tensor_activity_pct if gpm else None)
            series["sm"].append(gpm.sm_activity_pct if gpm else None)
        for uuid, series in self.gpu.items():
            if uuid not in seen:
                for s in series.values():
                    s.append(None)
        self._add_processes(snapshot)

    def _gap(self, data_time_s: float) -> None:
        """One empty point on every series: a break in the graphs."""
        self.times.append(data_time_s)
        for series in self.host.values():
            series.append(None)
        for by_metric in self.gpu.values():
            for series in by_metric.values():
                series.append(None)
        for entry in self.processes.values():
            for series in entry.series.values():
                series.append(None)

    def _host(self, name: str) -> Series:
        series = self.host.get(name)
        if series is None:
            series = self.host[name] = _series(self.series_points)
        return series

    def _add_processes(self, snapshot: Snapshot) -> None:
        tracked = self.processes
        pids = self._pids
        room = MAX_PROCESSES - len(tracked)
        procs: Iterable[ProcessSnapshot] = snapshot.processes
        if room <= 0:
            # Every series taken: only the processes with one are looked at (the
            # others of a node's thousands passed over in C).
            procs = compress(procs, self._tracked_mask(snapshot.processes))
        for proc in procs:
            if proc.pid not in pids and room <= 0:
                continue
            key = (proc.gpu_uuid, proc.pid)
            entry = tracked.get(key)
            if entry is None:
                if room <= 0:
                    continue
                entry = self._track(key)
                room -= 1
            entry.last_seen = self.samples
            series = entry.series
            series["gpu_mem"].append(
                None if proc.gpu_mem_bytes is None else proc.gpu_mem_bytes / 2**20
            )
            series["sm"].append(proc.sm_pct)
            series["cpu"].append(proc.cpu_pct)
            series["rss"].append(None if proc.rss_bytes is None else proc.rss_bytes / 2**20)
        stale = [
            key
            for key, entry in tracked.items()
            if self.samples - entry.last_seen > PROCESS_EXPIRY_SAMPLES
        ]
        for key in stale:
            del tracked[key]
        if stale:
            self._pids = {pid for _uuid, pid in tracked}

    def _tracked_mask(self, procs: tuple[ProcessSnapshot, ...]) -> list[bool]:
        """Whether each of ``procs`` has a pid with series; read only for the
        processes that are not the ones at their place last time, while the
        pids with series stay the same."""
        old, old_pids, mask = self._mask
        pids = self._pids
        changed = replaced(procs, old) if old_pids == pids else None
        if changed is None:
            mask = list(map(pids.__contains__, map(_PID, procs)))
        elif changed:
            mask = mask[:]
            for i in changed:
                mask[i] = procs[i].pid in pids
        self._mask = (procs, set(pids), mask)
        return mask

    def _track(self, key: tuple[str, int]) -> _ProcessHistory:
        entry = _ProcessHistory(
            {name: _series(PROCESS_POINTS) for name in PROCESS_METRICS}, self.samples
        )
        self.processes[key] = entry
        self._pids.add(key[1])
        return entry

    def watch(self, key: tuple[str, int]) -> None:
        """Keep ``key``'s series from now on (the detail screen's process), making
        room by dropping the one seen longest ago when all are taken."""
        if key in self.processes:
            return
        if len(self.processes) >= MAX_PROCESSES:
            oldest = min(self.processes, key=lambda k: self.processes[k].last_seen)
            del self.processes[oldest]
            self._pids = {pid for _uuid, pid in self.processes}
        self._track(key)

    def gpu_series(self, uuid: str, metric: str) -> Series:
        return self.gpu.get(uuid, {}).get(metric) or _series(1)

    def process_series(self, key: tuple[str, int], metric: str) -> Series:
        entry = self.processes.get(key)
        return entry.series[metric] if entry else _series(1)

    def window_points(self, window_s: float) -> int:
        """How many of the newest samples fall within the last ``window_s`` of data time."""
        count = 0
        last: float | None = None
        for t in reversed(self.times):
            if t is None:
                count += 1
                continue
            if last is None:
                last = t
            elif last - t > window_s:
                break
            count += 1
        return max(1, count)

    def span_s(self, points: int) -> float | None:
        """Time covered by the last ``points`` samples (data time)."""
        n = len(self.times)
        if n < 2:
            return None
        first, last = self.times[max(0, n - points)], self.times[-1]
        if first is None or last is None:
            return None
        return last - first
