"""The host collector: CPU, memory, swap, load and uptime, and process details.

psutil is injectable (tests pass a fake module).  Nothing here raises out of
:meth:`HostCollector.sample` or :meth:`HostCollector.enrich`: a process that
vanished, a zombie, or one we may not inspect gives ``None`` fields.
"""

from __future__ import annotations

import dataclasses
import socket
import time
from typing import Any

from gputui.model import HostSnapshot, ProcessSnapshot


class _ProcessEntry:
    """A cached psutil.Process with the facts that never change for one process."""

    __slots__ = ("cmdline", "fresh", "name", "process", "start_time_s", "user")

    def __init__(self, process: Any) -> None:
        self.process = process
        #: cpu_percent's first call only sets its baseline: report None until the next
        self.fresh = True
        self.user: str | None = None
        self.name: str | None = None
        self.cmdline: tuple[str, ...] | None = None
        self.start_time_s: float | None = None


class HostCollector:
    """Samples the host and joins GPU processes with their host-side details."""

    def __init__(self, psutil: Any | None = None) -> None:
        if psutil is None:
            import psutil as psutil_module

            psutil = psutil_module
        self._psutil = psutil
        self._gone = (psutil.NoSuchProcess,)
        self._denied = (psutil.AccessDenied,)
        # cpu_percent(interval=None) compares with the previous call: prime it now
        # so the first sample covers the time since construction, not since boot
        self._cpu_pct = self._quiet(lambda: psutil.cpu_percent(interval=None))
        self._quiet(lambda: psutil.cpu_percent(interval=None, percpu=True))
        self._hostname = socket.gethostname()
        self._cpu_count = self._quiet(lambda: psutil.cpu_count(logical=True))
        self._boot_time = self._quiet(psutil.boot_time)
        #: pid -> cached process; an entry is checked against pid reuse each sample
        self._processes: dict[int, _ProcessEntry] = {}

    def _quiet(self, query: Any) -> Any:
        try:
            return query()
        except Exception:  # a host metric is optional, never fatal
            return None

    # ------------------------------------------------------------------ host

    def sample(self) -> HostSnapshot:
        ps = self._psutil
        cpu = self._quiet(lambda: ps.cpu_percent(interval=None))
        per_core = self._quiet(lambda: ps.cpu_percent(interval=None, percpu=True)) or ()
        memory = self._quiet(ps.virtual_memory)
        swap = self._quiet(ps.swap_memory)
        load = self._quiet(ps.getloadavg)
        uptime = time.time() - self._boot_time if self._boot_time is not None else None
        return HostSnapshot(
            hostname=self._hostname,
            cpu_count=self._cpu_count,
            cpu_pct=float(cpu) if cpu is not None else None,
            cpu_per_core_pct=tuple(float(core) for core in per_core),
            mem_used_bytes=_int(getattr(memory, "used", None)),
            mem_total_bytes=_int(getattr(memory, "total", None)),
            mem_available_bytes=_int(getattr(memory, "available", None)),
            swap_used_bytes=_int(getattr(swap, "used", None)),
            swap_total_bytes=_int(getattr(swap, "total", None)),
            load_1=float(load[0]) if load else None,
            load_5=float(load[1]) if load else None,
            load_15=float(load[2]) if load else None,
            uptime_s=uptime,
        )

    # ------------------------------------------------------------- processes

    def enrich(self, processes: tuple[ProcessSnapshot, ...]) -> tuple[ProcessSnapshot, ...]:
        """The same processes with user, command line, CPU%, RSS, start time, ppid."""
        details: dict[int, dict[str, Any]] = {}
        for snapshot in processes:
            if snapshot.pid not in details:
                details[snapshot.pid] = self._details(snapshot.pid)
        # forget processes that left the GPUs (or died): their cache would only grow
        for pid in list(self._processes):
            if pid not in details:
                del self._processes[pid]
        return tuple(dataclasses.replace(p, **details[p.pid]) for p in processes)

    def _entry(self, pid: int) -> _ProcessEntry | None:
        """The cached process for pid, replaced when the pid was reused."""
        entry = self._processes.get(pid)
        if entry is not None:
            try:
                # is_running() compares the creation time: a reused pid is another process
                if entry.process.is_running():
                    return entry
            except self._gone + self._denied:
                pass
            del self._processes[pid]
        try:
            process = self._psutil.Process(pid)
        except self._gone + self._denied:
            return None
        entry = _ProcessEntry(process)
        self._processes[pid] = entry
        return entry

    def _details(self, pid: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        entry = self._entry(pid)
        if entry is None:
            return out
        process = entry.process
        try:
            with process.oneshot():
                if entry.fresh:
                    # facts of a process's whole life: read once per (pid, create time)
                    entry.start_time_s = self._field(process.create_time)
                    entry.user = self._field(process.username)
                    entry.name = self._field(process.name)
                    cmdline = self._field(process.cmdline)
                    entry.cmdline = tuple(cmdline) if cmdline is not None else None
                cpu = self._field(lambda: process.cpu_percent(interval=None))
                memory = self._field(process.memory_info)
                ppid = self._field(process.ppid)
        except self._gone:
            self._processes.pop(pid, None)
            return out
        out["user"] = entry.user
        out["name"] = entry.name
        out["cmdline"] = entry.cmdline
        out["start_time_s"] = entry.start_time_s
        out["cpu_pct"] = None if entry.fresh or cpu is None else float(cpu)
        out["rss_bytes"] = _int(getattr(memory, "rss", None))
        out["ppid"] = _int(ppid)
        entry.fresh = False
        return out

    def _field(self, query: Any) -> Any:
        """One process attribute: None when access is denied; a vanished process raises."""
        try:
            return query()
        except self._gone:
            raise
        except self._denied:
            return None
        except OSError:
            return None


def _int(value: Any) -> int | None:
    return int(value) if value is not None else None
