"""The host collector against a fake psutil: host metrics and the process join."""

from __future__ import annotations

import contextlib
import math
import os
from collections import Counter, namedtuple
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from types import SimpleNamespace
from typing import Any

import pytest

from gputui.host.collector import (
    READ_ALL_UP_TO,
    REREAD_EVERY_S,
    REREAD_IDLE_S,
    SWAP_EVERY,
    HostCollector,
)
from gputui.host.in_view import InView
from gputui.host.processes import CLOCK_TICKS, ProcStat, read_proc_facts, read_proc_stat
from gputui.nvml.collector import NvmlCollector
from gputui.snapshot.model import ProcessSnapshot
from gputui.sources.live import LiveSource
from tests.helpers.fake_nvml import GIB, FakeNvml, FakeProcess, h100


class NoSuchProcess(Exception):
    def __init__(self, pid: int) -> None:
        super().__init__(pid)
        self.pid = pid


class ZombieProcess(NoSuchProcess):
    pass


class AccessDenied(Exception):
    pass


CpuTimes = namedtuple("CpuTimes", "user nice system idle iowait guest")


@dataclass
class ProcInfo:
    """What the fake kernel knows about one pid."""

    user: str = "alice"
    name: str = "python"
    cmdline: list[str] = field(default_factory=lambda: ["python", "train.py"])
    create_time: float = 1_700_000_000.0
    cpu: list[float] = field(default_factory=lambda: [0.0, 150.0, 80.0, 80.0, 80.0])
    rss: int = 3 * GIB
    ppid: int = 1
    #: attribute names that raise AccessDenied
    denied: set[str] = field(default_factory=set)
    zombie: bool = False


class FakePsutil:
    """The part of psutil the host collector uses."""

    NoSuchProcess = NoSuchProcess
    ZombieProcess = ZombieProcess
    AccessDenied = AccessDenied

    def __init__(self) -> None:
        self.procs: dict[int, ProcInfo] = {}
        self.calls: Counter[str] = Counter()
        self.oneshots = 0
        self.busy_pct = [10.0, 20.0, 30.0, 40.0]
        outer = self

        class Process:
            def __init__(self, pid: int) -> None:
                outer.calls["Process"] += 1
                info = outer.procs.get(pid)
                if info is None:
                    raise NoSuchProcess(pid)
                self.pid = pid
                self._create_time = info.create_time
                self._cpu_calls = 0

            def _info(self, attribute: str) -> ProcInfo:
                outer.calls[attribute] += 1
                info = outer.procs.get(self.pid)
                if info is None or info.create_time != self._create_time:
                    raise NoSuchProcess(self.pid)
                if info.zombie:
                    raise ZombieProcess(self.pid)
                if attribute in info.denied:
                    raise AccessDenied()
                return info

            @contextlib.contextmanager
            def oneshot(self) -> Iterator[None]:
                outer.oneshots += 1
                yield

            def is_running(self) -> bool:
                info = outer.procs.get(self.pid)
                return info is not None and info.create_time == self._create_time

            def create_time(self) -> float:
                return self._info("create_time").create_time

            def username(self) -> str:
                return self._info("username").user

            def name(self) -> str:
                return self._info("name").name

            def cmdline(self) -> list[str]:
                return list(self._info("cmdline").cmdline)

            def cpu_percent(self, interval: float | None = None) -> float:
                info = self._info("cpu_percent")
                value = info.cpu[min(self._cpu_calls, len(info.cpu) - 1)]
                self._cpu_calls += 1
                return value

            def memory_info(self) -> Any:
                return SimpleNamespace(rss=self._info("memory_info").rss, vms=0)

            def ppid(self) -> int:
                return self._info("ppid").ppid

        self.Process = Process

    def cpu_times(self, percpu: bool = False) -> Any:
        """Per-core times growing by 100 ticks a read, `busy_pct` of them busy; the
        whole CPU's (without ``percpu``) their sum, as /proc/stat's first line."""
        self.calls["cpu_times" if percpu else "cpu_times_whole"] += 1
        reads = self.calls["cpu_times"] + self.calls["cpu_times_whole"]
        if not percpu:
            cores = self._cores(reads)
            return CpuTimes(*(sum(values) for values in zip(*cores, strict=True)))
        return self._cores(reads)

    def _cores(self, reads: int) -> list[Any]:
        return [
            CpuTimes(
                user=reads * busy * 0.75,
                nice=0.0,
                system=reads * busy * 0.25,
                idle=reads * (100 - busy) * 0.5,
                iowait=reads * (100 - busy) * 0.5,
                guest=reads * busy * 0.5,  # inside user, as Linux counts it
            )
            for busy in self.busy_pct
        ]

    def swap_memory(self) -> Any:
        self.calls["swap_memory"] += 1
        return SimpleNamespace(total=8 * GIB, used=1 * GIB)

    def cpu_count(self, logical: bool = True) -> int:
        return 4

    def boot_time(self) -> float:
        return 1_000.0

    def virtual_memory(self) -> Any:
        return SimpleNamespace(total=64 * GIB, available=40 * GIB, used=20 * GIB)

    def getloadavg(self) -> tuple[float, float, float]:
        return (1.5, 1.0, 0.5)


@pytest.fixture
def ps() -> FakePsutil:
    return FakePsutil()


def gpu_process(pid: int, gpu: int = 0) -> ProcessSnapshot:
    return ProcessSnapshot(
        pid=pid, gpu_index=gpu, gpu_uuid=f"GPU-{gpu}", type="compute", gpu_mem_bytes=GIB
    )


# ----------------------------------------------------------------------- host


def test_host_sample(ps: FakePsutil) -> None:
    now = [100.0]
    collector = HostCollector(ps, clock=lambda: now[0])
    # read on construction so the first sample covers the time since then
    assert ps.calls["cpu_times"] == 1
    now[0] += 0.5
    host = collector.sample()
    assert ps.calls["cpu_times"] == 2  # one read serves the total and every core
    assert host.cpu_per_core_pct == pytest.approx((10.0, 20.0, 30.0, 40.0))
    assert host.cpu_pct == pytest.approx(25.0)
    assert host.cpu_count == 4
    assert (host.mem_used_bytes, host.mem_total_bytes) == (20 * GIB, 64 * GIB)
    assert host.mem_available_bytes == 40 * GIB
    assert (host.swap_used_bytes, host.swap_total_bytes) == (GIB, 8 * GIB)
    assert (host.load_1, host.load_5, host.load_15) == (1.5, 1.0, 0.5)
    assert host.uptime_s is not None and host.uptime_s > 1_000_000
    assert host.hostname


def test_without_each_core_one_read_of_the_whole_cpu_gives_the_same_total(
    ps: FakePsutil,
) -> None:
    # the monitor's screen shows the whole CPU only (a node's 128 cores are 128 lines)
    now = [100.0]
    collector = HostCollector(ps, clock=lambda: now[0], per_core=False)
    now[0] += 0.5
    host = collector.sample()
    assert (ps.calls["cpu_times_whole"], ps.calls["cpu_times"]) == (2, 0)
    assert host.cpu_pct == pytest.approx(25.0)  # as the per-core read's total
    assert host.cpu_per_core_pct == ()


def test_cpu_percent_over_less_than_a_tenth_of_a_second_is_not_reported(
    ps: FakePsutil,
) -> None:
    now = [100.0]
    collector = HostCollector(ps, clock=lambda: now[0])
    now[0] += 0.05
    early = collector.sample()
    assert early.cpu_pct is None and early.cpu_per_core_pct == ()
    assert early.mem_total_bytes == 64 * GIB  # the rest is there
    now[0] += 0.2  # measured from the early sample, which reset the baseline
    assert collector.sample().cpu_pct == pytest.approx(25.0)


def test_swap_is_read_on_a_slow_cadence(ps: FakePsutil) -> None:
    collector = HostCollector(ps)
    samples = [collector.sample() for _ in range(SWAP_EVERY + 1)]
    assert ps.calls["swap_memory"] == 2
    assert all(s.swap_total_bytes == 8 * GIB for s in samples)


def test_host_sample_survives_failing_queries(ps: FakePsutil) -> None:
    def broken() -> Any:
        raise OSError("no /proc/meminfo")

    ps.virtual_memory = broken  # type: ignore[method-assign]
    ps.getloadavg = broken  # type: ignore[method-assign]
    host = HostCollector(ps).sample()
    assert host.mem_total_bytes is None and host.load_1 is None
    assert host.cpu_count == 4


# ------------------------------------------------------------------ processes


def test_enrich_fills_host_fields(ps: FakePsutil) -> None:
    ps.procs[100] = ProcInfo(ppid=42)
    collector = HostCollector(ps)
    (first,) = collector.enrich((gpu_process(100),))
    assert first.user == "alice"
    assert first.name == "python"
    assert first.cmdline == ("python", "train.py")
    assert first.command == "python train.py"
    assert first.rss_bytes == 3 * GIB
    assert first.start_time_s == 1_700_000_000.0
    assert first.ppid == 42
    # psutil's first cpu_percent only sets a baseline: not a measurement
    assert first.cpu_pct is None
    assert first.gpu_mem_bytes == GIB  # GPU fields are kept
    (second,) = collector.enrich((gpu_process(100),))
    assert second.cpu_pct == 150.0
    assert ps.oneshots == 2


def test_static_process_facts_are_read_once(ps: FakePsutil) -> None:
    ps.procs[100] = ProcInfo()
    collector = HostCollector(ps)
    for _ in range(5):
        collector.enrich((gpu_process(100),))
    assert ps.calls["Process"] == 1
    assert ps.calls["cmdline"] == ps.calls["username"] == 1
    assert ps.calls["cpu_percent"] == 5
    assert ps.calls["memory_info"] == 5


def test_access_denied_gives_none_for_that_field_only(ps: FakePsutil) -> None:
    ps.procs[100] = ProcInfo(denied={"cmdline", "memory_info"})
    (process,) = HostCollector(ps).enrich((gpu_process(100),))
    assert process.cmdline is None and process.rss_bytes is None
    assert process.user == "alice" and process.ppid == 1
    assert process.command == "python"  # falls back to the name


def test_vanished_process_gives_none(ps: FakePsutil) -> None:
    collector = HostCollector(ps)
    (process,) = collector.enrich((gpu_process(999),))
    assert process.user is None and process.cmdline is None and process.cpu_pct is None
    assert process.pid == 999 and process.gpu_mem_bytes == GIB


def test_process_dying_between_samples(ps: FakePsutil) -> None:
    ps.procs[100] = ProcInfo()
    collector = HostCollector(ps)
    collector.enrich((gpu_process(100),))
    del ps.procs[100]
    (process,) = collector.enrich((gpu_process(100),))
    assert (process.user, process.rss_bytes, process.cpu_pct) == (None, None, None)


def test_zombie_gives_none(ps: FakePsutil) -> None:
    ps.procs[100] = ProcInfo(zombie=True)
    (process,) = HostCollector(ps).enrich((gpu_process(100),))
    assert (process.user, process.cmdline, process.rss_bytes) == (None, None, None)


def test_reused_pid_is_a_new_process(ps: FakePsutil) -> None:
    ps.procs[100] = ProcInfo(cmdline=["old"])
    collector = HostCollector(ps)
    collector.enrich((gpu_process(100),))
    collector.enrich((gpu_process(100),))
    ps.procs[100] = ProcInfo(cmdline=["new"], create_time=1_800_000_000.0)
    (process,) = collector.enrich((gpu_process(100),))
    assert process.cmdline == ("new",)
    assert process.start_time_s == 1_800_000_000.0
    assert process.cpu_pct is None  # a new baseline
    assert ps.calls["Process"] == 2


def test_processes_that_left_the_gpu_are_forgotten(ps: FakePsutil) -> None:
    ps.procs[100] = ProcInfo()
    ps.procs[200] = ProcInfo()
    collector = HostCollector(ps)
    collector.enrich((gpu_process(100), gpu_process(200)))
    collector.enrich((gpu_process(200),))
    (process,) = collector.enrich((gpu_process(100),))
    # pid 100 was dropped from the cache: looked up again, with a new cpu baseline
    assert ps.calls["Process"] == 3
    assert process.cpu_pct is None


def test_one_lookup_for_a_process_on_two_gpus(ps: FakePsutil) -> None:
    ps.procs[100] = ProcInfo()
    rows = HostCollector(ps).enrich((gpu_process(100, 0), gpu_process(100, 1)))
    assert [r.gpu_index for r in rows] == [0, 1]
    assert all(r.user == "alice" for r in rows)
    assert ps.oneshots == 1


def test_real_psutil_sees_this_process() -> None:
    collector = HostCollector()
    host = collector.sample()
    assert host.cpu_count and host.mem_total_bytes and host.uptime_s
    (me,) = collector.enrich((gpu_process(os.getpid()),))
    assert me.cmdline and me.user and me.rss_bytes
    assert me.ppid == os.getppid()


def test_live_source_joins_gpu_and_host(ps: FakePsutil) -> None:
    ps.procs[4242] = ProcInfo()
    fake = FakeNvml([h100(processes=[FakeProcess(4242)])])
    source = LiveSource(gpu=NvmlCollector(fake), host=HostCollector(ps))
    snapshot = source.sample()
    (process,) = snapshot.processes
    assert (process.pid, process.user, process.gpu_mem_bytes) == (4242, "alice", GIB)
    assert snapshot.devices[0].name == "NVIDIA H100 80GB HBM3"
    assert snapshot.cuda_driver_version == "13.0"
    assert snapshot.host.cpu_count == 4
    source.close()
    assert fake.shutdown_count == 1


def test_a_process_whose_values_held_is_the_same_value_as_last_refresh(ps: FakePsutil) -> None:
    """Unchanged NVML numbers and host details give the last refresh's value
    (the views read only the processes that are new objects); a change in
    either gives a new value with it."""
    ps.procs[100] = ProcInfo(cpu=[0.0] * 10)
    ps.procs[101] = ProcInfo(cpu=[0.0] * 10)
    ps.procs[102] = ProcInfo(cpu=[0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0])
    idle, moving, busy = FakeProcess(100), FakeProcess(101), FakeProcess(102)
    fake = FakeNvml([h100(processes=[idle, moving, busy])])
    source = LiveSource(gpu=NvmlCollector(fake), host=HostCollector(ps))

    def by_pid() -> dict[int, ProcessSnapshot]:
        return {p.pid: p for p in source.sample().processes}

    by_pid()
    before = by_pid()
    moving.used_gpu_memory = 2 * GIB
    after = by_pid()
    assert after[100] is before[100]
    assert after[101] is not before[101] and after[101].gpu_mem_bytes == 2 * GIB
    assert after[102] is not before[102] and after[102].cpu_pct != before[102].cpu_pct
    source.close()


def test_a_busy_node_reads_each_process_once_a_sample_and_its_facts_once(
    ps: FakePsutil,
) -> None:
    # 8 GPUs x 250 processes; pid 5000 is on every GPU
    gpus = []
    for g in range(8):
        procs = [FakeProcess(10_000 + g * 250 + k) for k in range(249)] + [FakeProcess(5000)]
        gpus.append(h100(processes=procs))
    fake = FakeNvml(gpus)
    pids = {p.pid for gpu in gpus for p in gpu.processes}
    for pid in pids:
        ps.procs[pid] = ProcInfo()
    source = LiveSource(gpu=NvmlCollector(fake), host=HostCollector(ps))
    samples = 10
    for _ in range(samples):
        snapshot = source.sample()
    assert len(snapshot.processes) == 2000 and len(pids) == 1993
    # NVML: each device's process lists once a sample, its per-process utilization
    # on the slow cadence
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 8 * samples
    assert fake.calls["nvmlDeviceGetGraphicsRunningProcesses_v3"] == 8 * samples
    assert fake.calls["nvmlDeviceGetProcessUtilization"] <= 8 * 2
    # psutil: a process's life-long facts once, its numbers once a sample (not once
    # per GPU it is on)
    assert ps.calls["Process"] == len(pids)
    assert ps.calls["cmdline"] == ps.calls["username"] == len(pids)
    assert ps.calls["cpu_percent"] == ps.calls["memory_info"] == len(pids) * samples
    # a pid reused by another process is read as a new one
    ps.procs[5000] = ProcInfo(user="bob", create_time=1_700_000_500.0)
    snapshot = source.sample()
    assert {p.user for p in snapshot.processes if p.pid == 5000} == {"bob"}
    assert ps.calls["cmdline"] == len(pids) + 1
    source.close()


# ------------------------------------------------------------- the /proc route


class FakeStat:
    """A fake ``read_proc_stat``: pid -> ProcStat, and how often each pid was read."""

    def __init__(self) -> None:
        self.stats: dict[int, ProcStat] = {}
        self.reads: Counter[int] = Counter()

    def __call__(self, pid: int) -> ProcStat | None:
        self.reads[pid] += 1
        return self.stats.get(pid)


def _stat(cpu_ticks: int = 0, start_ticks: int = 500, rss: int = GIB, ppid: int = 7) -> ProcStat:
    return ProcStat(
        ppid=ppid, cpu_ticks=cpu_ticks, start_ticks=start_ticks, rss_bytes=rss, zombie=False
    )


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_proc_route_reads_stat_once_a_refresh_and_facts_once(ps: FakePsutil) -> None:
    ps.procs[100] = ProcInfo()
    stat, clock = FakeStat(), Clock()
    stat.stats[100] = _stat(cpu_ticks=1000)
    collector = HostCollector(ps, clock=clock, proc_stat=stat)
    (first,) = collector.enrich((gpu_process(100), gpu_process(100, gpu=1)))[:1]
    assert first.cpu_pct is None  # a baseline, not a measurement
    assert (first.user, first.cmdline, first.rss_bytes, first.ppid) == (
        "alice",
        ("python", "train.py"),
        GIB,
        7,
    )
    assert first.start_time_s == 1_700_000_000.0
    for step in range(1, 5):
        clock.now += 2.0
        # 150 ticks in 2 s at CLOCK_TICKS a second
        stat.stats[100] = _stat(cpu_ticks=1000 + step * 150, rss=2 * GIB)
        (process,) = collector.enrich((gpu_process(100),))
        assert process.cpu_pct == pytest.approx(100.0 * 150 / CLOCK_TICKS / 2.0)
        assert process.rss_bytes == 2 * GIB
    assert stat.reads[100] == 5  # once a refresh, not once per GPU
    assert ps.calls["Process"] == 1 and ps.calls["cmdline"] == ps.calls["username"] == 1
    assert ps.calls["cpu_percent"] == ps.calls["memory_info"] == 0


def test_proc_route_knows_a_reused_pid_a_zombie_and_a_gone_process(ps: FakePsutil) -> None:
    ps.procs[100] = ProcInfo(cmdline=["old"])
    stat, clock = FakeStat(), Clock()
    stat.stats[100] = _stat()
    collector = HostCollector(ps, clock=clock, proc_stat=stat)
    collector.enrich((gpu_process(100),))
    ps.procs[100] = ProcInfo(cmdline=["new"], create_time=1_800_000_000.0)
    stat.stats[100] = _stat(start_ticks=900)
    clock.now += 1.0
    (process,) = collector.enrich((gpu_process(100),))
    assert process.cmdline == ("new",) and process.start_time_s == 1_800_000_000.0
    assert process.cpu_pct is None  # a new process: a new baseline
    stat.stats[100] = stat.stats[100]._replace(zombie=True)
    (zombie,) = collector.enrich((gpu_process(100),))
    assert (zombie.user, zombie.rss_bytes, zombie.cpu_pct) == (None, None, None)
    del stat.stats[100]
    (gone,) = collector.enrich((gpu_process(100),))
    assert (gone.user, gone.rss_bytes) == (None, None) and gone.gpu_mem_bytes == GIB


def test_proc_stat_of_this_process_agrees_with_psutil() -> None:
    import psutil

    stat = read_proc_stat(os.getpid())
    assert stat is not None and not stat.zombie
    me = psutil.Process()
    assert stat.ppid == me.ppid() == os.getppid()
    started = psutil.boot_time() + stat.start_ticks / CLOCK_TICKS
    assert started == pytest.approx(me.create_time(), abs=0.02)
    assert stat.rss_bytes == pytest.approx(me.memory_info().rss, rel=0.5)
    assert read_proc_stat(2**22 + 1) is None  # beyond any pid
    # the real collector takes the /proc route and fills the same fields
    (row,) = HostCollector().enrich((gpu_process(os.getpid()),))
    assert row.ppid == os.getppid() and row.rss_bytes and row.cmdline and row.user
    assert row.start_time_s == pytest.approx(me.create_time(), abs=0.02)


def test_proc_facts_agree_with_psutil(tmp_path: Any) -> None:
    """The first refresh's facts, read from /proc directly, are psutil's: the user
    (real uid), the name (the kernel's 15 characters, extended from the command
    line as psutil extends it) and the command line."""
    import subprocess
    import sys

    import psutil

    long_name = tmp_path / "a-very-long-program-name"
    long_name.symlink_to(sys.executable)
    script = "import sys, time; print(1, flush=True); time.sleep(60)"
    children = [
        subprocess.Popen([str(long_name), "-c", script, "two words"], stdout=subprocess.PIPE),
        subprocess.Popen([sys.executable, "-c", script, ""], stdout=subprocess.PIPE),
    ]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline()  # started
        collector = HostCollector()
        for pid in (os.getpid(), *(c.pid for c in children)):
            facts = read_proc_facts(pid)
            reference = psutil.Process(pid)
            assert facts is not None
            assert facts.uid == reference.uids().real
            assert facts.name == reference.name()
            assert facts.cmdline == tuple(reference.cmdline())
            (row,) = collector.enrich((gpu_process(pid),))
            assert (row.user, row.name, row.cmdline) == (
                reference.username(),
                reference.name(),
                tuple(reference.cmdline()),
            )
        assert read_proc_facts(2**22 + 1) is None
    finally:
        for child in children:
            child.kill()
            child.wait(30)


# ------------------------------------------- many processes: the ones in view first


class Node:
    """``count`` GPU processes over a fake /proc, enriched at each tick of a clock."""

    def __init__(
        self,
        ps: FakePsutil,
        count: int,
        view: frozenset[int] | None = None,
        host_order: bool = True,
    ) -> None:
        self.stat, self.clock = FakeStat(), Clock()
        self.pids = list(range(10_000, 10_000 + count))
        for pid in self.pids:
            ps.procs[pid] = ProcInfo()
            self.stat.stats[pid] = _stat()
        self.in_view = InView()
        if view is not None:
            self.in_view.set("table", view)
            # the rows sorted by %CPU (or HOST-MEM): the ones off screen every 5 s
            self.in_view.order_by_host("table", host_order)
        self.collector = HostCollector(
            ps, clock=self.clock, proc_stat=self.stat, in_view=self.in_view
        )
        #: per refresh: (its time, the pids read)
        self.log: list[tuple[float, set[int]]] = []

    def refresh(self, step_s: float = 1.0) -> tuple[ProcessSnapshot, ...]:
        if self.log:
            self.clock.now += step_s
        before = Counter(self.stat.reads)
        out = self.collector.enrich(tuple(gpu_process(pid) for pid in self.pids))
        self.log.append((self.clock.now, set((self.stat.reads - before).keys())))
        return out

    def read_times(self, pid: int) -> list[float]:
        return [now for now, read in self.log if pid in read]


def test_up_to_the_budget_every_process_is_read_at_every_refresh(ps: FakePsutil) -> None:
    # the common case does not change: a monitor's view or not, all read each time
    node = Node(ps, READ_ALL_UP_TO, view=frozenset({10_000}))
    for _ in range(12):
        node.refresh()
    assert all(read == set(node.pids) for _now, read in node.log)


def test_without_a_view_every_process_is_read_at_every_refresh(ps: FakePsutil) -> None:
    # --once, --json, the exporter, record and serve say nothing of a view
    node = Node(ps, 2 * READ_ALL_UP_TO)
    for _ in range(12):
        node.refresh()
    assert all(read == set(node.pids) for _now, read in node.log)


def test_above_the_budget_the_processes_in_view_every_time_the_others_in_turns(
    ps: FakePsutil,
) -> None:
    count = 5 * READ_ALL_UP_TO
    shown = frozenset(range(10_000, 10_040))
    node = Node(ps, count, view=shown)
    for _ in range(31):
        node.refresh()
    first_now, first = node.log[0]
    assert first == set(node.pids)  # every process is new: read at once
    for _now, read in node.log:
        assert shown <= read
    others = [pid for pid in node.pids if pid not in shown]
    for pid in others:
        times = [first_now, *node.read_times(pid)[1:], node.log[-1][0]]
        gaps = [b - a for a, b in pairwise(times)]
        assert max(gaps) <= REREAD_EVERY_S, (pid, times)
    # in turns: about a fifth of the others at each 1 s refresh, never all at once
    per_refresh = [len(read - shown) for _now, read in node.log[1:]]
    assert max(per_refresh) < 0.3 * len(others), per_refresh
    assert sum(per_refresh) < 0.3 * len(others) * len(per_refresh)
    # a control: the same node without a view reads every process every time
    control = Node(FakePsutil(), count)
    for _ in range(3):
        control.refresh()
    assert all(len(read) == count for _now, read in control.log)


def test_sorted_by_no_host_value_the_processes_off_screen_are_read_seldom(
    ps: FakePsutil,
) -> None:
    count = 5 * READ_ALL_UP_TO
    shown = frozenset(range(10_000, 10_040))
    others = [pid for pid in range(10_000, 10_000 + count) if pid not in shown]
    node = Node(ps, count, view=shown, host_order=False)
    for _ in range(61):
        node.refresh()
    for _now, read in node.log:
        assert shown <= read
    for pid in others:
        times = [node.log[0][0], *node.read_times(pid)[1:], node.log[-1][0]]
        gaps = [b - a for a, b in pairwise(times)]
        assert REREAD_EVERY_S < max(gaps) <= REREAD_IDLE_S, (pid, times)
    per_refresh = [len(read - shown) for _now, read in node.log[1:]]
    assert sum(per_refresh) <= math.ceil(len(others) / REREAD_IDLE_S) * len(per_refresh)
    # sorted by %CPU from now on: those read more than 5 s ago at the next refresh,
    # then every process off screen within 5 s again
    node.in_view.order_by_host("table", True)
    node.refresh()
    stale = [pid for pid in others if node.read_times(pid)[-1] < node.log[-2][0] - REREAD_EVERY_S]
    assert not stale
    assert len(node.log[-1][1] - shown) > 0.5 * len(others)
    for _ in range(12):
        node.refresh()
    since = node.log[-13][0]
    for pid in others:
        times = [t for t in node.read_times(pid) if t >= since]
        gaps = [b - a for a, b in pairwise([since, *times, node.log[-1][0]])]
        assert max(gaps) <= REREAD_EVERY_S, (pid, times)


def test_the_host_order_is_said_by_part_and_forgotten_with_it() -> None:
    view = InView()
    assert not view.host_order()
    view.set("table", frozenset({1}))
    view.order_by_host("table", True)
    view.order_by_host("detail", False)
    assert view.host_order()
    view.clear("table")
    assert not view.host_order()
    view.order_by_host("table", True)
    view.order_by_host("table", False)
    assert not view.host_order()


def test_a_new_process_is_read_at_once_and_the_view_is_followed(ps: FakePsutil) -> None:
    node = Node(ps, 3 * READ_ALL_UP_TO, view=frozenset({10_000}))
    for _ in range(3):
        node.refresh()
    ps.procs[77] = ProcInfo(cmdline=["new"])
    node.stat.stats[77] = _stat()
    node.pids.append(77)
    procs = node.refresh()
    assert 77 in node.log[-1][1] and procs[-1].cmdline == ("new",)
    # the table scrolled: the new rows are read at the next refresh, the old ones no more
    node.in_view.set("table", frozenset({10_500, 10_501}))
    node.refresh()
    assert {10_500, 10_501} <= node.log[-1][1]
    reads_of_first = len(node.read_times(10_000))
    for _ in range(3):
        node.refresh()
    assert len(node.read_times(10_000)) <= reads_of_first + 1


def test_a_process_read_in_turns_shows_its_cpu_share_between_its_two_reads(
    ps: FakePsutil,
) -> None:
    node = Node(ps, 2 * READ_ALL_UP_TO, view=frozenset({10_000}))
    pid = node.pids[-1]
    # 30% of a CPU for the first 10 s, then 80%: the CPU ticks at each refresh
    ticks = [0]
    for step in range(1, 25):
        ticks.append(ticks[-1] + int(CLOCK_TICKS * (0.3 if step <= 10 else 0.8)))
    shown: list[float | None] = []
    for step in range(25):
        node.stat.stats[pid] = _stat(cpu_ticks=ticks[step])
        procs = node.refresh()
        shown.append(next(p.cpu_pct for p in procs if p.pid == pid))
    reads = [round(now - 1000.0) for now in node.read_times(pid)]
    assert 5 <= len(reads) < 25  # in turns, not at every refresh
    for before, after, until in zip(reads, reads[1:], [*reads[2:], 25], strict=False):
        share = 100.0 * (ticks[after] - ticks[before]) / CLOCK_TICKS / (after - before)
        # what its read found stands until its next read
        assert shown[after:until] == [pytest.approx(share)] * (until - after)
    assert shown[-1] == pytest.approx(80.0, abs=1.0)


def test_a_live_source_handed_a_view_passes_it_to_its_host_collector(ps: FakePsutil) -> None:
    gpus = [
        h100(processes=[FakeProcess(20_000 + g * 250 + k) for k in range(250)]) for g in range(2)
    ]
    for gpu in gpus:
        for p in gpu.processes:
            ps.procs[p.pid] = ProcInfo()
    clock = Clock()
    host = HostCollector(ps, clock=clock)
    source = LiveSource(gpu=NvmlCollector(FakeNvml(gpus)), host=host)
    source.sample()  # no view yet: every process
    assert ps.calls["cpu_percent"] == 500
    in_view = InView()
    in_view.set("table", frozenset({20_000, 20_001}))
    in_view.order_by_host("table", True)
    source.use_view(in_view)
    assert host.in_view is in_view
    clock.now += 1.0
    source.sample()
    # the two in view and, of the 498 others, a fifth (one second of five)
    assert ps.calls["cpu_percent"] == 500 + 2 + math.ceil(498 / REREAD_EVERY_S)
    source.close()


def test_a_hooked_process_marked_as_before_is_the_value_marked_before(ps: FakePsutil) -> None:
    source = LiveSource(gpu=NvmlCollector(FakeNvml([h100()])), host=HostCollector(ps))
    given = gpu_process(7)
    (first,) = source._mark_hooked((given,), {7})
    (again,) = source._mark_hooked((given,), {7})
    assert first.hooked and again is first
    (other,) = source._mark_hooked((gpu_process(7),), {7})
    assert other.hooked and other is not first
    assert source._mark_hooked((given,), set()) == (given,)
    source.close()
