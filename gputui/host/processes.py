"""Process look-ups and signals for the monitor's process table (psutil, os).

Kept out of the UI: the screens ask for values (a parent's command line) and
outcomes (a signal sent or why not), and run these off the UI thread where they
may block (reading /proc of many processes)."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterable
from typing import NamedTuple

from gputui.protocol.value import ValueBase, value_class

#: a process started more than this apart from what we saw is another process
PID_REUSE_TOLERANCE_S = 2.0


def parent_commands(pids: Iterable[int]) -> dict[int, str]:
    """pid -> its command line (or name), for processes shown only as parents in
    the tree view; "(exited or not readable)" when it cannot be read.  Raw text:
    the caller cleans it for display."""
    names: dict[int, str] = {}
    try:
        import psutil
    except ImportError:
        return names
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            names[pid] = " ".join(proc.cmdline()) or proc.name()
        except (psutil.Error, OSError):
            names[pid] = "(exited or not readable)"
    return names


def pid_reused(pid: int, start_time_s: float | None) -> str | None:
    """Why ``pid`` is no longer the process that started at ``start_time_s``, or
    None when it still is (or its start time was never known)."""
    if start_time_s is None:
        return None
    try:
        import psutil

        started = psutil.Process(pid).create_time()
    except Exception:
        return None
    if abs(started - start_time_s) > PID_REUSE_TOLERANCE_S:
        return f"pid {pid} now belongs to another process"
    return None


@value_class
class SignalOutcome(ValueBase):
    """What sending a signal did, in words the UI shows."""

    sent: bool
    message: str
    severity: str  # "information", "warning" or "error", as the UI notifies


def send_signal(
    pid: int, signum: int, start_time_s: float | None, user: str | None
) -> SignalOutcome:
    """Send ``signum`` to ``pid`` unless the pid now names another process."""
    name = signal.Signals(signum).name
    reused = pid_reused(pid, start_time_s)
    if reused:
        return SignalOutcome(False, f"not sent: {reused}", "error")
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return SignalOutcome(False, f"pid {pid} has already exited", "warning")
    except PermissionError:
        who = f" ({user})" if user else ""
        return SignalOutcome(False, f"not permitted to signal pid {pid}{who}", "error")
    return SignalOutcome(True, f"sent {name} to pid {pid}", "information")


#: the most of a process's environment read (a job's environment is its own
#: business: gputui reads only the launcher's variables from it)
MAX_ENVIRON_BYTES = 1 << 20


def read_environ(pid: int, limit: int = MAX_ENVIRON_BYTES, proc: str = "/proc") -> dict[str, str]:
    """The environment a process started with; {} when it cannot be read."""
    try:
        with open(f"{proc}/{pid}/environ", "rb") as fh:
            data = fh.read(limit)
    except OSError:
        return {}
    env: dict[str, str] = {}
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


class ProcStat(NamedTuple):
    """What one read of ``/proc/PID/stat`` says of a process."""

    ppid: int
    #: user + system CPU time, in clock ticks (``CLOCK_TICKS`` a second)
    cpu_ticks: int
    #: when it started, in clock ticks after boot: with the pid, who it is
    start_ticks: int
    rss_bytes: int
    zombie: bool


#: the unit of /proc's CPU and start times
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def read_proc_stat(pid: int) -> ProcStat | None:
    """``/proc/PID/stat`` of ``pid`` in one read (None when gone or unreadable):
    what a refresh needs of a process that is already known."""
    try:  # without a buffered file object: a node's thousands are read each refresh
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
        try:
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after it
    _, _, rest = data.rpartition(b")")
    fields = rest.split()
    try:
        return ProcStat(
            ppid=int(fields[1]),
            cpu_ticks=int(fields[11]) + int(fields[12]),
            start_ticks=int(fields[19]),
            rss_bytes=max(0, int(fields[21])) * _PAGE_BYTES,
            zombie=fields[0] in (b"Z", b"X"),
        )
    except (IndexError, ValueError):
        return None


class ProcFacts(NamedTuple):
    """A process's life-long facts, as psutil reads them (None: not readable)."""

    #: the real user id (psutil's ``username`` is its name)
    uid: int | None
    name: str | None
    cmdline: tuple[str, ...] | None


_UID = re.compile(rb"\nUid:\t(\d+)\t")


def read_proc_facts(pid: int) -> ProcFacts | None:
    """What psutil's ``Process(pid)`` gives as ``uids().real``, ``name()`` and
    ``cmdline()``, read from ``/proc`` in three reads (psutil takes seven, and
    a node with thousands of GPU processes meets them all at its first
    refresh); None when the process is gone."""
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    name = os.fsdecode(stat[stat.find(b"(") + 1 : stat.rfind(b")")])
    status = _read(f"/proc/{pid}/status")
    found = _UID.search(status) if status is not None else None
    uid = int(found.group(1)) if found is not None else None
    raw = _read(f"/proc/{pid}/cmdline")
    cmdline = _split_cmdline(os.fsdecode(raw)) if raw is not None else None
    if len(name) >= 15 and cmdline:
        # the kernel keeps 15 characters of the name: psutil takes the command's
        # own where it begins with them
        extended = os.path.basename(cmdline[0])
        if extended.startswith(name):
            name = extended
    return ProcFacts(uid, name, cmdline)


def _split_cmdline(data: str) -> tuple[str, ...]:
    # psutil's reading: arguments end with NUL; a process that rewrote its command
    # line (setproctitle) may separate them with spaces instead
    if not data:
        return ()
    sep = "\x00" if data.endswith("\x00") else " "
    if data.endswith(sep):
        data = data[:-1]
    words = data.split(sep)
    if sep == "\x00" and len(words) == 1 and " " in data:
        words = data.split(" ")
    return tuple(words)


def _read(path: str) -> bytes | None:
    """The whole of a /proc file (its size is the kernel's), None if unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            chunks = []
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)
    except OSError:
        return None


def parent_pid(pid: int) -> int | None:
    """The parent of ``pid`` from /proc (None when gone or unreadable)."""
    stat = read_proc_stat(pid)
    return stat.ppid if stat is not None and stat.ppid > 0 else None


def ancestors(pid: int, limit: int = 8) -> list[int]:
    """The parent, grandparent, ... of ``pid`` (at most ``limit``, not init)."""
    out: list[int] = []
    current: int | None = pid
    while len(out) < limit:
        current = parent_pid(current) if current is not None else None
        if current is None or current <= 1 or current in out:
            break
        out.append(current)
    return out
