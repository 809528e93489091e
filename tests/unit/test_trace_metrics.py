"""The trace metrics on small timelines whose answers are computed by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputui.trace import timeline as tl
from gputui.trace.step_breakdown import step_breakdown
from gputui.trace.trace_metrics import compute, launch_stats, quantile, temporal_breakdown
from gputui.tracefile.reader import read_trace
from tests.helpers.tracegen import ADD, GEMM, NCCL, TraceBuilder, reference_trace


def metrics_of(builder: TraceBuilder, tmp_path: Path, **kw: bool) -> tl.Timeline:
    return read_trace(builder.write(tmp_path / "t.json")).timeline


def test_reference_trace_by_hand(tmp_path: Path) -> None:
    m = compute(metrics_of(reference_trace(), tmp_path))
    assert m.steps_total == 3 and m.last_step_dropped
    # HTA's window leaves out what the last step launched (the GEMM at 220 µs).
    # Activity on streams: [20,50] [52,60] [80,90] [120,145] [180,190] -> 83 µs
    # busy over a span of 190 - 20 = 170 µs.
    t = m.temporal
    assert t is not None
    assert (t.span_us, t.idle_us, t.compute_us, t.non_compute_us) == (170, 87, 68, 15)
    assert (t.idle_pct, t.compute_pct, t.non_compute_pct) == (51.18, 40.0, 8.82)
    # Stream 7's gaps: 2 µs before the add (its launch at 12 came before the GEMM
    # ended: kernel wait), 20 before the memcpy (launched at 70, after the add
    # ended at 60: host wait), 30 before the GEMM (launched at 110 > 90: host
    # wait), 40 before the last add (launched at 115 < 140; >= 30 µs: other).
    ib = m.idle_breakdown
    assert ib is not None
    assert (ib.host_wait_us, ib.kernel_wait_us, ib.other_us) == (50, 2, 40)
    assert (ib.host_wait_pct, ib.kernel_wait_pct, ib.other_pct) == (54.35, 2.17, 43.48)
    assert [s.stream for s in ib.streams] == [7, 8]
    # the all-reduce [125,145] runs beside the GEMM [120,140] for 15 of its 20 µs
    assert m.comm_compute_overlap_pct == 75.0
    ls = m.launch
    assert ls is not None
    # 6 launch calls of 5 µs; delays 5, 35, 5, 5, 9, 60 µs
    assert (ls.launches, ls.short_kernels, ls.runtime_outliers, ls.launch_delay_outliers) == (
        6,
        0,
        0,
        0,
    )
    assert ls.launch_delay_us_median == 7.0 and ls.launch_delay_us_max == 60.0
    assert ls.launch_delay_us_mean == pytest.approx(119 / 6, abs=1e-3)
    assert ls.launch_delay_us_p95 == pytest.approx(53.75)
    # TensorBoard plugin: step 3 launched 1 activity against step 2's 3 (< 80%):
    # cut off.  Steps [0,100] [100,200]; kernel 68, memcpy 10, communication
    # [140,145] = 5, runtime [10,17] [70,75] [110,120] = 22, CPU op [5,10] [17,20]
    # [105,110] = 13, other 82.
    sb = m.step_breakdown
    assert sb is not None
    assert (sb.steps, sb.steps_us, sb.first_step, sb.step_us) == (2, 200, 1, (100, 100))
    got = {c: sb.category_us(c) for c in ("kernel", "memcpy", "communication", "runtime")}
    assert got == {"kernel": 68, "memcpy": 10, "communication": 5, "runtime": 22}
    assert (sb.cpu_op_us, sb.dataloader_us, sb.memset_us, sb.other_us) == (13, 0, 0, 82)
    assert sb.gpu_utilization_pct == 36.5  # kernels incl. the all-reduce: 73 of 200 µs


def test_include_last_step_keeps_its_work(tmp_path: Path) -> None:
    m = compute(metrics_of(reference_trace(), tmp_path), include_last_step=True)
    assert m.temporal is not None and not m.last_step_dropped
    assert m.temporal.span_us == 210  # to the end of the GEMM at [220, 230]
    assert m.launch is not None and m.launch.launches == 7


def test_one_step_is_not_windowed(tmp_path: Path) -> None:
    t = TraceBuilder()
    t.step(5, 0.0, 100.0)
    t.launch(10.0, 5.0, GEMM, 20.0, 30.0)
    t.launch(60.0, 5.0, GEMM, 150.0, 10.0)  # runs after the step's host range
    m = compute(metrics_of(t, tmp_path))
    assert m.steps_total == 1 and not m.last_step_dropped
    assert m.temporal is not None and m.temporal.span_us == 140
    sb = m.step_breakdown
    assert sb is not None and sb.steps == 1 and sb.first_step == 5
    assert sb.steps_us == 160  # stretched to the end of the GPU work it launched


def test_rounding_is_htas() -> None:
    assert tl.round_us(10.2, 5.5) == (11, 15)  # start up, end (15.7) down
    assert tl.round_us(10.1, 0.5) == (11, 11)  # HTA: [11, 10]; here zero length
    assert tl.round_ns(10_200, 5_500) == (11, 15)
    assert tl.round_ns(10_100, 500) == (11, 11)
    assert tl.round_ns(10_000, 1_000) == (10, 11)


def test_sub_microsecond_memset_never_makes_non_compute_negative(tmp_path: Path) -> None:
    """HTA asserts on this valid trace: a 0.5 µs memset at x.1 µs rounds to
    [x+1, x], a negative length that its union subtracts."""
    t = TraceBuilder()
    for n in (1, 2, 3):
        t.step(n, (n - 1) * 100.0, 100.0)
    t.launch(10.0, 5.0, GEMM, 20.0, 30.0)
    t.launch(15.0, 2.0, "Memset (Device)", 60.1, 0.5, cat="gpu_memset", call="cudaMemsetAsync")
    t.launch(17.0, 5.0, GEMM, 70.0, 30.0)
    timeline = metrics_of(t, tmp_path)
    memset = next(a for a in timeline.gpu if a.kind == tl.MEMSET)
    assert (memset.start_us, memset.end_us, memset.dur_ns) == (61, 61, 500)
    temporal = temporal_breakdown(timeline.gpu)
    assert temporal is not None
    assert (temporal.span_us, temporal.idle_us, temporal.compute_us) == (80, 20, 60)
    assert temporal.non_compute_us == 0


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        (NCCL, tl.HTA_COMMUNICATION),
        ("ncclKernel_AllGather_RING_LL", tl.HTA_COMMUNICATION),
        ("ncclDevFunc_AllReduce", tl.HTA_COMPUTATION),  # HTA wants "Kernel" after nccl
        ("Memcpy HtoD (Pageable -> Device)", tl.HTA_MEMORY),
        ("Memset (Device)", tl.HTA_MEMORY),
        ("dmaCopy", tl.HTA_MEMORY),
        ("Stream Sync", tl.HTA_OTHER),
        ("my_Memcpy_kernel", tl.HTA_OTHER),
        (GEMM, tl.HTA_COMPUTATION),
        (ADD, tl.HTA_COMPUTATION),
    ],
)
def test_hta_kernel_types(name: str, kind: str) -> None:
    assert tl.hta_kernel_type(name) == kind


def test_interval_arithmetic() -> None:
    assert tl.merge([(5, 7), (1, 3), (3, 4), (6, 9), (10, 10)]) == [(1, 4), (5, 9), (10, 10)]
    a = [(0, 10), (20, 30)]
    b = [(5, 25), (28, 40)]
    assert tl.intersect(a, b) == [(5, 10), (20, 25), (28, 30)]
    assert tl.subtract(a, b) == [(0, 5), (25, 28)]
    assert tl.subtract(a, []) == a
    assert tl.subtract([(0, 10)], [(0, 10)]) == []
    assert tl.length(tl.merge([(0, 10), (5, 15)])) == 15


def test_quantile_is_linear_between_ranks() -> None:
    assert quantile([], 0.5) is None
    assert quantile([4.0], 0.95) == 4.0
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert quantile([0.0, 10.0], 0.95) == pytest.approx(9.5)


def test_short_kernels_and_outliers(tmp_path: Path) -> None:
    t = TraceBuilder()
    t.launch(0.0, 10.0, ADD, 12.0, 2.0)  # 2 µs of work for a 10 µs call: short
    t.launch(20.0, 60.0, ADD, 85.0, 5.0)  # a 60 µs call: runtime outlier
    t.launch(90.0, 5.0, GEMM, 300.0, 50.0)  # starts 205 µs after its call: delay outlier
    timeline = metrics_of(t, tmp_path)
    ls = launch_stats(timeline.gpu, timeline.runtime)
    assert ls is not None
    assert (ls.launches, ls.short_kernels, ls.runtime_outliers, ls.launch_delay_outliers) == (
        3,
        1,
        1,
        1,
    )
    assert ls.short_kernel_pct == 33.33


def test_dataloader_share_without_gpu(tmp_path: Path) -> None:
    """A CPU-only job: each step waits 30 µs in the DataLoader, then 50 µs of ops."""
    t = TraceBuilder()
    for n in range(3):
        base = n * 100.0
        t.step(n, base, 100.0)
        t.op(
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            base,
            30.0,
            cat="user_annotation",
        )
        t.op("aten::linear", base + 35.0, 50.0)
        t.op("aten::addmm", base + 40.0, 20.0)  # nested: claims nothing more
    m = compute(metrics_of(t, tmp_path))
    assert m.temporal is None and m.idle_breakdown is None and m.launch is None
    sb = m.step_breakdown
    assert sb is not None and sb.steps == 3 and sb.steps_us == 300
    assert (sb.dataloader_us, sb.cpu_op_us, sb.other_us, sb.kernel_us) == (90, 150, 60, 0)
    assert sb.category_pct("dataloader") == 30.0
    assert sb.gpu_utilization_pct is None


def test_whole_trace_is_one_step_without_marks(tmp_path: Path) -> None:
    t = TraceBuilder()
    t.op("aten::mm", 10.0, 40.0)
    t.op("aten::add", 80.0, 20.0)
    sb = step_breakdown(metrics_of(t, tmp_path))
    assert sb is not None and sb.steps == 1 and sb.first_step is None
    assert (sb.steps_us, sb.cpu_op_us, sb.other_us) == (90, 60, 30)


def test_collective_ops_count_as_communication(tmp_path: Path) -> None:
    t = TraceBuilder()
    t.step(1, 0.0, 100.0)
    ext = t.op("nccl:all_reduce", 10.0, 20.0)
    # a kernel named like a compute kernel, launched by the collective: communication
    t.launch(12.0, 5.0, "custom_allreduce_kernel", 40.0, 10.0, external=ext)
    sb = step_breakdown(metrics_of(t, tmp_path))
    assert sb is not None
    assert sb.kernel_us == 0
    # the kernel and the host op; communication outranks the launch call inside it
    assert (sb.communication_us, sb.runtime_us) == (10 + 20, 0)
