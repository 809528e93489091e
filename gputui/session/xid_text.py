"""A GPU's Xid errors as text: the flag of the GPU panel and the cluster's GPU
rows, the line of ``--once``, and what is said where they cannot be watched.

The driver's words and the process's name come from the kernel log (the
process is another user's choice): every string is cleaned here
(``fmt.clean``) before it reaches a view.
"""

from __future__ import annotations

from gputui import fmt
from gputui.analysis.severity import ORDER, Severity
from gputui.analysis.xid import meaning_of
from gputui.snapshot.model import DeviceSnapshot, XidEvent

#: said of a GPU whose Xid errors neither NVML nor the kernel log reports here
NOT_WATCHED = "Xid errors not watched (no NVML events for this GPU; the kernel log is root's)"


def worst(device: DeviceSnapshot) -> XidEvent | None:
    """The most severe of the GPU's newest Xid errors (the newest of those)."""
    best: XidEvent | None = None
    for event in device.xid_errors:  # oldest first: a later one wins a tie
        if (
            best is None
            or ORDER[meaning_of(event.xid).severity] <= ORDER[meaning_of(best.xid).severity]
        ):
            best = event
    return best


def flag(device: DeviceSnapshot) -> tuple[str, Severity] | None:
    """``("Xid 79", "crit")``: the panel's flag for the GPU's worst Xid error."""
    event = worst(device)
    if event is None:
        return None
    return f"Xid {event.xid}", meaning_of(event.xid).severity


def total(device: DeviceSnapshot) -> int:
    """Every Xid error counted for the GPU."""
    return sum(c.count for c in device.xid_counts)


def line(device: DeviceSnapshot, with_date: bool = False) -> str | None:
    """``Xid 79 (fell off the bus) at 14:03:12, pid 1234 python; 3 Xid errors``:
    the GPU's worst Xid error, cleaned; None without one."""
    event = worst(device)
    if event is None:
        return None
    text = f"Xid {event.xid} ({meaning_of(event.xid).short})"
    text += f" at {fmt.clock(event.time_s, with_date=with_date)}"
    if event.pid is not None:
        name = f" {fmt.clean(event.process_name, 32)}" if event.process_name else ""
        text += f", pid {event.pid}{name}"
    count = total(device)
    if count > 1:
        text += f"; {count} Xid errors"
    return text


def not_watched(device: DeviceSnapshot) -> bool:
    """Neither NVML's events nor the kernel log report the GPU's Xid errors here
    (False where that is not known: a recording, an older gputui)."""
    return device.xid_sources == ()
