"""The process table's order: each column's sort value, and the order by GPU
and pid that breaks every tie.  Each step runs in C over the processes
(getters, ``sorted`` on positions).  The column and the direction come as plain
values: the table's :class:`~gputui.session.process_view.SortSpec` holds them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from itertools import compress
from operator import attrgetter, is_, is_not
from typing import Any

from gputui.session import container_text, slurm_text
from gputui.snapshot.model import ProcessSnapshot


def runtime_s(proc: ProcessSnapshot, now_s: float) -> float | None:
    if proc.start_time_s is None:
        return None
    return max(0.0, now_s - proc.start_time_s)


#: how each sortable column orders its rows: a getter of a process's value (None
#: sorts last); a new column adds its getter here
SORT_VALUES: dict[str, Callable[[ProcessSnapshot], Any]] = {
    "gpu": attrgetter("gpu_index"),
    "pid": attrgetter("pid"),
    "user": attrgetter("user"),
    "type": attrgetter("type"),
    "gpu_mem": attrgetter("gpu_mem_bytes"),
    "sm": attrgetter("sm_pct"),
    "bw": attrgetter("mem_bw_pct"),
    "cpu": attrgetter("cpu_pct"),
    "rss": attrgetter("rss_bytes"),
    "container": container_text.sort_key,
    "job": slurm_text.sort_key,
    "command": attrgetter("command"),
}
#: the columns whose values are the host's (read off screen in turns, more often
#: while the rows are sorted by one of them)
HOST_ORDER = frozenset({"cpu", "rss"})
PID_OF = attrgetter("pid")
GPU_OF = attrgetter("gpu_index")
_IS_NONE = partial(is_, None)
_NOT_NONE = partial(is_not, None)


def base_order(procs: Sequence[ProcessSnapshot]) -> list[int]:
    """The positions of ``procs`` by GPU, then pid (the ties of every sort)."""
    return _base_order(list(map(PID_OF, procs)), list(map(GPU_OF, procs)))


def _base_order(pids: list[int], gpus: list[int]) -> list[int]:
    # by pid, then (stable) by GPU: two sorts of plain integers (C compares them
    # faster than pairs, and lists of integers are nothing for the collector to
    # walk); a snapshot comes in this order already: an ordered list is one pass
    order = sorted(range(len(pids)), key=pids.__getitem__)
    order.sort(key=gpus.__getitem__)
    return order


def sorted_by(
    items: list[ProcessSnapshot],
    column: str,
    descending: bool,
    now_s: float,
    values: list[Any] | None = None,
) -> list[ProcessSnapshot]:
    """``items`` (in base order: :func:`base_order`) sorted by ``column``;
    unknown values (N/A) always last, ties in base order (``values``: each one's
    value of the column, when the caller has them).

    Every step runs in C (getters, ``sorted`` on positions): the order of 20,000
    processes costs a few milliseconds, and an already ordered list (a snapshot's
    own order) costs one pass."""
    if values is None:
        value: Callable[[ProcessSnapshot], Any] = (
            (lambda p: runtime_s(p, now_s)) if column == "time" else SORT_VALUES[column]
        )
        values = list(map(value, items))
    if None in values:
        known = list(compress(range(len(items)), map(_NOT_NONE, values)))
        unknown = list(compress(range(len(items)), map(_IS_NONE, values)))
    else:
        known, unknown = list(range(len(items))), []
    known.sort(key=values.__getitem__, reverse=descending)
    return list(map(items.__getitem__, known + unknown))
