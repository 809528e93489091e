"""The kernel and CPU-op tables of a capture or a trace: one reduction for both.

The hook reduces raw profiler events (:mod:`gputui.hook._reduce`) and the trace
reader reduces a trace's timeline (:mod:`gputui.analysis.trace_summary`); both
tally durations per name and hand the tallies here, so a capture and a trace
file give the same rows for the same events.
"""

from __future__ import annotations

from collections.abc import Iterable

from gputui.protocol.capture import CpuOpRow, KernelRow
from gputui.protocol.value import ValueBase, value_class
from gputui.trace.kernels import kernel_class

#: rows kept in a table (the rules read the totals, which count every row)
TOP_ROWS = 30


def us(ns: float) -> float:
    """Nanoseconds as microseconds, to the nanosecond."""
    return round(ns / 1000.0, 3)


def tally(durations: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    """``name -> [calls, total, min, max]`` of ``(name, duration)`` pairs."""
    per_name: dict[str, list[int]] = {}
    for name, dur in durations:
        row = per_name.get(name)
        if row is None:
            per_name[name] = [1, dur, dur, dur]
        else:
            row[0] += 1
            row[1] += dur
            if dur < row[2]:
                row[2] = dur
            if dur > row[3]:
                row[3] = dur
    return per_name


@value_class
class KernelTable(ValueBase):
    """The top GPU activities by total time, and totals over every name."""

    rows: tuple[KernelRow, ...]
    names: int
    calls: int
    total_us: float
    #: µs per kernel class, biggest first
    by_class_us: dict[str, float]
    #: the class of every name tallied
    classes: dict[str, str]


def kernel_table(
    per_name: dict[str, list[int]], top: int = TOP_ROWS, max_name: int | None = None
) -> KernelTable:
    """The table of a :func:`tally` of GPU activity durations in nanoseconds;
    ``max_name`` cuts the names sent on the wire."""
    grand = 0
    calls = 0
    by_class: dict[str, int] = {}
    classes: dict[str, str] = {}
    for name, row in per_name.items():
        cls = classes[name] = kernel_class(name)
        by_class[cls] = by_class.get(cls, 0) + row[1]
        grand += row[1]
        calls += row[0]
    rows = sorted(per_name.items(), key=lambda item: item[1][1], reverse=True)[:top]
    table = tuple(
        KernelRow(
            name=name[:max_name] if max_name else name,
            kernel_class=classes[name],
            calls=row[0],
            total_us=us(row[1]),
            mean_us=us(row[1] / row[0]),
            min_us=us(row[2]),
            max_us=us(row[3]),
            share=round(row[1] / grand, 6) if grand else 0.0,
        )
        for name, row in rows
    )
    ordered = {cls: us(ns) for cls, ns in sorted(by_class.items(), key=lambda kv: -kv[1])}
    return KernelTable(table, len(per_name), calls, us(grand), ordered, classes)


@value_class
class CpuOpTable(ValueBase):
    """The top host ops and runtime calls by self time, and totals over every name."""

    rows: tuple[CpuOpRow, ...]
    names: int
    self_total_us: float


def cpu_op_table(
    per_name: dict[str, list[int]],
    top: int = TOP_ROWS,
    *,
    per_us: float = 1000.0,
    max_name: int | None = None,
) -> CpuOpTable:
    """The table of :func:`gputui.trace.timeline.self_times`' ``name -> [calls,
    self, total]``, in units of ``1/per_us`` µs (nanoseconds by default; 1.0 for
    a trace's microseconds)."""
    grand = sum(row[1] for row in per_name.values())
    rows = sorted(per_name.items(), key=lambda item: item[1][1], reverse=True)[:top]
    table = tuple(
        CpuOpRow(
            name=name[:max_name] if max_name else name,
            calls=row[0],
            self_us=round(row[1] / per_us, 3),
            total_us=round(row[2] / per_us, 3),
            mean_self_us=round(row[1] / row[0] / per_us, 3),
            share=round(row[1] / grand, 6) if grand else 0.0,
        )
        for name, row in rows
    )
    return CpuOpTable(table, len(per_name), round(grand / per_us, 3))
