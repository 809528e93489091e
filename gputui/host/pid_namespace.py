"""NVML's pids in gputui's own PID namespace (gputui inside a container).

The driver knows no PID namespaces: NVML reports every process by its pid on
the host.  On the host (or in a container run with ``--pid=host``) that is the
pid in ``/proc``.  In a container with its own PID namespace the container's
``/proc`` numbers processes differently, and the host's pid 4242 there may be
another process or none.  So:

- **host**: gputui's ``/proc`` numbers processes as the host does (its PID
  namespace is the initial one, or the ``/proc`` it reads was mounted from
  the host's): NVML's pids are used as they are.
- **mapped**: the host's ``/proc`` is mounted in the container (say
  ``-v /proc:/host/proc:ro``; ``GPUTUI_HOST_PROC`` names the path,
  ``/host/proc`` is tried by default): each host pid's ``NSpid`` line (its pid
  in every namespace from the host's down to its own) gives its pid here, and
  the pair is checked by the process's start time in both ``/proc``\\ s.
- **unmapped**: neither: every process keeps NVML's pid, marked as a host pid
  (``host_pid == pid``: ``pid_is_host``), with no details: gputui never reads the container's
  process of the same number.

A host pid that the mapping cannot place in gputui's namespace (a process of
another container, or of the host) is also shown as a host pid.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from gputui.snapshot.model import ProcessSnapshot, evolve

#: the inode of the initial PID namespace (PROC_PID_INIT_INO, fixed since Linux 3.8)
INIT_PID_NS = "pid:[4026531836]"
HOST_PROC_ENV = "GPUTUI_HOST_PROC"
DEFAULT_HOST_PROC = "/host/proc"

HOST = "host"
MAPPED = "mapped"
UNMAPPED = "unmapped"

#: what the views say about a host pid gputui cannot place
UNMAPPED_NOTE = (
    "a host pid (NVML reports the host's): the process is not in gputui's PID namespace, "
    "or gputui cannot map it (run gputui with --pid=host, or mount the host's /proc at /host/proc)"
)


def _readlink(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def _read(path: str, limit: int = 8192) -> str | None:
    # os.open and one read: half the cost of open() (read every refresh, per process)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, limit).decode("ascii", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def ns_pids(proc: str, pid: int | str) -> list[int] | None:
    """The ``NSpid`` line of ``proc/PID/status``: the pid in each PID namespace
    from the one ``proc`` was mounted in down to the process's own."""
    text = _read(f"{proc}/{pid}/status")
    if text is None:
        return None
    for line in text.splitlines():
        if line.startswith("NSpid:"):
            try:
                return [int(v) for v in line.split()[1:]]
            except ValueError:
                return None
    return None


def start_ticks(proc: str, pid: int) -> int | None:
    """Field 22 of ``proc/PID/stat``: when the process started, in clock ticks
    since boot (the same number whichever ``/proc`` shows the process)."""
    text = _read(f"{proc}/{pid}/stat", 4096)
    if text is None:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after it
    fields = text.rpartition(")")[2].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def is_host_proc(proc: str) -> bool:
    """Whether ``proc`` was mounted in the initial PID namespace (numbers
    processes as NVML does): its pid 1's namespace link says so where it may be
    read (root with CAP_SYS_PTRACE), else its pid 2 is the kernel's kthreadd,
    and kernel threads are only in the initial namespace."""
    link = _readlink(f"{proc}/1/ns/pid")
    if link is not None:
        return link == INIT_PID_NS
    text = _read(f"{proc}/2/status", 512)
    if text is None:
        return False
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return fields.get("Name", "").strip() == "kthreadd" and fields.get("PPid", "").strip() == "0"


class PidMapper:
    """Turns the pids NVML reports into pids of gputui's own PID namespace."""

    def __init__(self, proc: str = "/proc", host_proc: str | None = None) -> None:
        self._proc = proc
        self._host_proc: str | None = None
        #: levels between the host's PID namespace and gputui's (mapped mode)
        self._depth = 0
        #: host pid -> (its start ticks, its pid here or None)
        self._cache: dict[int, tuple[int | None, int | None]] = {}
        self.mode = self._detect(host_proc)

    def _detect(self, host_proc: str | None) -> str:
        own = _readlink(f"{self._proc}/self/ns/pid")
        if own is None or own == INIT_PID_NS:
            # the initial namespace, or a kernel that does not say: pids as they are
            return HOST
        if is_host_proc(self._proc):
            return HOST  # this /proc is the host's
        candidates = [host_proc] if host_proc else []
        if not candidates:
            candidates = [os.environ.get(HOST_PROC_ENV) or DEFAULT_HOST_PROC]
        for candidate in candidates:
            # only a /proc of the initial namespace numbers processes as NVML does
            if not is_host_proc(candidate):
                continue
            chain = ns_pids(candidate, "self")
            if not chain or len(chain) < 2:
                continue
            self._host_proc, self._depth = candidate, len(chain) - 1
            return MAPPED
        return UNMAPPED

    def map(self, processes: Sequence[ProcessSnapshot]) -> tuple[ProcessSnapshot, ...]:
        """The processes with pids of this namespace, or marked as host pids."""
        if self.mode == HOST:
            return tuple(processes)
        out: list[ProcessSnapshot] = []
        seen: set[int] = set()
        for proc in processes:
            seen.add(proc.pid)
            local = self._local_pid(proc.pid) if self.mode == MAPPED else None
            if local is None:
                out.append(evolve(proc, host_pid=proc.pid))  # pid_is_host
            elif local != proc.pid:
                out.append(evolve(proc, pid=local, host_pid=proc.pid))
            else:
                out.append(proc)  # the same number in both namespaces
        for pid in list(self._cache):
            if pid not in seen:
                del self._cache[pid]
        return tuple(out)

    def _local_pid(self, host_pid: int) -> int | None:
        host_proc = self._host_proc
        assert host_proc is not None
        started = start_ticks(host_proc, host_pid)
        if started is None:
            return None  # gone, or not readable
        cached = self._cache.get(host_pid)
        if cached is not None and cached[0] == started:
            return cached[1]
        local: int | None = None
        chain = ns_pids(host_proc, host_pid)
        if chain and len(chain) > self._depth:
            candidate = chain[self._depth]
            # the same process seen from here: same start, same namespaces below
            here = ns_pids(self._proc, candidate)
            if (
                start_ticks(self._proc, candidate) == started
                and here is not None
                and here == chain[self._depth :]
            ):
                local = candidate
        self._cache[host_pid] = (started, local)
        return local
