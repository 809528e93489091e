"""The views that read only the processes that changed since the last refresh
(a replay reuses every unchanged process object) give what a full pass gives:
the table's order under every sort, the container column, and the history's
series once every series is taken.  Each sequence of refreshes is replayed
twice: once reusing the unchanged objects, once with every process a new
object (every position read), and against the plain functions."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gputui.session.process_sort import base_order
from gputui.session.process_view import (
    SORTABLE,
    ProcFilter,
    RowBuilder,
    SortSpec,
    build_rows,
    mended_order,
)
from gputui.snapshot import history as history_mod
from gputui.snapshot.history import History
from gputui.snapshot.model import (
    ContainerInfo,
    PlacedMemo,
    ProcessSnapshot,
    any_placed,
    replaced,
)
from tests.unit.test_replay import make_snapshot


def proc(pid: int, gpu: int = 0, mem: int = 1, **changes: Any) -> ProcessSnapshot:
    return ProcessSnapshot(
        pid=pid,
        gpu_index=gpu,
        gpu_uuid=f"GPU-{gpu}",
        type="compute",
        gpu_mem_bytes=mem * 2**20,
        sm_pct=float(mem % 7),
        cpu_pct=float(pid % 5),
        user=f"u{pid % 3}",
        cmdline=("python", f"job{pid}.py"),
        start_time_s=100.0 + pid,
        **changes,
    )


#: one refresh's change to the list: (what, position, value)
CHANGE = st.tuples(
    st.sampled_from(["numbers", "pid", "gpu", "container", "remove", "add", "swap"]),
    st.integers(min_value=0, max_value=10**6),
    st.integers(min_value=0, max_value=50),
)


def evolve(procs: list[ProcessSnapshot], changes: list[tuple[str, int, int]]) -> None:
    """Apply ``changes`` in place; each changed process is a new object."""
    for what, at, value in changes:
        if what == "add" or not procs:
            procs.insert(at % (len(procs) + 1), proc(1000 + value * 7 + at % 5, value % 3, value))
            continue
        i = at % len(procs)
        p = procs[i]
        if what == "numbers":
            procs[i] = dataclasses.replace(p, gpu_mem_bytes=value * 2**20, sm_pct=float(value))
        elif what == "pid":
            procs[i] = dataclasses.replace(p, pid=p.pid + value + 1)
        elif what == "gpu":
            procs[i] = dataclasses.replace(p, gpu_index=value % 4, gpu_uuid=f"GPU-{value % 4}")
        elif what == "container":
            box = ContainerInfo(runtime="docker", id=f"{value:012x}") if value % 2 else None
            procs[i] = dataclasses.replace(p, container=box)
        elif what == "remove":
            del procs[i]
        else:
            j = (i + 1 + value) % len(procs)
            procs[i], procs[j] = procs[j], procs[i]


def fresh(procs: list[ProcessSnapshot]) -> tuple[ProcessSnapshot, ...]:
    """The same values, every one a new object."""
    return tuple(dataclasses.replace(p) for p in procs)


REFRESHES = st.lists(st.lists(CHANGE, max_size=4), min_size=1, max_size=8)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(min_value=0, max_value=100),
    REFRESHES,
    st.sampled_from(SORTABLE),
    st.booleans(),
)
def test_the_table_order_and_container_column_match_a_full_pass(
    start: int, refreshes: list[list[tuple[str, int, int]]], column: str, descending: bool
) -> None:
    procs = [proc(pid, pid % 3, (pid * 37) % 11) for pid in range(start)]
    builder, placed = RowBuilder(), PlacedMemo()
    spec = SortSpec(column, descending)
    for changes in refreshes:
        evolve(procs, changes)
        now = tuple(procs)
        rows = builder.build(now, spec, ProcFilter(), False, 500.0)
        expected = build_rows(fresh(procs), spec, ProcFilter(), False, 500.0)
        assert [r.key for r in rows[:]] == [r.key for r in expected]
        assert placed(now) == any_placed(now)


@settings(max_examples=100, deadline=None)
@given(REFRESHES.map(lambda r: [[("swap", 5, 0)], *r]))
def test_the_history_with_every_series_taken_matches_a_full_pass(
    refreshes: list[list[tuple[str, int, int]]],
) -> None:
    limit = 6
    original = history_mod.MAX_PROCESSES
    history_mod.MAX_PROCESSES = limit  # every series taken after the first refresh
    try:
        reused, control = History(), History()
        procs = [proc(pid, 0, pid) for pid in range(limit + 4)]
        for t, changes in enumerate(refreshes):
            evolve(procs, changes)
            base = make_snapshot(float(t))
            reused.add(dataclasses.replace(base, processes=tuple(procs)), float(t))
            control._mask = ((), set(), [])  # nothing remembered: a full pass
            control.add(dataclasses.replace(base, processes=fresh(procs)), float(t))
        assert reused.processes.keys() == control.processes.keys()
        for key, entry in control.processes.items():
            mine = reused.processes[key].series
            assert {k: list(v) for k, v in mine.items()} == {
                k: list(v) for k, v in entry.series.items()
            }
    finally:
        history_mod.MAX_PROCESSES = original


def test_replaced_compares_identity_not_values() -> None:
    a, b = proc(1), proc(2)
    same_value = dataclasses.replace(a)
    assert replaced((a, b), (a, b)) == []
    assert replaced((same_value, b), (a, b)) == [0]
    assert replaced((a,), (a, b)) is None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40)), min_size=1, max_size=60),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 3), st.integers(0, 40)), max_size=6),
)
def test_a_mended_order_is_the_full_sort(
    keys: list[tuple[int, int]], moves: list[tuple[int, int, int]]
) -> None:
    """Duplicate (GPU, pid) pairs included: ties keep their positions' order."""
    before = [proc(pid, gpu) for gpu, pid in keys]
    after = list(before)
    for at, gpu, pid in moves:
        after[at % len(after)] = proc(pid, gpu)
    moved = sorted({i for i in range(len(after)) if after[i] is not before[i]})
    assert mended_order(base_order(before), after, moved) == base_order(after)


def test_replaced_answers_again_only_for_the_same_tuples() -> None:
    a, b, c = proc(1), proc(2), proc(3)
    new, old = (a, b), (a, c)
    assert replaced(new, old) == [1]
    assert replaced(new, old) == [1]  # asked again: the remembered answer
    mutable_new, mutable_old = [a, b], [a, c]
    assert replaced(mutable_new, mutable_old) == [1]
    mutable_new[0] = c  # a list may change between two questions
    assert replaced(mutable_new, mutable_old) == [0, 1]
