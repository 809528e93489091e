"""The NVIDIA driver's ``NVRM: Xid`` lines in the kernel log, read from
``/dev/kmsg`` without blocking.

``/dev/kmsg`` hands out one record per read, from the oldest the kernel still
holds (so a first read finds the Xid errors since boot, as ``dmesg`` would),
then each new one as it is logged; a read with nothing new fails at once
(EAGAIN), so a sample with no new record costs one system call.  At most
:data:`MAX_RECORDS` records are read a sample (a kernel's buffer holds a few
thousand; the rest wait for the next), at most :data:`MAX_FIRST_RECORDS` by
the first (about 1.2 µs a record).  The kernel lets root read it, and
other users only where ``kernel.dmesg_restrict`` is 0; when it cannot be read
the reason is kept and it is not tried again.  (``dmesg`` reads the same
buffer under the same permission: it is not run.)

The driver's line names the GPU by its PCI address, the Xid code, the process
(``pid=1234, name=python``; ``pid='<unknown>'`` where it knows none, neither on
older drivers) and what happened, e.g.::

    NVRM: Xid (PCI:0000:3b:00): 79, pid=1411, name=python, GPU has fallen off the bus.

Nothing here raises.
"""

from __future__ import annotations

import errno
import os
import re
import time
from collections.abc import Callable
from typing import NamedTuple

KMSG = "/dev/kmsg"
#: records read at most per call
MAX_RECORDS = 4096
#: records read at most by the first call: the kernel's buffer since boot (a few
#: thousand records on most machines, tens of thousands on a large one), so that
#: the newest errors, at its end, are found by the first sample (``--once``)
MAX_FIRST_RECORDS = 1 << 16
#: the longest record read (the kernel's own limit is about 1 KiB a line)
MAX_RECORD_BYTES = 8192
#: the most of a line's words kept (the driver's are a hundred characters or two)
MAX_DETAIL_CHARS = 512

#: "PCI:<domain>:<bus>:<device>[.<function>]): <code>, <rest>"
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})"
    r"(?:\.[0-9a-fA-F])?\): ([0-9]{1,5})(?:, (.*))?$"
)
_PID = re.compile(r"pid=(?:'<unknown>'|<unknown>|([0-9]{1,10}))(?:, |$)")
_NAME = re.compile(r"name=(?:'?<unknown>'?|([^,]{1,64}))(?:, |$)")
#: "[ 1234.567890] " at the start of a line in dmesg's own format
_DMESG_TIME = re.compile(r"^\[\s*([0-9]+\.[0-9]+)\]\s?")

#: a GPU's PCI address as (domain, bus, device), the key both sides agree on
BusKey = tuple[int, int, int]


class KernelXid(NamedTuple):
    """One ``NVRM: Xid`` line: the GPU's PCI address, the code, the process the
    driver names (None where it names none), what happened, and when (Unix
    time: the record's time since boot, placed on today's clock)."""

    bus: BusKey
    xid: int
    pid: int | None
    process_name: str | None
    detail: str | None
    time_s: float


def bus_key(bus_id: str | None) -> BusKey | None:
    """NVML's PCI bus id (``00000000:3B:00.0``) as the kernel log's (domain,
    bus, device); None when it is not one."""
    if not bus_id:
        return None
    parts = bus_id.strip().split(":")
    if len(parts) != 3:
        return None
    device = parts[2].split(".")[0]
    try:
        return (int(parts[0], 16), int(parts[1], 16), int(device, 16))
    except ValueError:
        return None


def parse_line(text: str, boot_time_s: float) -> KernelXid | None:
    """One kernel log line (a ``/dev/kmsg`` record, or a line as ``dmesg``
    prints it) as an Xid; None for any other line."""
    if "NVRM: Xid" not in text:
        return None
    since_boot: float | None = None
    header, sep, message = text.partition(";")
    if sep and header.count(",") >= 2:  # kmsg: "prio,seq,usec,flags;message"
        fields = header.split(",")
        if fields[2].isdigit():
            since_boot = int(fields[2]) / 1e6
    else:
        message = text
        stamp = _DMESG_TIME.match(message)
        if stamp:
            since_boot = float(stamp.group(1))
    found = _XID.search(message.rstrip("\n"))
    if found is None:
        return None
    domain, bus, device, code, rest = found.groups()
    rest = rest or ""
    pid: int | None = None
    name: str | None = None
    said = _PID.match(rest)
    if said:
        pid = int(said.group(1)) if said.group(1) else None
        rest = rest[said.end() :]
        named = _NAME.match(rest)
        if named:
            name = (named.group(1) or "").strip() or None
            rest = rest[named.end() :]
    when = boot_time_s + since_boot if since_boot is not None else time.time()
    return KernelXid(
        (int(domain, 16), int(bus, 16), int(device, 16)),
        int(code),
        pid,
        name,
        rest.strip()[:MAX_DETAIL_CHARS] or None,
        when,
    )


def boot_time() -> float:
    """When the machine booted, as Unix time (the kernel log's clock starts then)."""
    return time.time() - time.clock_gettime(time.CLOCK_MONOTONIC)


class KernelLog:
    """Reads the Xid lines the kernel logged since the last read."""

    def __init__(
        self,
        path: str = KMSG,
        boot_time_s: float | None = None,
        opener: Callable[[str, int], int] = os.open,
    ) -> None:
        self._path = path
        self._boot_time_s = boot_time() if boot_time_s is None else boot_time_s
        self._open = opener
        self._fd: int | None = None
        #: a regular file (a test's, or a saved log): lines, not records
        self._lines = b""
        #: why the log is not read (None: it is, or was not tried yet)
        self.reason: str | None = None

    @property
    def readable(self) -> bool | None:
        """Whether the log is read here (None: not tried yet)."""
        if self.reason is not None:
            return False
        return True if self._fd is not None else None

    def read(self) -> list[KernelXid]:
        """The Xid lines logged since the last read (the first: since boot)."""
        if self.reason is not None:
            return []
        limit = MAX_RECORDS
        if self._fd is None:
            try:
                self._fd = self._open(self._path, os.O_RDONLY | os.O_NONBLOCK)
            except OSError as exc:
                self.reason = f"{self._path} is not readable ({exc.strerror or exc})"
                return []
            limit = MAX_FIRST_RECORDS
        out: list[KernelXid] = []
        for _ in range(limit):
            try:
                record = os.read(self._fd, MAX_RECORD_BYTES)
            except BlockingIOError:  # nothing new
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # records overwritten before they were read
                    continue
                if exc.errno == errno.EINVAL:  # a record longer than the buffer
                    continue
                self.reason = f"{self._path} could not be read ({exc.strerror or exc})"
                self.close()
                break
            if not record:  # a regular file's end: read on from here next time
                break
            self._collect(record, out)
        return out

    def _collect(self, record: bytes, out: list[KernelXid]) -> None:
        data = self._lines + record
        lines = data.split(b"\n")
        # a record of /dev/kmsg ends its line; a file's read may cut one in two
        self._lines = lines.pop()
        if len(self._lines) > MAX_RECORD_BYTES:  # no line is that long: not a log
            self._lines = b""
        for raw in lines:
            if b"NVRM: Xid" not in raw:
                continue
            found = parse_line(raw.decode("utf-8", "replace"), self._boot_time_s)
            if found is not None:
                out.append(found)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
