"""The host collector: CPU, memory, swap, load and uptime, and process details.

psutil is injectable (tests pass a fake module).  Nothing here raises out of
:meth:`HostCollector.sample` or :meth:`HostCollector.enrich`: a process that
vanished, a zombie, or one we may not inspect gives ``None`` fields.

A process is known by its pid and start time.  What never changes for it
(command line, user, name, start time) is read once, through psutil; what
changes (CPU time, RSS, parent) is one read of ``/proc/PID/stat`` a refresh,
which also tells a reused pid by its start time.  psutil's own route (a check
that the pid was not reused, then CPU, memory and parent in a ``oneshot``) cost
about 140 µs a process on the development VM: 0.28 s a refresh for a node of
2,000 GPU processes.  Where there is no /proc, or psutil is a test's fake
without a ``proc_stat`` reader, the numbers come from psutil as before.

With more than ``READ_ALL_UP_TO`` GPU processes and a monitor that says which
are on screen (:class:`~gputui.host.in_view.InView`), only those are read
at every refresh; the others in turns, those read longest ago first, about a
``REREAD_EVERY_S``-th of them a second, so that each is read at least every
``REREAD_EVERY_S``, its last numbers standing meanwhile.  That is while the
monitor orders its rows by a host value (%CPU, HOST-MEM); otherwise nothing
shows the numbers of a process off screen, and each is read at least every
``REREAD_IDLE_S`` (on switching to such an order, those older than
``REREAD_EVERY_S`` are read at the next refresh).  Its CPU % is then the
share of a CPU it used between its two reads (CPU time over wall time, as at
every refresh), and a pid reused meanwhile is seen at its next read.  A process
seen for the first time is read at once.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from operator import attrgetter
from typing import Any

from gputui.host.in_view import InView
from gputui.host.kept import KeptRun
from gputui.host.processes import CLOCK_TICKS, ProcStat, read_proc_facts, read_proc_stat
from gputui.snapshot.model import HostSnapshot, ProcessSnapshot, evolve

#: swap changes slowly and psutil reads two files for it: read it every Nth sample
SWAP_EVERY = 10

#: CPU percentages are differences of /proc/stat tick counts (100 per second per
#: core); over less than this they would be a handful of ticks
MIN_CPU_INTERVAL_S = 0.1


#: the most user names a collector keeps
MAX_USERS = 4096

#: up to this many GPU processes, every one is read at every refresh
READ_ALL_UP_TO = 200

#: with more, a process not on screen is read again at least this often while
#: the rows are sorted by a host value (%CPU, HOST-MEM) ...
REREAD_EVERY_S = 5.0
#: ... and at least this often otherwise
REREAD_IDLE_S = 30.0


class _Turn:
    """When a process was last read and what that read gave."""

    __slots__ = ("details", "read_at")

    def __init__(self, read_at: float, details: dict[str, Any]) -> None:
        self.read_at = read_at
        self.details = details


def _same(details: dict[str, Any], turn: _Turn | None) -> dict[str, Any]:
    """``details``, or the equal details ``turn`` holds (the same object: the
    process's joined value is then kept, see ``enrich``)."""
    if turn is not None and turn.details == details:
        return turn.details
    return details


def _joined(process: ProcessSnapshot, details: dict[str, Any] | None) -> ProcessSnapshot:
    # None: a host pid this PID namespace does not show (no details of its own)
    return process if details is None else evolve(process, **details)


_PID = attrgetter("pid")
_HOST_PID = attrgetter("host_pid")
_DETAILS = attrgetter("details")


class _ProcessEntry:
    """A cached psutil.Process with the facts that never change for one process."""

    __slots__ = (
        "cmdline",
        "cpu_prev",
        "fresh",
        "name",
        "process",
        "start_ticks",
        "start_time_s",
        "user",
    )

    def __init__(self, process: Any, start_ticks: int | None = None) -> None:
        self.process = process
        #: /proc's start time of the process (the /proc route): with the pid, who it is
        self.start_ticks = start_ticks
        #: (CPU ticks, clock) at the previous refresh (the /proc route)
        self.cpu_prev: tuple[int, float] | None = None
        #: cpu_percent's first call only sets its baseline: report None until the next
        self.fresh = True
        self.user: str | None = None
        self.name: str | None = None
        self.cmdline: tuple[str, ...] | None = None
        self.start_time_s: float | None = None


class HostCollector:
    """Samples the host and joins GPU processes with their host-side details."""

    def __init__(
        self,
        psutil: Any | None = None,
        clock: Callable[[], float] = time.monotonic,
        proc_stat: Callable[[int], ProcStat | None] | None = None,
        in_view: InView | None = None,
        per_core: bool = True,
    ) -> None:
        #: read each core's time (``cpu_per_core_pct``); the monitor's screen shows
        #: only the whole CPU, one line of /proc/stat instead of one per core
        self.per_core = per_core
        if psutil is None:
            import psutil as psutil_module

            psutil = psutil_module
            if proc_stat is None and read_proc_stat(os.getpid()) is not None:
                proc_stat = read_proc_stat
        #: the /proc route for a refresh's numbers, or None: psutil's
        self._stat = proc_stat
        self._psutil = psutil
        self._gone = (psutil.NoSuchProcess,)
        self._denied = (psutil.AccessDenied,)
        self._clock = clock
        # CPU percentages compare with the previous reading: take one now so the
        # first sample covers the time since construction, not since boot
        self._cpu_prev = self._cpu_ticks()
        self._cpu_since = clock()
        self._samples = 0
        self._swap: Any = None
        # gethostname() is uname's node name: the same, without importing socket
        self._hostname = os.uname().nodename
        self._cpu_count = self._quiet(lambda: psutil.cpu_count(logical=True))
        self._boot_time = self._quiet(psutil.boot_time)
        #: pid -> cached process; an entry is checked against pid reuse each sample
        self._processes: dict[int, _ProcessEntry] = {}
        #: user names by uid
        self._users: dict[int, str] = {}
        #: the pids on screen, set by the monitor; None: read every process each time
        self.in_view = in_view
        #: pid -> its last read, the one read longest ago first
        self._turns: dict[int, _Turn] = {}
        #: each process's value joined with its details, kept while both are
        self._joined: KeptRun[ProcessSnapshot, dict[str, Any] | None, ProcessSnapshot] = KeptRun(
            _joined
        )
        #: the clock at the previous enrich (the time to the next is guessed from it)
        self._enriched_at: float | None = None

    def _quiet(self, query: Any) -> Any:
        try:
            return query()
        except Exception:  # a host metric is optional, never fatal
            return None

    # ------------------------------------------------------------------ host

    def sample(self) -> HostSnapshot:
        ps = self._psutil
        cpu, per_core = self._cpu_percentages()
        memory = self._quiet(ps.virtual_memory)
        if self._samples % SWAP_EVERY == 0:
            self._swap = self._quiet(ps.swap_memory)
        self._samples += 1
        swap = self._swap
        load = self._quiet(ps.getloadavg)
        uptime = time.time() - self._boot_time if self._boot_time is not None else None
        return HostSnapshot(
            hostname=self._hostname,
            cpu_count=self._cpu_count,
            cpu_pct=cpu,
            cpu_per_core_pct=per_core,
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

    def _cpu_ticks(self) -> list[tuple[float, float]] | None:
        """(busy, total) CPU time of each core, from one read of /proc/stat; of the
        whole CPU alone (one item) without ``per_core``."""
        if self.per_core:
            cores = self._quiet(lambda: self._psutil.cpu_times(percpu=True))
        else:
            whole = self._quiet(self._psutil.cpu_times)
            cores = [whole] if whole is not None else None
        if not cores:
            return None
        ticks = []
        for core in cores:
            # as psutil counts: guest time is already inside user and nice
            total = sum(core) - getattr(core, "guest", 0.0) - getattr(core, "guest_nice", 0.0)
            idle = core.idle + getattr(core, "iowait", 0.0)
            ticks.append((total - idle, total))
        return ticks

    def _cpu_percentages(self) -> tuple[float | None, tuple[float, ...]]:
        """Busy % of the whole CPU and of each core since the previous reading.

        One read of the per-core times serves both: psutil's two cpu_percent
        calls, which read /proc/stat twice, were a fifth of a live sample in a
        profile of the poller on the H100 machine."""
        now, ticks = self._clock(), self._cpu_ticks()
        prev, since = self._cpu_prev, self._cpu_since
        self._cpu_prev, self._cpu_since = ticks, now
        if ticks is None or prev is None or len(prev) != len(ticks):
            return None, ()
        if now - since < MIN_CPU_INTERVAL_S:
            # a few clock ticks since the baseline: any percentage would be noise
            return None, ()
        per_core = []
        busy_sum = total_sum = 0.0
        for (busy0, total0), (busy1, total1) in zip(prev, ticks, strict=True):
            busy, total = max(0.0, busy1 - busy0), max(0.0, total1 - total0)
            busy_sum += busy
            total_sum += total
            per_core.append(_percent(busy, total))
        if not self.per_core:
            return per_core[0], ()
        return _percent(busy_sum, total_sum), tuple(per_core)

    # ------------------------------------------------------------- processes

    def enrich(self, processes: tuple[ProcessSnapshot, ...]) -> tuple[ProcessSnapshot, ...]:
        """The same processes with user, command line, CPU%, RSS, start time, ppid."""
        # a host pid this PID namespace does not show: another process has that number here
        every_pid = list(map(_PID, processes))
        host_pids = list(map(_HOST_PID, processes))
        if host_pids.count(None) == len(host_pids):  # no host pid: the common case
            pids = dict.fromkeys(every_pid)
        else:
            pids = dict.fromkeys(
                pid
                for pid, host in zip(every_pid, host_pids, strict=True)
                if host is None or host != pid
            )
        turns = self._turns
        # forget processes that left the GPUs (or died): their cache would only grow
        # (the set differences run in C: a node's thousands are walked each refresh)
        for cache in (self._processes, turns):
            if len(cache) != len(pids) or cache.keys() != pids.keys():
                for pid in cache.keys() - pids.keys():
                    del cache[pid]
        now = self._clock()
        # the time to the next refresh, guessed as long as the time since the last one
        ahead = 0.0 if self._enriched_at is None else max(0.0, now - self._enriched_at)
        self._enriched_at = now
        in_view = self.in_view
        view = in_view.pids() if in_view is not None else None
        if in_view is None or view is None or len(pids) <= READ_ALL_UP_TO:
            for pid in pids:  # all read now: their order of reads stays as it is
                turn = turns.get(pid)
                if turn is None:
                    turns[pid] = _Turn(now, self._details(pid))
                else:
                    turn.read_at, turn.details = now, _same(self._details(pid), turn)
        else:
            shown = view & pids.keys()
            # on screen, or seen for the first time (all read at ``now``: their order
            # among themselves does not matter to the turns)
            for pid in shown | (pids.keys() - turns.keys()):
                self._read(pid, now)
            every = REREAD_EVERY_S if in_view.host_order() else REREAD_IDLE_S
            self._read_in_turns(now, ahead, len(pids) - len(shown), every)
        # A process whose value and details are the objects of the last refresh
        # is the value made then (its facts and NVML's numbers did not change).
        if len(pids) == len(every_pid):
            details = list(map(_DETAILS, map(turns.__getitem__, every_pid)))
        else:  # host pids: no details (a process here may have the same number)
            details = [
                None if host is not None and host == pid else turns[pid].details
                for pid, host in zip(every_pid, host_pids, strict=True)
            ]
        return self._joined.values(processes, details)

    def _read_in_turns(self, now: float, ahead: float, others: int, every: float) -> None:
        """Read the processes off screen that were read longest ago: as many as
        bring each round within ``every`` seconds, and any that would pass it
        before the next refresh."""
        quota = math.ceil(max(0, others) * ahead / every)
        # the next refresh within three quarters of the last interval counts as late
        # enough: a refresh a little early does not add a read
        late = now + 0.75 * ahead - every
        for pid, turn in list(self._turns.items()):
            if turn.read_at >= now or (quota <= 0 and turn.read_at > late):
                break  # read this time, or (oldest first) none left that is due
            self._read(pid, now)
            quota -= 1

    def _read(self, pid: int, now: float) -> None:
        """One read of ``pid``, kept as its latest (last in the order of reads)."""
        turns = self._turns
        old = turns.pop(pid, None)
        turns[pid] = _Turn(now, _same(self._details(pid), old))

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
        if self._stat is not None:
            return self._details_from_stat(pid, self._stat)
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

    def _details_from_stat(
        self, pid: int, read: Callable[[int], ProcStat | None]
    ) -> dict[str, Any]:
        stat = read(pid)
        if stat is None or stat.zombie:
            self._processes.pop(pid, None)
            return {}
        entry = self._processes.get(pid)
        if entry is None or entry.start_ticks != stat.start_ticks:
            entry = self._processes[pid] = self._facts(pid, stat.start_ticks)
        now = self._clock()
        cpu = None
        if entry.cpu_prev is not None and now > entry.cpu_prev[1]:
            ticks, since = entry.cpu_prev
            cpu = 100.0 * max(0, stat.cpu_ticks - ticks) / CLOCK_TICKS / (now - since)
        entry.cpu_prev = (stat.cpu_ticks, now)
        return {
            "user": entry.user,
            "name": entry.name,
            "cmdline": entry.cmdline,
            "start_time_s": entry.start_time_s,
            "cpu_pct": cpu,
            "rss_bytes": stat.rss_bytes,
            "ppid": stat.ppid if stat.ppid > 0 else None,
        }

    def _facts(self, pid: int, start_ticks: int) -> _ProcessEntry:
        """A new process's life-long facts, read once (None where not readable)."""
        entry = _ProcessEntry(None, start_ticks)
        if self._stat is read_proc_stat:  # this machine's /proc: read it directly
            facts = read_proc_facts(pid)
            if facts is not None:
                if self._boot_time is not None:
                    entry.start_time_s = self._boot_time + start_ticks / CLOCK_TICKS
                entry.user = None if facts.uid is None else self._user(facts.uid)
                entry.name, entry.cmdline = facts.name, facts.cmdline
            return entry
        try:
            process = self._psutil.Process(pid)
            with process.oneshot():
                entry.start_time_s = self._field(process.create_time)
                entry.user = self._field(process.username)
                entry.name = self._field(process.name)
                cmdline = self._field(process.cmdline)
                entry.cmdline = tuple(cmdline) if cmdline is not None else None
        except self._gone + self._denied:
            pass  # gone since /proc was read: its numbers stand, its facts are N/A
        return entry

    def _user(self, uid: int) -> str:
        """The name of user ``uid`` as psutil gives it (the number where it has
        none), looked up once per user (at most ``MAX_USERS`` kept)."""
        name = self._users.get(uid)
        if name is None:
            import pwd

            try:
                name = pwd.getpwuid(uid).pw_name
            except KeyError:
                name = str(uid)
            if len(self._users) >= MAX_USERS:
                self._users.clear()
            self._users[uid] = name
        return name

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


def _percent(busy: float, total: float) -> float:
    return 0.0 if total <= 0 else min(100.0, 100.0 * busy / total)
