"""Each GPU's Xid errors: NVML's critical Xid events and the kernel log's
``NVRM: Xid`` lines, one event each, the newest few kept and all counted.

One error may reach gputui twice (NVML's event, the driver's line) and the
driver may log one error on several lines (an Xid 13 names each faulting SM):
a line of the same code on the same GPU within :data:`SAME_ERROR_S` of an
event from NVML, or of a line for the same process, is that event, not
another.  NVML's event is stamped when gputui read it; the kernel's line
carries its own time, which the event takes when both are seen.

The driver names the process; an Xid from another user's process keeps its
pid alone, without its name and the driver's words, as gputui shows other
processes it may not read (gputui as root reads every process).
"""

from __future__ import annotations

import os
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping

from gputui.nvml.kernel_log import BusKey, KernelXid
from gputui.nvml.xid_events import RawXid
from gputui.snapshot.model import XidCount, XidEvent, evolve

#: the newest errors kept per GPU
KEPT = 8
#: an NVML event and a kernel line (or two lines) this close are one error
SAME_ERROR_S = 5.0
NVML = "nvml"
KERNEL_LOG = "kernel log"


def own_process(pid: int) -> bool:
    """Whether gputui may show ``pid``'s name and details: gputui runs as root,
    or the process is its user's (a process that has gone is nobody's)."""
    uid = os.geteuid()
    if uid == 0:
        return True
    try:
        return os.stat(f"/proc/{pid}").st_uid == uid
    except OSError:
        return False


class XidLog:
    """The Xid errors of every GPU of one session, by GPU index."""

    def __init__(self, shown: Callable[[int], bool] = own_process, kept: int = KEPT) -> None:
        self._shown = shown
        self._kept = kept
        self._events: dict[int, deque[XidEvent]] = {}
        self._counts: dict[int, Counter[int]] = {}
        #: each GPU's (errors, counts) as the snapshot's tuples, made when they change
        self._values: dict[int, tuple[tuple[XidEvent, ...], tuple[XidCount, ...]]] = {}

    def values(self, index: int) -> tuple[tuple[XidEvent, ...], tuple[XidCount, ...]]:
        """The GPU's newest errors (oldest first) and its counts by code."""
        return self._values.get(index, ((), ()))

    def add(
        self,
        events: Iterable[RawXid],
        lines: Iterable[KernelXid],
        gpu_of: Mapping[BusKey, int],
        now_s: float,
    ) -> set[int]:
        """NVML's ``events`` (read at ``now_s``) and the kernel's ``lines``
        (``gpu_of``: each GPU's index by PCI address; a line of a GPU not
        listed is not this session's); the GPUs whose errors changed."""
        changed: set[int] = set()
        for raw in events:
            self._merge(raw.gpu, XidEvent(raw.xid, now_s, source=NVML))
            changed.add(raw.gpu)
        for line in lines:
            index = gpu_of.get(line.bus)
            if index is None:
                continue
            shown = line.pid is not None and self._shown(line.pid)
            self._merge(
                index,
                XidEvent(
                    line.xid,
                    line.time_s,
                    pid=line.pid,
                    process_name=line.process_name if shown else None,
                    detail=line.detail if shown or line.pid is None else None,
                    source=KERNEL_LOG,
                ),
            )
            changed.add(index)
        for index in changed:
            counts = self._counts.get(index, Counter())
            self._values[index] = (
                tuple(self._events[index]),
                tuple(XidCount(code, n) for code, n in sorted(counts.items())),
            )
        return changed

    def _merge(self, index: int, event: XidEvent) -> None:
        kept = self._events.setdefault(index, deque(maxlen=self._kept))
        for at in range(len(kept) - 1, -1, -1):
            other = kept[at]
            if other.xid != event.xid or abs(other.time_s - event.time_s) > SAME_ERROR_S:
                continue
            if event.source == NVML and other.source == KERNEL_LOG:
                kept[at] = evolve(other, source=f"{NVML}+{KERNEL_LOG}")
                return
            if event.source == KERNEL_LOG and other.source == NVML:
                kept[at] = evolve(event, source=f"{NVML}+{KERNEL_LOG}", time_s=event.time_s)
                return
            if event.source != NVML and event.pid == other.pid:
                return  # another line of the same error
        kept.append(event)
        self._counts.setdefault(index, Counter())[event.xid] += 1
