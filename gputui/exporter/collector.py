"""One scrape: fresh metric families from the latest values, nothing else.

The poller thread hands every snapshot to :meth:`ExporterCollector.on_snapshot`
(which only stores it and integrates the clock-event counters); the job watcher
keeps its own totals.  A scrape builds new families from whatever is newest, so a
process or a rank that is gone is simply absent, and no scrape calls NVML or
talks to a hook.
"""

from __future__ import annotations

import platform
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from gputui import __version__
from gputui.exporter.exposition import COUNTER, GAUGE, INFO, Family, labels, render
from gputui.exporter.gpu_metrics import ClockEventCounters, GpuOptions, gpu_families
from gputui.exporter.jobs import JobWatcher
from gputui.exporter.train_metrics import train_families
from gputui.snapshot.model import Snapshot

#: a GPU snapshot older than this many sampling intervals is stale: its series are
#: still served (the last values), but collection_success says 0
STALE_INTERVALS = 3.0


@dataclass(frozen=True)
class ExporterOptions:
    hostname: str
    interval_s: float = 1.0
    processes: bool = False
    cmdline: bool = False


class ExporterCollector:
    """The latest snapshot and job totals, rendered on demand."""

    def __init__(
        self,
        options: ExporterOptions,
        gpu_enabled: bool,
        jobs: JobWatcher | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.options = options
        self.gpu_enabled = gpu_enabled
        self.jobs = jobs
        self._clock = clock
        self._gpu_options = GpuOptions(
            hostname=options.hostname, processes=options.processes, cmdline=options.cmdline
        )
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._arrived_s: float | None = None
        self._arrived_wall_s: float | None = None
        self._clock_events = ClockEventCounters(max_gap_s=STALE_INTERVALS * options.interval_s)
        self.collections = 0
        self.collection_errors = 0
        self._last_failed = False
        self.scrapes = 0
        self.last_render_s: float | None = None
        self._host = labels((("hostname", options.hostname),))

    # -- fed by the poller thread ----------------------------------------------------
    def on_snapshot(self, snapshot: Snapshot) -> None:
        now = self._clock()
        with self._lock:
            self._clock_events.update(snapshot, now)
            self._snapshot = snapshot
            self._arrived_s = now
            self._arrived_wall_s = time.time()
            self.collections += 1
            self._last_failed = False

    def on_error(self, exc: BaseException) -> None:
        with self._lock:
            self.collection_errors += 1
            self._last_failed = True

    # -- a scrape ----------------------------------------------------------------------
    def families(self) -> list[Family]:
        jobs = self.jobs.snapshot() if self.jobs is not None else ()
        with self._lock:
            snapshot = self._snapshot
            families = self._health(snapshot, len(jobs))
            if snapshot is not None:
                families += gpu_families(snapshot, self._gpu_options, self._clock_events)
        if self.jobs is not None:
            families += train_families(jobs, self.options.hostname, self.options.cmdline)
        return families

    def render(self) -> bytes:
        start = time.perf_counter()
        body = render(self.families())
        self.last_render_s = time.perf_counter() - start
        self.scrapes += 1
        return body

    def _health(self, snapshot: Snapshot | None, n_jobs: int) -> list[Family]:
        host = self._host
        build = Family(
            "gputui_exporter_build_info", INFO, "The exporter's version; the value is 1."
        )
        build.add(
            host.extend(("version", __version__), ("python_version", platform.python_version())), 1
        )
        enabled = Family(
            "gputui_exporter_collector_enabled",
            GAUGE,
            "1 when a collector runs: gpu (NVML or a recording), jobs (hooked training jobs).",
        )
        success = Family(
            "gputui_exporter_collection_success",
            GAUGE,
            "1 when the collector's last pass succeeded and is recent.",
        )
        duration = Family(
            "gputui_exporter_collection_duration_seconds",
            GAUGE,
            "How long the collector's last pass took.",
        )
        stamp = Family(
            "gputui_exporter_last_collection_timestamp_seconds",
            GAUGE,
            "When the collector's last pass ended (Unix time).",
        )
        passes = Family(
            "gputui_exporter_collections_total", COUNTER, "Collection passes that succeeded."
        )
        errors = Family(
            "gputui_exporter_collection_errors_total", COUNTER, "Collection passes that failed."
        )
        jobs_count = Family(
            "gputui_exporter_jobs", GAUGE, "Hooked training processes followed right now."
        )
        gpu = host.extend(("collector", "gpu"))
        enabled.add(gpu, 1 if self.gpu_enabled else 0)
        if self.gpu_enabled:
            fresh = (
                self._arrived_s is not None
                and self._clock() - self._arrived_s
                <= STALE_INTERVALS * self.options.interval_s + 1.0
            )
            success.add(gpu, 1 if fresh and not self._last_failed else 0)
            if snapshot is not None and snapshot.sample_latency_ms is not None:
                duration.add(gpu, snapshot.sample_latency_ms / 1000.0)
            stamp.add(gpu, self._arrived_wall_s)
            passes.add(gpu, self.collections)
            errors.add(gpu, self.collection_errors)
        job_lab = host.extend(("collector", "jobs"))
        enabled.add(job_lab, 1 if self.jobs is not None else 0)
        if self.jobs is not None:
            watcher = self.jobs
            success.add(job_lab, 1 if watcher.scans > 0 else 0)
            duration.add(job_lab, watcher.last_scan_s)
            passes.add(job_lab, watcher.scans)
            errors.add(job_lab, watcher.scan_errors)
            jobs_count.add(host, n_jobs)
        return [build, enabled, success, duration, stamp, passes, errors, jobs_count]
