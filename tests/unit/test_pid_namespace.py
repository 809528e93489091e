"""NVML's host pids mapped into gputui's PID namespace, on fake /proc trees."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gputui.host.collector import HostCollector
from gputui.host.pid_namespace import (
    HOST,
    INIT_PID_NS,
    MAPPED,
    UNMAPPED,
    PidMapper,
    ns_pids,
    start_ticks,
)
from gputui.snapshot.model import ProcessSnapshot
from tests.helpers.fake_proc import OTHER_PID_NS, FakeProc


def _procs(*pids: int) -> tuple[ProcessSnapshot, ...]:
    return tuple(
        ProcessSnapshot(pid=p, gpu_index=0, gpu_uuid="GPU-0", type="compute") for p in pids
    )


def test_real_proc_reads() -> None:
    import os

    assert ns_pids("/proc", "self") is not None
    assert ns_pids("/proc", "self")[-1] == os.getpid()  # type: ignore[index]
    assert start_ticks("/proc", os.getpid()) is not None
    assert start_ticks("/proc", 0) is None


def test_host_namespace_keeps_pids(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path / "proc", 500, ns=INIT_PID_NS)
    mapper = PidMapper(proc.path)
    assert mapper.mode == HOST
    processes = _procs(4242, 17)
    assert mapper.map(processes) == processes


def test_host_proc_mounted_as_proc_keeps_pids(tmp_path: Path) -> None:
    # a container whose /proc is the host's (its pid 1 is the host's init)
    proc = FakeProc(tmp_path / "proc", 5000, ns=OTHER_PID_NS)
    proc.add(1, ns=INIT_PID_NS)
    assert PidMapper(proc.path).mode == HOST


def _container(tmp_path: Path) -> tuple[FakeProc, FakeProc]:
    """gputui as pid 7 of a container (pid 5000 on the host); the host's /proc
    mounted at host/. The container's training job is pid 42 (host 6000); pid
    43 here is a shell; host pid 43 is some host daemon; host pid 7000 is in
    another container (its pid 42 there)."""
    proc = FakeProc(tmp_path / "proc", 7, ns=OTHER_PID_NS)
    proc.add(1, ns=OTHER_PID_NS)
    proc.add(42, start_ticks=2000)
    proc.add(43, start_ticks=3000)
    host = FakeProc(tmp_path / "host", 5000)
    host.add(1, ns=INIT_PID_NS)
    host.add(5000, nspid=(5000, 7))
    host.add(6000, nspid=(6000, 42), start_ticks=2000)
    host.add(43, start_ticks=50)
    host.add(7000, nspid=(7000, 42), start_ticks=2500)
    return proc, host


def test_mapped_through_the_hosts_proc(tmp_path: Path) -> None:
    proc, host = _container(tmp_path)
    mapper = PidMapper(proc.path, host.path)
    assert mapper.mode == MAPPED
    job, daemon, other = mapper.map(_procs(6000, 43, 7000))
    assert (job.pid, job.host_pid, job.pid_is_host) == (42, 6000, False)
    # host pid 43 is not the container's pid 43, and 7000 is another container's 42
    assert (daemon.pid, daemon.host_pid, daemon.pid_is_host) == (43, 43, True)
    assert (other.pid, other.host_pid, other.pid_is_host) == (7000, 7000, True)
    # the host's process restarted with the same pid: mapped anew
    host.add(6000, nspid=(6000, 43), start_ticks=3000)
    (job,) = mapper.map(_procs(6000))
    assert (job.pid, job.pid_is_host) == (43, False)
    # and gone
    (host.root / "6000" / "stat").unlink()
    (job,) = mapper.map(_procs(6000))
    assert job.pid_is_host


def test_the_same_number_in_both_namespaces_is_left_as_it_is(tmp_path: Path) -> None:
    proc, host = _container(tmp_path)
    proc.add(8000, start_ticks=4000)
    host.add(8000, nspid=(8000, 8000), start_ticks=4000)
    (same,) = PidMapper(proc.path, host.path).map(_procs(8000))
    assert same == _procs(8000)[0] and not same.pid_is_host and same.host_pid is None


def test_mapped_needs_the_same_start_time(tmp_path: Path) -> None:
    proc, host = _container(tmp_path)
    proc.add(42, start_ticks=2001)  # pid 42 here is another process
    (job,) = PidMapper(proc.path, host.path).map(_procs(6000))
    assert job.pid_is_host and job.pid == 6000


def test_unmapped_without_the_hosts_proc(tmp_path: Path) -> None:
    proc, _host = _container(tmp_path)
    mapper = PidMapper(proc.path, str(tmp_path / "absent"))
    assert mapper.mode == UNMAPPED
    processes = mapper.map(_procs(42, 6000))
    # pid 42 exists here, but NVML's 42 is the host's: never read as ours
    assert [(p.pid, p.host_pid, p.pid_is_host) for p in processes] == [
        (42, 42, True),
        (6000, 6000, True),
    ]


def test_the_hosts_proc_known_by_kthreadd_where_ns_links_are_not_readable(tmp_path: Path) -> None:
    proc, host = _container(tmp_path)
    (host.root / "1" / "ns" / "pid").unlink()  # not readable without CAP_SYS_PTRACE
    assert PidMapper(proc.path, host.path).mode == UNMAPPED
    host.add(2, comm="kthreadd")
    (host.root / "2" / "status").write_text("Name:\tkthreadd\nPPid:\t0\nNSpid:\t2\n")
    assert PidMapper(proc.path, host.path).mode == MAPPED
    # a user process at pid 2 (any other namespace) is not the kernel's
    (host.root / "2" / "status").write_text("Name:\tkthreadd\nPPid:\t1\nNSpid:\t2\n")
    assert PidMapper(proc.path, host.path).mode == UNMAPPED


def test_a_proc_of_another_namespace_is_not_taken_for_the_hosts(tmp_path: Path) -> None:
    proc, host = _container(tmp_path)
    (host.root / "1" / "ns" / "pid").unlink()
    (host.root / "1" / "ns" / "pid").symlink_to(OTHER_PID_NS)
    assert PidMapper(proc.path, host.path).mode == UNMAPPED


@pytest.mark.parametrize(
    "status", ["NSpid:\tx y\n", "Name:\tpython\n", ""], ids=["bad", "none", "empty"]
)
def test_bad_status_is_unmapped(tmp_path: Path, status: str) -> None:
    proc, host = _container(tmp_path)
    (host.root / "6000" / "status").write_text(status)
    (job,) = PidMapper(proc.path, host.path).map(_procs(6000))
    assert job.pid_is_host


class _NoPsutil:
    """A psutil that fails the test if it is asked about any process."""

    class NoSuchProcess(Exception):
        pass

    class AccessDenied(Exception):
        pass

    def __getattr__(self, name: str) -> object:
        return lambda *a, **k: None

    def Process(self, pid: int) -> object:
        raise AssertionError(f"host details read for pid {pid}")


def test_host_collector_reads_nothing_for_a_host_pid() -> None:
    collector = HostCollector(psutil=_NoPsutil())
    (proc,) = _procs(42)
    marked = dataclasses.replace(proc, host_pid=proc.pid)  # a host pid
    assert collector.enrich((marked,)) == (marked,)
