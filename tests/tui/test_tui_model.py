"""The TUI's pure parts: bounded history, process filter/sort/tree, formatting."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputui import fmt
from gputui.session.process_view import (
    ProcFilter,
    RowBuilder,
    SortSpec,
    build_rows,
    tree_rows,
)
from gputui.snapshot.history import MAX_PROCESSES, History
from gputui.snapshot.model import ProcessSnapshot
from gputui.tui import render
from tests.helpers.synthetic import make_snapshots


def proc(pid: int, ppid: int | None = 1, gpu: int = 0, **kw: object) -> ProcessSnapshot:
    return ProcessSnapshot(
        pid=pid,
        gpu_index=gpu,
        gpu_uuid=f"GPU-{gpu}",
        type="compute",
        ppid=ppid,
        **kw,  # type: ignore[arg-type]
    )


def test_history_is_bounded() -> None:
    snapshots = make_snapshots(n_gpus=2, n_procs=3, n_steps=5)
    history = History(series_points=50)
    for i in range(500):
        history.add(snapshots[i % 5], 1000.0 + i)
    assert history.samples == 500
    assert len(history.times) == 50
    assert all(len(s) == 50 for series in history.gpu.values() for s in series.values())
    assert all(len(s) <= 50 for s in history.host.values())


def test_history_time_keeps_going_forward_when_a_recording_loops() -> None:
    snapshots = make_snapshots(n_gpus=1, n_procs=1, n_steps=3)
    history = History()
    for i in range(9):
        history.add(snapshots[i % 3], snapshots[i % 3].timestamp_s, step_s=1.0)
    times = list(history.times)
    # 9 samples and, before each of the two loops, an empty point (a break in the graphs)
    assert times == sorted(times) and len(set(times)) == 11
    assert history.window_points(300.0) == 11
    assert history.window_points(2.0) == 3


def test_process_history_forgets_old_processes() -> None:
    base = make_snapshots(n_gpus=1, n_procs=0, n_steps=1)[0]
    history = History()
    for i in range(MAX_PROCESSES + 50):
        snap = dataclasses.replace(base, processes=(proc(10_000 + i),))
        history.add(snap, float(i))
    assert len(history.processes) <= MAX_PROCESSES


def test_process_history_of_many_processes_keeps_a_steady_set_and_the_watched() -> None:
    base = make_snapshots(n_gpus=1, n_procs=0, n_steps=1)[0]
    many = tuple(proc(10_000 + i) for i in range(MAX_PROCESSES * 4))
    history = History()
    for i in range(3):
        history.add(dataclasses.replace(base, processes=many), float(i))
    kept = set(history.processes)
    assert len(kept) == MAX_PROCESSES
    # the same processes keep their series from one sample to the next: none restarts
    assert all(len(e.series["sm"]) == 3 for e in history.processes.values())
    last = many[-1]
    assert last.key not in kept
    history.watch(last.key)
    history.add(dataclasses.replace(base, processes=many), 3.0)
    assert last.key in history.processes and len(history.processes) == MAX_PROCESSES
    assert list(history.process_series(last.key, "sm")) == [last.sm_pct]


def test_filter_parsing_and_matching() -> None:
    flt = ProcFilter.parse("user:bob gpu:1 type:graphics Xorg")
    assert flt.users == ("bob",) and flt.gpus == (1,) and flt.kind == "graphics"
    assert flt.words == ("xorg",)
    assert ProcFilter.parse(flt.to_text()) == flt
    p = dataclasses.replace(
        proc(5, gpu=1, user="bob", cmdline=("/usr/lib/Xorg", "vt1")), type="graphics"
    )
    assert flt.matches(p)
    assert not flt.matches(dataclasses.replace(p, user="alice"))
    assert not ProcFilter.parse("type:compute").matches(p)
    assert ProcFilter.parse("5").matches(p)  # pid
    # prefixes read as the type they start; other values are said, not guessed
    assert ProcFilter.parse("type:g").kind == "graphics"
    bogus = ProcFilter.parse("type:bogus gpu:x")
    assert bogus.kind is None and bogus.gpus == () and bogus.active is False
    assert bogus.problems == (
        "type: is compute or graphics, not 'bogus'",
        "gpu: takes a GPU index, not 'x'",
    )


def test_sort_puts_unknown_values_last_both_ways() -> None:
    procs = [proc(1, sm_pct=10.0), proc(2, sm_pct=None), proc(3, sm_pct=50.0)]
    down = build_rows(procs, SortSpec("sm", True), ProcFilter(), False, 0.0)
    assert [r.pid for r in down] == [3, 1, 2]
    up = build_rows(procs, SortSpec("sm", False), ProcFilter(), False, 0.0)
    assert [r.pid for r in up] == [1, 3, 2]
    assert SortSpec("gpu").on("gpu").descending and SortSpec("gpu").on("cpu").descending


def test_tree_nests_gpu_parents_and_adds_outside_parents() -> None:
    procs = [proc(10, ppid=500), proc(11, ppid=10), proc(12, ppid=500), proc(13, ppid=1)]
    rows = tree_rows(procs, ascii_only=True)
    keys = [r.key for r in rows]
    assert keys == ["parent|500", "GPU-0|10", "GPU-0|11", "GPU-0|12", "GPU-0|13"]
    assert rows[0].children == (10, 12)
    assert rows[2].prefix.endswith("`- ") and rows[1].prefix == "|- "
    assert rows[4].prefix == ""


def test_tree_survives_a_parent_cycle() -> None:
    rows = tree_rows([proc(1000, ppid=1001), proc(1001, ppid=1000)])
    assert sorted(r.pid for r in rows) == [1000, 1001]


def test_tree_layout_is_kept_while_the_structure_stays_and_rows_show_new_values() -> None:
    builder = RowBuilder()
    spec, everything = SortSpec(), ProcFilter()
    family = [proc(10, ppid=500, cpu_pct=1.0), proc(11, ppid=10), proc(12, ppid=500)]
    first = builder.build(family, spec, everything, True, 0.0)
    layout = first._tree
    # new values, same structure: the layout is the one made before, the rows the new values
    busier = [dataclasses.replace(p, cpu_pct=50.0) for p in family]
    second = builder.build(busier, spec, everything, True, 0.0)
    assert second._tree is layout
    assert [r.key for r in second] == [r.key for r in first]
    assert second[1].proc is busier[0] and second[1].proc.cpu_pct == 50.0  # type: ignore[union-attr]
    # a new child changes the structure: laid out again, as a fresh build lays it out
    grown = [*busier, proc(13, ppid=11)]
    third = builder.build(grown, spec, everything, True, 0.0)
    assert third._tree is not layout
    assert third[:] == build_rows(grown, spec, everything, True, 0.0)
    assert third.find("GPU-0|13") == 3 and third.find("parent|500") == 0
    assert third.find("GPU-1|13") is None and third.process_count == 4


def test_tree_rows_are_made_only_when_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    from gputui.session import process_view

    made: list[int] = []
    original = process_view.Row

    def counting(*args: object, **kw: object) -> object:
        made.append(1)
        return original(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(process_view, "Row", counting)
    many = [proc(100 + k, ppid=50 + k % 3) for k in range(1000)]
    rows = RowBuilder().build(many, SortSpec(), ProcFilter(), True, 0.0)
    assert len(rows) == 1003 and not made
    assert rows[500].proc is not None and len(made) == 1
    assert [r.pid for r in rows.parents()] == [50, 51, 52]


def test_build_rows_filters_before_sorting() -> None:
    procs = [proc(1, user="a"), proc(2, user="b"), proc(3, user="a")]
    rows = build_rows(procs, SortSpec("pid", True), ProcFilter.parse("user:a"), False, 0.0)
    assert [r.pid for r in rows] == [3, 1]


def test_bars_and_sparklines_keep_their_width() -> None:
    for ascii_only in (False, True):
        for value in (None, 0.0, 0.33, 1.0, 1.7):
            assert len(render.bar(value, 17, ascii_only, label="50%")) == 17
        spark = render.sparkline([1.0, None, 50.0, 100.0] * 50, 30, 100.0, ascii_only)
        assert len(spark) == 30
        assert spark.plain.isascii() == ascii_only or not ascii_only
    assert render.bucketize([1.0, 9.0, 2.0, 3.0], 2) == [9.0, 3.0]
    assert fmt.duration(59) == "59s" and fmt.duration(3661) == "1:01:01"
    assert fmt.size(1.5 * 2**30) == "1.5GiB" and fmt.size(None) == "N/A"


def _buckets_by_definition(values: list[float | None], width: int) -> list[float | None]:
    if len(values) <= width:
        return list(values)
    out: list[float | None] = []
    for i in range(width):
        share = values[i * len(values) // width : (i + 1) * len(values) // width]
        present = [v for v in share if v is not None]
        out.append(max(present) if present else None)
    return out


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.floats(0, 1e6, allow_nan=False)), max_size=400),
    st.integers(1, 120),
)
def test_the_graphs_buckets_are_each_the_max_of_their_share(
    values: list[float | None], width: int
) -> None:
    # with and without gaps: the whole series without None takes the one-pass path
    assert render.bucketize(values, width) == _buckets_by_definition(values, width)
    full = [v for v in values if v is not None]
    assert render.bucketize(full, width) == _buckets_by_definition(full, width)


def _sparkline_by_definition(
    values: list[float | None], width: int, top: float | None, ascii_only: bool
) -> str:
    chars = "_.-~=+*#" if ascii_only else "▁▂▃▄▅▆▇█"
    buckets = _buckets_by_definition(values, width)
    if top is None:
        present = [v for v in buckets if v is not None]
        top = max(present) if present else 1.0
    top = top or 1.0
    last = len(chars) - 1
    cells = [
        " " if v is None else chars[int(max(0.0, min(1.0, v / top)) * last + 0.5)] for v in buckets
    ]
    return " " * (width - len(buckets)) + "".join(cells)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.none(),
            st.integers(-5, 120).map(float),  # repeated whole percents, out of range too
            st.floats(-10, 1e4, allow_nan=False),
        ),
        max_size=400,
    ),
    st.integers(1, 120),
    st.one_of(st.none(), st.sampled_from([0.0, 100.0, 700.0, 3.5])),
    st.booleans(),
)
def test_a_sparkline_is_each_buckets_level_rounded_to_a_character(
    values: list[float | None], width: int, top: float | None, ascii_only: bool
) -> None:
    # twice: the second time the characters come from what the first one worked out
    for _ in range(2):
        spark = render.sparkline(values, width, top, ascii_only)
        assert spark.plain == _sparkline_by_definition(values, width, top, ascii_only)
