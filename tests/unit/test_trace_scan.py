"""The shared passes (gputui.trace.scan) give what each metric's own definition
gives (tests/helpers/trace_reference.py: the code before them) on every kept
trace and on generated timelines full of the odd cases: ties, empty records,
records off any stream, overlapping steps, ops that overlap without nesting,
runtime calls that share a correlation id."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gputui.trace.scan as scan_module
from gputui.trace import timeline as tl
from gputui.trace.scan import Scan, after_sync, merge_sorted, sweep
from gputui.trace.timeline import GpuActivity, HostRange, RuntimeCall, Timeline, merge
from gputui.trace.trace_metrics import compute
from gputui.tracefile.reader import read_trace
from tests.helpers import trace_reference as ref
from tests.helpers.tracegen import TraceBuilder

DATA = Path(__file__).resolve().parents[1] / "data"
TRACES = sorted(DATA.rglob("*.pt.trace.json.gz"))
THIRD_PARTY = sorted(
    p
    for d in (DATA / "thirdparty", DATA.parents[1].parent / "shared" / "thirdparty")
    if d.is_dir()
    for p in d.glob("*.json*")
)


def stable_sorted(timeline: Timeline) -> Timeline:
    """A copy with each list in start order (what a scan sorts it to): the order
    the tables list names in, and the order ties are met in."""
    return Timeline(
        sorted(timeline.gpu, key=lambda a: a.start_us),
        sorted(timeline.runtime, key=lambda r: r.start_us),
        sorted(timeline.ranges, key=lambda r: r.start_us),
        timeline.events,
        timeline.skipped,
    )


def op_rows(scan: Scan, part: int) -> dict[str, list[int]]:
    return {t.name: [t.calls, t.self_us, t.total_us] for t in scan.op_tally(part)}


def assert_same(timeline: Timeline, include_last_step: bool = False) -> Scan:
    want_tl = stable_sorted(timeline)
    scan = Scan(timeline, include_last_step)
    got = compute(timeline, include_last_step, scan)
    want = ref.compute(want_tl, include_last_step)
    for name in (
        "steps_total",
        "last_step_dropped",
        "temporal",
        "idle_breakdown",
        "comm_compute_overlap_pct",
        "launch",
        "step_breakdown",
        "account",
        "markers",
    ):
        assert getattr(got, name) == getattr(want, name), name
    assert scan.window == ref.window(want_tl)
    tally = scan.kernel_tally()
    assert tally == ref.kernel_tally(want_tl)
    assert list(tally) == list(ref.kernel_tally(want_tl))  # first-start order
    for part in (0, 1, 2):
        assert op_rows(scan, part) == ref.op_table(want_tl, part), part
    return scan


def test_a_sync_owns_the_gap_it_leaves_for_as_long_as_it_waited_on_a_busy_gpu() -> None:
    """The GPU drains while the CPU waits; the gap after is the sync's while the
    CPU queues the next work, for as long as it waited (it would have been that
    far ahead): not host work that outlasts the wait, nor the wait's own time
    in an earlier gap."""
    # waited 40 on a busy GPU, gap of 10 after: the whole gap
    assert after_sync([(100, 110)], [(60, 101)]) == [(100, 110)]
    # waited 5, then 90 of host work before the next launch: 5 of the gap
    assert after_sync([(100, 190)], [(95, 100)]) == [(100, 105)]
    # a call that returns before the gap begins, or after it ends: none
    assert after_sync([(100, 190)], [(50, 99)]) == []
    assert after_sync([(100, 190)], [(95, 195)]) == []
    # waited 91, 30 of it in an earlier gap (the GPU idle then): 61
    assert after_sync([(20, 50), (100, 300)], [(10, 101)]) == [(100, 161)]
    # a call on another thread that began earlier and still waits is seen past
    # a later one that ended before the gap
    assert after_sync([(49, 51)], [(46, 50), (47, 48)]) == [(49, 51)]


@pytest.mark.parametrize("path", TRACES + THIRD_PARTY, ids=lambda p: p.name.split(".")[0])
def test_every_kept_trace_gives_what_each_definition_gives(path: Path) -> None:
    for include_last_step in (False, True):
        assert_same(read_trace(path).timeline, include_last_step)


# -- generated timelines ------------------------------------------------------------------
RANGE_NAMES = (
    "aten::mm",
    "aten::add",
    "aten::to",
    "ProfilerStep#1",
    "ProfilerStep#2",
    "ProfilerStep#3",
    "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
    "gputui.phase:ckpt",
    "nccl:all_reduce",
    "c10d::allreduce_",
    "Optimizer.step#AdamW.step",
    "autograd::engine::evaluate_function: MmBackward0",
    "## forward ##",
    # the Python stack's module calls and a numeric library's frames
    "torch/nn/modules/module.py(1743): _call_impl",
    "nn.Module: Linear_0",
    "numpy/_core/fromnumeric.py(51): _wrapfunc",
    "<built-in method reduce of numpy.ufunc object at 0x7fe09c998540>",
)
RANGE_KINDS = (tl.OP, tl.OP, tl.ANNOTATION, tl.PYTHON, tl.HOST_OTHER, tl.GPU_ANNOTATION)
CALL_NAMES = (
    "cudaLaunchKernel",
    "cuLaunchKernel",
    "cudaLaunchKernelExC",
    "cudaStreamSynchronize",
    "cudaMemcpyAsync",
    "cudaDeviceSynchronize",
    "cudaMalloc",
    "cudaGraphLaunch",
)
GPU_NAMES = {
    tl.KERNEL: ("gemm_kernel", "ncclDevKernel_AllReduce", "triton_poi_fused", "flash_fwd"),
    tl.MEMCPY: ("Memcpy HtoD (Pageable -> Device)", "Memcpy DtoD (Device -> Device)"),
    tl.MEMSET: ("Memset (Device)",),
    tl.SYNC: ("Event Sync", "Context Sync"),
    tl.GPU_OTHER: ("something else",),
}

times = st.integers(0, 60)
lengths = st.integers(0, 12)


@st.composite
def timelines(draw: Any) -> Timeline:
    threads = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3, unique=True))
    ranges = []
    for _ in range(draw(st.integers(0, 25))):
        start = draw(times)
        name = draw(st.sampled_from(RANGE_NAMES))
        kind = draw(st.sampled_from(RANGE_KINDS))
        ext = draw(st.integers(-1, 6))
        ranges.append(
            HostRange(start, start + draw(lengths), name, draw(st.sampled_from(threads)), kind, ext)
        )
    # step marks: in order and apart, or anywhere
    if draw(st.booleans()):
        t = draw(st.integers(0, 10))
        for k in range(draw(st.integers(1, 4))):
            length = draw(st.integers(1, 20))
            kind = draw(st.sampled_from((tl.OP, tl.ANNOTATION)))
            ranges.append(HostRange(t, t + length, f"ProfilerStep#{k + 1}", threads[0], kind, -1))
            t += length + draw(st.integers(-3, 5))
    runtime = []
    corr = 0
    for _ in range(draw(st.integers(0, 20))):
        start = draw(times)
        corr += draw(st.sampled_from((1, 1, 1, 0)))  # now and then two calls share an id
        runtime.append(
            RuntimeCall(
                start,
                start + draw(st.integers(0, 4)),
                draw(st.sampled_from(CALL_NAMES)),
                draw(st.sampled_from(threads)),
                corr if draw(st.integers(0, 9)) else -1,
                draw(st.integers(-1, 6)),
                draw(st.sampled_from((tl.RUNTIME, tl.RUNTIME, tl.DRIVER))),
            )
        )
    gpu = []
    for _ in range(draw(st.integers(0, 25))):
        start = draw(times)
        kind = draw(
            st.sampled_from((tl.KERNEL, tl.KERNEL, tl.MEMCPY, tl.MEMSET, tl.SYNC, tl.GPU_OTHER))
        )
        dur = draw(lengths)
        gpu.append(
            GpuActivity(
                start,
                start + dur,
                dur * 1000 + draw(st.integers(0, 999)),
                kind,
                draw(st.sampled_from(GPU_NAMES[kind])),
                draw(st.sampled_from((7, 7, 8, -1))),
                draw(st.sampled_from((0, 0, 1))),
                draw(st.integers(-1, corr + 1)),
                draw(st.integers(-1, 6)),
            )
        )
    return Timeline(gpu, runtime, ranges, len(gpu) + len(runtime) + len(ranges))


@settings(max_examples=400)
@given(timelines(), st.booleans())
def test_generated_timelines_give_what_each_definition_gives(
    timeline: Timeline, include_last_step: bool
) -> None:
    assert_same(timeline, include_last_step)


@settings(max_examples=400)
@given(timelines(), st.booleans())
def test_the_walk_that_takes_ties_and_overlaps_gives_what_each_definition_gives(
    timeline: Timeline, include_last_step: bool
) -> None:
    """The self times of a trace recorded with Python stacks (records that start
    together the shorter first, records that overlap without nesting) come from
    a second walk: here it serves every timeline, not only those the first walk
    leaves."""
    with mock.patch.object(scan_module, "_nest_fast", return_value=None):
        assert_same(timeline, include_last_step)


@pytest.mark.parametrize("path", TRACES + THIRD_PARTY, ids=lambda p: p.name.split(".")[0])
def test_every_kept_trace_gives_the_same_self_times_by_either_walk(path: Path) -> None:
    timeline = read_trace(path).timeline
    fast = {part: op_rows(Scan(timeline), part) for part in (0, 1, 2)}
    with mock.patch.object(scan_module, "_nest_fast", return_value=None):
        again = Scan(timeline)
        assert {part: op_rows(again, part) for part in (0, 1, 2)} == fast
        for part in (0, 1, 2):  # names in the order they first appear, as the tables list them
            assert list(op_rows(again, part)) == list(fast[part])


@settings(max_examples=300)
@given(timelines())
def test_a_scan_reads_its_timeline_again_the_same(timeline: Timeline) -> None:
    """Scanning a timeline sorts it in place: a second scan of it gives the same."""
    first = compute(timeline)
    again = copy.deepcopy(timeline)
    assert compute(again) == first


# -- the sweep ----------------------------------------------------------------------------
def brute_force(layers: list[list[tuple[int, int]]], lo: int, hi: int) -> dict[int, int]:
    out: dict[int, int] = {}
    for t in range(lo, hi):
        mask = sum(1 << i for i, layer in enumerate(layers) if any(s <= t < e for s, e in layer))
        out[mask] = out.get(mask, 0) + 1
    return out


intervals = st.builds(lambda s, n: (s, s + n), st.integers(-5, 80), st.integers(0, 15))


@settings(max_examples=300)
@given(
    st.lists(st.lists(intervals, max_size=12), min_size=1, max_size=6),
    st.integers(-5, 40),
    st.integers(0, 60),
    st.integers(1, 8),
)
def test_the_sweep_measures_each_combination_of_layers(
    layers: list[list[tuple[int, int]]], lo: int, span: int, chunk: int
) -> None:
    layers = [sorted(layer) for layer in layers]
    hi = lo + span
    saved = scan_module.CHUNK_RECORDS
    scan_module.CHUNK_RECORDS = chunk  # many small chunks: the carried intervals
    try:
        got = sweep(layers, lo, hi)
    finally:
        scan_module.CHUNK_RECORDS = saved
    assert {m: v for m, v in got.items() if v} == brute_force(layers, lo, hi)


@settings(max_examples=200)
@given(st.lists(intervals, max_size=20))
def test_merging_in_start_order_is_merging(items: list[tuple[int, int]]) -> None:
    by_start = sorted(items, key=lambda iv: iv[0])
    assert merge_sorted(by_start) == merge(items)


def test_the_gaps_a_synchronization_left_are_looked_for_where_calls_end() -> None:
    """Only the gaps a synchronizing call ends in are candidates; the rest of the
    definition (after_sync) decides, as on every gap."""
    gpu = [
        GpuActivity(s, e, (e - s) * 1000, tl.KERNEL, "gemm", 7, 0, -1, -1)
        for s, e in ((0, 10), (15, 20), (20, 30), (40, 50), (55, 55), (70, 80))
    ]
    step = HostRange(0, 90, "ProfilerStep#1", 1, tl.ANNOTATION, -1)
    calls = [
        RuntimeCall(s, e, "cudaStreamSynchronize", 1, 100 + i, -1, tl.RUNTIME)
        for i, (s, e) in enumerate(((5, 12), (31, 35), (45, 60), (58, 58), (82, 88)))
    ]
    scan = Scan(Timeline(gpu, calls, [step]))
    span = [(0, 90)]
    compute_iv = merge_sorted((a.start_us, a.end_us) for a in gpu if a.end_us > a.start_us)
    idle = tl.subtract(span, compute_iv)
    assert scan.sync_gaps == merge(after_sync(idle, sorted((c[0], c[1]) for c in calls)))


@pytest.mark.parametrize("path", TRACES + THIRD_PARTY, ids=lambda p: p.name.split(".")[0])
def test_every_kept_traces_account_adds_up_to_its_step(path: Path) -> None:
    """Where a host step begins before its window (the GPU still runs earlier
    work), the host's buckets are fitted to the window: the account never adds
    up to more than the step."""
    from gputui.protocol.trace_metrics import ACCOUNT_BUCKETS

    acct = compute(read_trace(path).timeline, False).account
    if acct is None:
        return
    total = sum(getattr(acct, f"{b}_us") for b in ACCOUNT_BUCKETS)
    assert total == pytest.approx(acct.step_us, rel=1e-4, abs=0.01)


@pytest.mark.parametrize("fast", [True, False], ids=["gpu-pass", "definition"])
def test_without_step_marks_the_step_is_the_span_of_gpu_activity(
    fast: bool, tmp_path: Path
) -> None:
    """A GEMM benchmark without prof.step(): five kernels queued at once, each
    launched before it starts, the first one too.  The one step is their whole
    span, as the window says, not the span from the first kernel's end (that
    kernel launched "before the step" would otherwise delay it)."""
    t = TraceBuilder()
    for i in range(5):
        t.launch(100.0 + 10 * i, 5.0, "ampere_fp16_s16816gemm_fp16", 110.0 + 1010 * i, 1000.0)
    timeline = read_trace(t.write(tmp_path / "t.json")).timeline
    scan = Scan(timeline)
    with mock.patch.object(Scan, "fast_steps", fast):
        assert scan.steps == [(110, 5150, None)]
    assert scan.window == (110, 5150)
    assert scan_module.device_steps(timeline, scan_module.host_steps(timeline)) == scan.steps


def test_a_cast_is_told_by_the_range_it_runs_directly_inside() -> None:
    """autocast casts inside the op it feeds, the backward inside its autograd
    node, the program's own under its step mark or a Python frame; a cast that
    outlasts the op it starts in is not inside it; casts outside the window
    are not counted."""
    ranges = [
        HostRange(0, 1000, "ProfilerStep#1", 1, tl.ANNOTATION, -1),
        HostRange(10, 100, "aten::linear", 1, tl.OP, 1),
        HostRange(20, 30, "aten::to", 1, tl.OP, 2),
        HostRange(40, 50, "aten::to", 1, tl.OP, 3),
        HostRange(200, 210, "aten::to", 1, tl.OP, 4),  # the program's own
        HostRange(300, 400, "ToCopyBackward0", 2, tl.OP, 5),
        HostRange(310, 320, "aten::to", 2, tl.OP, 6),
        HostRange(500, 600, "model.py(12): forward", 1, tl.PYTHON, -1),
        HostRange(510, 520, "aten::to", 1, tl.OP, 7),  # under a Python frame: the program's
        HostRange(700, 720, "aten::mul", 1, tl.OP, 8),
        HostRange(710, 730, "aten::to", 1, tl.OP, 9),  # outlasts aten::mul
        HostRange(2000, 2010, "aten::to", 1, tl.OP, 10),  # after the window
    ]
    scan = Scan(Timeline([], [], ranges))
    assert scan.window == (0, 1000)
    assert scan.cast_parents() == (("", 3), ("aten::linear", 2), ("ToCopyBackward0", 1))


def test_the_optimizers_share_of_the_launches_counts_those_inside_its_steps() -> None:
    """Of the window's kernel launch calls, those that start inside an
    ``Optimizer.step#`` range; None without one."""
    ranges = [
        HostRange(0, 1000, "ProfilerStep#1", 1, tl.ANNOTATION, -1),
        HostRange(800, 900, "Optimizer.step#AdamW.step", 1, tl.ANNOTATION, -1),
    ]
    calls = [
        RuntimeCall(t, t + 5, "cudaLaunchKernel", 1, 100 + t, -1, tl.RUNTIME)
        for t in (100, 200, 300, 810, 850, 950)
    ] + [RuntimeCall(820, 830, "cudaMemcpyAsync", 1, 99, -1, tl.RUNTIME)]
    assert Scan(Timeline([], calls, ranges)).sanity().optimizer_launch_share == 2 / 6
    assert Scan(Timeline([], calls, ranges[:1])).sanity().optimizer_launch_share is None


@pytest.mark.parametrize("holder", [tl.PYTHON, tl.OP])
@pytest.mark.parametrize("shorter_first", [True, False])
def test_a_record_that_starts_with_a_shorter_one_goes_under_it(
    shorter_first: bool, holder: str
) -> None:
    """A Python frame's or an op's self time is its time less its children's:
    here one op of 40 µs holding another of 10 µs that starts in the same
    microsecond. A trace with Python stacks may list the shorter first (the
    walk then puts the longer one under the holder, and the shorter under it),
    or the longer first: the holder keeps 60 µs either way."""
    step = HostRange(0, 200, "ProfilerStep#1", 1, tl.ANNOTATION, -1)
    name = "train.py(12): step" if holder == tl.PYTHON else "aten::matmul"
    held = HostRange(5, 105, name, 1, holder, 3)
    inner = HostRange(15, 25, "aten::add", 1, tl.OP, 1)
    outer = HostRange(15, 55, "aten::linear", 1, tl.OP, 2)
    ops = [inner, outer] if shorter_first else [outer, inner]
    scan = Scan(Timeline([], [], [step, held, *ops], 4))
    assert scan.window == (0, 200)
    rows = {name: (calls, self_us) for name, (calls, self_us, _) in op_rows(scan, 1).items()}
    want = {"aten::add": (1, 10), "aten::linear": (1, 30)}
    if holder == tl.PYTHON:
        assert dict(scan.python_frames()) == {name: 60.0}
    else:
        want[name] = (1, 60)
    assert rows == want
