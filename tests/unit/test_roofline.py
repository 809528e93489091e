"""Per-op roofline rows from real H100 traces and from raw profiler events.

``tests/data`` holds two torch.profiler traces recorded on an H100 80GB HBM3
(torch 2.11, ``record_shapes`` + ``with_flops``) by ``bench/scenarios``: the
whole fp32 matmul scenario (3 steps) and one step of the healthy bf16
transformer.  The raw-event path is checked on the same data through stand-in
events carrying what ``kineto_results.events()`` exposes, and on a real CPU
capture.
"""

from __future__ import annotations

import gzip
import json
import warnings
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputui.analysis.roofline import (
    COMPUTE,
    DATASHEET,
    MEMORY,
    Roof,
    analyze,
    grid_lines,
    roofline_view,
    shapes_text,
)
from gputui.ceilings.datasheet import H100_SXM
from gputui.trace import op_costs, op_rows
from gputui.trace.op_rows import (
    ESTIMATED,
    NO_ARGS,
    PROFILER,
    OpTable,
    _in_order,
    _parents,
    _walk,
    rows_from_chrome_trace,
    rows_from_kineto,
)

DATA = Path(__file__).resolve().parents[1] / "data"
FP32_TRACE = DATA / "h100_fp32_matmul_flops.pt.trace.json.gz"
HEALTHY_TRACE = DATA / "h100_healthy_flops_step11.pt.trace.json.gz"
ROOF = H100_SXM.roof()


def _load(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt") as f:
        data: dict[str, Any] = json.load(f)
    return data


def test_fp32_matmul_trace() -> None:
    rows = rows_from_chrome_trace(_load(FP32_TRACE))
    top = rows[0]
    assert (top.name, shapes_text(top), op_costs.dtype_family(top.input_types)) == (
        "aten::mm",
        "4096x4096 · 4096x4096",
        "fp32",
    )
    assert top.flops == top.calls * 2 * 4096**3
    assert top.flops_source == ESTIMATED  # the exported trace carries no FLOP count
    assert top.kernels >= top.calls and top.device_us > 0
    report = analyze(rows, ROOF, top=5)
    mm = report.ops[0]
    assert mm.bound == COMPUTE and mm.ceiling == "fp32"
    assert mm.intensity_flop_per_byte == pytest.approx(4096 / 6, rel=1e-6)  # 2n^3 / (3 n^2 4B)
    # SGEMM on H100 ran at ~51.6 TFLOP/s in this recording: 77% of the 67 datasheet
    assert mm.achieved_tflops == pytest.approx(51.6, abs=0.5)
    assert mm.pct_of_ceiling == pytest.approx(100 * mm.achieved_tflops / 67.0)
    assert report.device_us == pytest.approx(sum(r.device_us for r in rows))


def test_healthy_bf16_transformer_step() -> None:
    rows = rows_from_chrome_trace(_load(HEALTHY_TRACE))
    report = analyze(rows, ROOF, top=30)
    by = {(op.name, op.shapes): op for op in report.ops}
    mm = by[("aten::mm", "8192x4096 · 4096x1024")]
    assert mm.dtype == "bf16" and mm.bound == COMPUTE
    assert 700 < mm.achieved_tflops < 989.5  # type: ignore[operator]
    attention = [op for op in report.ops if "attention" in op.name]
    assert attention and all(op.flops and op.achieved_tflops for op in attention)
    # data movement: memory-bound, measured against bandwidth
    copy = next(op for op in report.ops if op.name == "aten::copy_")
    assert copy.bound == MEMORY and copy.bytes_rule == "copy"
    assert copy.pct_of_ceiling == pytest.approx(100 * copy.achieved_gbps / 3350.0)
    softmax = next(op for op in report.ops if op.name == "aten::_log_softmax")
    assert softmax.bound == MEMORY and softmax.flops is None
    # tensor-list ops record no shapes: a row with GPU time, nothing estimated
    adam = next(op for op in report.ops if op.name == "aten::_fused_adamw_")
    assert adam.device_us > 0 and adam.bytes_moved is None and adam.bound is None
    # every kernel's time went to exactly one row; the copies to and from the
    # host to none (their time is PCIe's, not the GPU's memory's)
    events = _load(HEALTHY_TRACE)["traceEvents"]
    kernels = sum(e["dur"] for e in events if e.get("cat") in ("kernel", "gpu_memset"))
    on_device = [e for e in events if e.get("cat") == "gpu_memcpy" and "DtoD" in e["name"]]
    to_host = [e for e in events if e.get("cat") == "gpu_memcpy" and "DtoD" not in e["name"]]
    assert to_host and all(e["name"].startswith(("Memcpy HtoD", "Memcpy DtoH")) for e in to_host)
    kernels += sum(e["dur"] for e in on_device)
    assert sum(r.device_us for r in rows) == pytest.approx(kernels, rel=1e-6)


class _Kind:
    def __init__(self, name: str) -> None:
        self.name = name


class FakeEvent:
    """What ``kineto_results.events()`` exposes, for tests without a GPU."""

    def __init__(self, **kw: Any) -> None:
        self.kw = kw

    def __getattr__(self, name: str) -> Any:
        if name not in self.kw:
            raise AttributeError(name)
        value = self.kw[name]
        return lambda: value


def kineto_like(trace: dict[str, Any]) -> list[FakeEvent]:
    """A Chrome trace turned back into raw-event stand-ins: an op's
    ``correlation_id()`` is its External id; a kernel's ``linked_correlation_id()``
    is the op's id, found through the launch call."""
    cpu, gpu = _Kind("CPU"), _Kind("CUDA")
    launches = {
        e["args"]["correlation"]: e["args"].get("External id")
        for e in trace["traceEvents"]
        if e.get("cat") in ("cuda_runtime", "cuda_driver")
    }
    out = []
    for e in trace["traceEvents"]:
        cat, args = e.get("cat"), e.get("args", {})
        common = {"name": e.get("name"), "start_ns": round(e.get("ts", 0) * 1000)}
        common["duration_ns"] = round(e.get("dur", 0) * 1000)
        if cat in ("cpu_op", "user_annotation"):
            out.append(
                FakeEvent(
                    **common,
                    device_type=cpu,
                    activity_type=cat,
                    linked_correlation_id=0,
                    correlation_id=args["External id"],
                    is_async=False,
                    start_thread_id=e["tid"],
                    shapes=args.get("Input Dims", []),
                    dtypes=args.get("Input type", []),
                    concrete_inputs=[c or None for c in args.get("Concrete Inputs", [])],
                    flops=0,
                )
            )
        elif cat in ("cuda_runtime", "cuda_driver"):
            out.append(
                FakeEvent(
                    **common,
                    device_type=cpu,
                    activity_type=cat,
                    linked_correlation_id=args.get("External id") or 0,
                    correlation_id=args["correlation"],
                )
            )
        elif cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            link = launches.get(args.get("correlation")) or args.get("External id") or 0
            out.append(
                FakeEvent(**common, device_type=gpu, activity_type=cat, linked_correlation_id=link)
            )
    return out


@pytest.mark.parametrize("path", [FP32_TRACE, HEALTHY_TRACE])
def test_raw_events_give_the_same_rows_as_the_trace(path: Path) -> None:
    trace = _load(path)
    from_trace = rows_from_chrome_trace(trace)
    from_events = rows_from_kineto(kineto_like(trace))
    key = lambda r: (r.name, r.input_dims, r.input_types)  # noqa: E731
    assert {key(r): (r.calls, r.kernels, r.flops, r.bytes_moved) for r in from_events} == {
        key(r): (r.calls, r.kernels, r.flops, r.bytes_moved) for r in from_trace
    }
    times = {key(r): r.device_us for r in from_trace}
    for r in from_events:
        assert r.device_us == pytest.approx(times[key(r)], abs=0.01)


def test_raw_events_prefer_torchs_flop_count_and_skip_non_ops() -> None:
    cpu, gpu = _Kind("CPU"), _Kind("CUDA")

    def op(name: str, corr: int, start: int, end: int, **kw: Any) -> FakeEvent:
        base = dict(
            name=name,
            device_type=cpu,
            activity_type="cpu_op",
            linked_correlation_id=0,
            correlation_id=corr,
            is_async=False,
            start_thread_id=7,
            start_ns=start,
            duration_ns=end - start,
            shapes=[],
            dtypes=[],
            concrete_inputs=[],
            flops=0,
        )
        base.update(kw)
        return FakeEvent(**base)

    def kernel(link: int, dur: int, activity: str = "kernel", name: str = "k") -> FakeEvent:
        return FakeEvent(
            name=name, device_type=gpu, activity_type=activity, linked_correlation_id=link,
            start_ns=0, duration_ns=dur,
        )  # fmt: skip

    events = [
        op("ProfilerStep#3", 1, 0, 1000, activity_type="user_annotation"),
        op("aten::matmul", 2, 10, 500, shapes=[[64, 32], [32, 16]], dtypes=["float", "float"]),
        op("aten::mm", 3, 20, 400, shapes=[[64, 32], [32, 16]], dtypes=["float", "float"], flops=9),
        op("cudaLaunchKernel", 9, 30, 40, linked_correlation_id=3, activity_type="cuda_runtime"),
        op("aten::copy_", 4, 600, 700, shapes=[[8], [8]], dtypes=["float", "float"]),
        kernel(3, 2000),
        kernel(3, 500),
        kernel(4, 100, "gpu_memcpy", "Memcpy DtoD (Device -> Device)"),
        kernel(4, 7000, "gpu_memcpy", "Memcpy HtoD (Pinned -> Device)"),  # PCIe's time
        kernel(1, 9999, "gpu_user_annotation"),  # a range mirrored on the GPU: not work
    ]
    rows = {r.name: r for r in rows_from_kineto(events)}
    assert set(rows) == {"aten::mm", "aten::copy_"}
    mm = rows["aten::mm"]
    assert (mm.flops, mm.flops_source, mm.kernels, mm.device_us) == (9, PROFILER, 2, 2.5)
    assert rows["aten::copy_"].bytes_moved == 64 and rows["aten::copy_"].device_us == 0.1


def test_outermost_op_with_a_formula_owns_the_kernels() -> None:
    cpu, gpu = _Kind("CPU"), _Kind("CUDA")
    conv = dict(shapes=[[1, 3, 8, 8], [4, 3, 3, 3], []], dtypes=["float", "float", ""])
    conv["concrete_inputs"] = [None, None, None, "[1, 1]", "[1, 1]", "[1, 1]", "1"]
    chain = ["aten::conv2d", "aten::convolution", "aten::_convolution", "aten::cudnn_convolution"]
    events = [
        FakeEvent(
            name=name,
            device_type=cpu,
            activity_type="cpu_op",
            linked_correlation_id=0,
            correlation_id=i + 1,
            is_async=False,
            start_thread_id=1,
            start_ns=10 * i,
            duration_ns=100 - 20 * i,
            flops=0,
            **conv,
        )
        for i, name in enumerate(chain)
    ]
    events.append(
        FakeEvent(
            name="k",
            device_type=gpu,
            activity_type="kernel",
            linked_correlation_id=4,
            start_ns=0,
            duration_ns=3000,
        )
    )
    (row,) = rows_from_kineto(events)
    assert row.name == "aten::conv2d" and row.device_us == 3.0
    assert row.flops == 2 * (1 * 4 * 8 * 8) * 3 * 3 * 3  # padding 1 keeps 8x8


def test_real_cpu_capture_gives_profiler_flops() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torch
    a, b = torch.randn(128, 64), torch.randn(64, 32)
    lin = torch.nn.Linear(32, 16)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True, with_flops=True
    ) as prof:
        lin(a @ b)
    rows = {r.name: r for r in rows_from_kineto(prof.profiler.kineto_results.events())}
    assert rows["aten::mm"].flops == 2 * 128 * 64 * 32
    assert rows["aten::mm"].flops_source == PROFILER
    assert rows["aten::addmm"].flops == 2 * 128 * 32 * 16
    assert rows["aten::addmm"].input_types[:3] == ("float", "float", "float")
    assert all(r.device_us == 0 for r in rows.values())  # no GPU here
    report = analyze(list(rows.values()), ROOF)
    # classed by intensity alone; no GPU time, so nothing achieved
    assert all(op.bound == MEMORY for op in report.ops)  # tiny products, fp32
    assert all(op.achieved_tflops is None and op.pct_of_ceiling is None for op in report.ops)


@pytest.mark.parametrize(
    "trace",
    [
        None,
        [],
        {"traceEvents": None},
        {"traceEvents": [1, "x", {"cat": "cpu_op"}, {"cat": "cpu_op", "args": []}]},
        {"traceEvents": [{"cat": "cpu_op", "ts": "a", "dur": 1, "args": {"External id": 1}}]},
        {"traceEvents": [{"cat": "kernel", "dur": float("nan"), "args": {"correlation": 1}}]},
        {
            "traceEvents": [
                {"cat": "cpu_op", "ts": 1, "dur": float("inf"), "args": {"External id": 1}}
            ]
        },
    ],
)
def test_malformed_traces_give_no_rows(trace: Any) -> None:
    assert rows_from_chrome_trace(trace) == []


def _roof(bw: float = 1000.0) -> Roof:
    return Roof(bw, (("fp32", 20.0), ("tf32", 150.0), ("bf16", 300.0)), DATASHEET, "test")


def test_an_fp32_op_faster_than_fp32_ran_on_tf32() -> None:
    from gputui.protocol.op_rows import OpRow

    def fp32_mm(device_us: float) -> OpRow:
        n = 4096
        return OpRow(
            "aten::mm", ((n, n), (n, n)), ("float", "float"), 1, device_us, 1,
            2.0 * n**3, ESTIMATED, 3.0 * n * n * 4, "matmul",
        )  # fmt: skip

    slow, fast = analyze([fp32_mm(10_000.0), fp32_mm(1_500.0)], _roof()).ops
    assert (slow.ceiling, fast.ceiling) == ("fp32", "tf32")
    assert fast.achieved_tflops == pytest.approx(2 * 4096**3 / 1.5e-3 / 1e12)
    assert slow.share == pytest.approx(10_000 / 11_500)


def test_collectives_are_left_off_the_roofline() -> None:
    """A collective's kernel time is the transfer and the wait for the other
    ranks: set against this GPU's roof it read as a memory-bound op at 0%."""
    from gputui.protocol.op_rows import OpRow

    def row(name: str, device_us: float) -> OpRow:
        return OpRow(
            name, ((6144,),), ("float",), 1, device_us, 1, None, None, 6144 * 4.0, "copy"
        )  # fmt: skip

    rows = [row("record_param_comms", 800.0), row("nccl:all_reduce", 300.0)]
    rows += [row("c10d::allreduce_", 100.0), row("aten::add", 50.0)]
    report = analyze(rows, _roof())
    assert [op.name for op in report.ops] == ["aten::add"]
    assert report.device_us == 50.0 and report.ops[0].share == 1.0


def test_view_places_ops_under_the_roof() -> None:
    rows = rows_from_chrome_trace(_load(HEALTHY_TRACE))
    report = analyze(rows, ROOF, top=12)
    view = roofline_view(report, 60, 16)
    assert (view.width, view.height) == (60, 16)
    placed = {report.ops[p.rank - 1].ceiling for p in view.points}
    assert len(view.points) >= 6 and placed == {line.ceiling for line in view.lines} == {"bf16"}
    for p in view.points:
        op = report.ops[p.rank - 1]
        assert op.intensity_flop_per_byte == p.intensity_flop_per_byte
        line = next(ln for ln in view.lines if ln.ceiling == op.ceiling)
        roof_row = line.rows[p.col]
        assert roof_row is None or p.row >= roof_row - 1  # row 0 is the top: on or under it
    bf16 = next(ln for ln in view.lines if ln.ceiling == "bf16")
    balance = 989.5e12 / 3350e9
    assert bf16.ridge_col == round((__import__("math").log10(balance) - view.x_min_log10)
                                   / (view.x_max_log10 - view.x_min_log10) * 59)  # fmt: skip
    assert view.x_ticks[0] == (0, 10.0**view.x_min_log10)
    assert view.y_ticks[0] == (15, 10.0**view.y_min_log10)
    assert view.y_ticks[-1] == (0, 10.0**view.y_max_log10)
    lines = grid_lines(view)
    assert len(lines) == 16 and all(len(line) == 60 for line in lines)
    assert "1" in "".join(lines)  # the op with the most GPU time is drawn, on top
    with pytest.raises(ValueError):
        roofline_view(report, 9, 16)


def test_rows_cross_a_process_boundary_as_checked_wire_values() -> None:
    from gputui.protocol.fields import SchemaError
    from gputui.protocol.op_rows import OpRow

    rows = rows_from_chrome_trace(_load(HEALTHY_TRACE))
    for row in rows:
        wire = json.loads(json.dumps(row.to_wire()))
        back = OpRow.from_wire(wire)
        assert back.to_wire() == row.to_wire()
    good = rows[0].to_wire()
    for field, bad in [
        ("calls", 0),
        ("calls", True),
        ("device_us", float("nan")),
        ("flops", "many"),
        ("flops", float("inf")),
        ("flops_source", "guess"),
        ("name", None),
        ("input_dims", [[1, "x"]]),
        ("input_dims", [[-1]]),
        ("input_types", [3]),
    ]:
        with pytest.raises(SchemaError) as err:
            OpRow.from_wire({**good, field: bad})
        assert field in str(err.value), field
    with pytest.raises(SchemaError):
        OpRow.from_wire([])


def test_raw_events_without_activity_types_as_torch_2_11_gives_them() -> None:
    """torch 2.11's raw events have no ``activity_type()`` (checked on the H100
    machine's torch): the device and the name tell ops, launch calls, the
    profiler's own events, copies and annotations apart."""
    cpu, gpu = _Kind("CPU"), _Kind("CUDA")

    def host(name: str, corr: int, start: int, end: int, **kw: Any) -> FakeEvent:
        base = dict(
            name=name, device_type=cpu, linked_correlation_id=0, correlation_id=corr,
            is_async=False, is_user_annotation=False, start_thread_id=7, start_ns=start,
            duration_ns=end - start, shapes=[], dtypes=[], concrete_inputs=[], flops=0,
        )  # fmt: skip
        base.update(kw)
        return FakeEvent(**base)

    def device(name: str, corr: int, link: int, dur: int, **kw: Any) -> FakeEvent:
        return FakeEvent(
            name=name, device_type=gpu, correlation_id=corr, linked_correlation_id=link,
            is_user_annotation=kw.get("annotation", False), start_ns=0, duration_ns=dur,
        )  # fmt: skip

    events = [
        host("ProfilerStep#3", 1, 0, 1000, is_user_annotation=True),
        host("aten::mm", 2, 20, 400, shapes=[[64, 32], [32, 16]], dtypes=["float", "float"]),
        host("Activity Buffer Request", 2, 25, 35),  # the same correlation id as the op
        host("cuLaunchKernelEx", 14, 30, 40, linked_correlation_id=2),
        host("aten::copy_", 3, 600, 700, shapes=[[8], [8]], dtypes=["float", "float"]),
        host("cudaMemcpyAsync", 15, 610, 690, linked_correlation_id=3),
        device("nvjet_sm90_tst_128x64", 14, 2, 2000),
        device("Memcpy DtoD (Device -> Device)", 15, 3, 100),
        device("ProfilerStep#3", 0, 1, 9999, annotation=True),
    ]
    rows = {r.name: r for r in rows_from_kineto(events)}
    assert set(rows) == {"aten::mm", "aten::copy_"}
    mm = rows["aten::mm"]
    assert (mm.flops, mm.flops_source, mm.kernels, mm.device_us) == (
        2 * 64 * 32 * 16,
        ESTIMATED,
        1,
        2.0,
    )
    assert rows["aten::copy_"].device_us == 0.1


def test_a_tensor_list_input_has_no_shape_in_raw_events_as_in_the_trace() -> None:
    cpu, gpu = _Kind("CPU"), _Kind("CUDA")
    events = [
        FakeEvent(
            name="aten::_foreach_add_", device_type=cpu, activity_type="cpu_op",
            linked_correlation_id=0, correlation_id=5, is_async=False, start_thread_id=1,
            start_ns=0, duration_ns=100, shapes=[[], [], []],
            dtypes=["TensorList", "TensorList", "Scalar"], concrete_inputs=[], flops=0,
        ),
        FakeEvent(
            name="multi_tensor_apply_kernel", device_type=gpu, activity_type="kernel",
            linked_correlation_id=5, start_ns=10, duration_ns=50,
        ),
    ]  # fmt: skip
    (row,) = rows_from_kineto(events)
    assert row.input_dims == (None, None, ())  # as rows_from_chrome_trace reads the trace


def test_a_trace_at_unix_time_gives_its_rows_and_step_flops() -> None:
    """torch before 2.0 wrote each event at its Unix time in microseconds
    (1.69e15 in 2023): its ops are read as those of a trace from a base time."""
    from gputui.trace.op_rows import ChromeTraceOps

    def events(base: float) -> list[dict[str, Any]]:
        return [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#10", "pid": 1, "tid": 1,
             "ts": base, "dur": 1000, "args": {"External id": 1}},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
             "ts": base + 10, "dur": 400,
             "args": {"External id": 2, "Input Dims": [[64, 32], [32, 16]],
                      "Input type": ["float", "float"]}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
             "ts": base + 20, "dur": 5, "args": {"External id": 2, "correlation": 9}},
            {"ph": "X", "cat": "kernel", "name": "volta_sgemm_128x32_nt", "pid": 0, "tid": 7,
             "ts": base + 30, "dur": 50, "args": {"External id": 2, "correlation": 9}},
        ]  # fmt: skip

    def read(base: float) -> tuple[list[Any], Any]:
        ops = ChromeTraceOps()
        ops.add(events(base))
        return ops.rows(), ops.step_totals()

    near_rows, near_flops = read(4590436926000.0)
    rows, flops = read(1694128201435418.0)
    assert [(r.name, r.flops, r.device_us) for r in rows] == [("aten::mm", 2 * 64 * 32 * 16, 50.0)]
    assert [(r.name, r.flops, r.device_us) for r in rows] == [
        (r.name, r.flops, r.device_us) for r in near_rows
    ]
    assert flops is not None and flops == near_flops and flops[1] == 1


def _parents_by_definition(spans: list[tuple[int, int, int]]) -> list[int]:
    """Each op's enclosing op: of the ops on its thread that hold it (start at or
    before it and end at or after its end, the longer first where they start
    together, then the earlier in the list), the innermost, in the order a
    nested walk visits them.  ``spans``: (thread, start, end) of each op."""
    order = sorted(range(len(spans)), key=lambda i: (spans[i][0], spans[i][1], -spans[i][2], i))
    rank = {i: k for k, i in enumerate(order)}
    out = []
    for i, (tid, start, _end) in enumerate(spans):
        holders = [
            j
            for j, (other_tid, other_start, other_end) in enumerate(spans)
            if j != i
            and other_tid == tid
            and rank[j] < rank[i]
            and other_start <= start
            and other_end > start
        ]
        out.append(max(holders, key=rank.__getitem__) if holders else -1)
    return out


def _table(spans: list[tuple[int, int, int]]) -> OpTable:
    ops = OpTable()
    for k, (tid, start, end) in enumerate(spans):
        ops.append(tid, start, end, "op", k, NO_ARGS)
    return ops


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([1, 2]), st.integers(0, 20), st.integers(0, 8)),
        max_size=40,
    )
)
def test_each_op_is_owned_by_the_innermost_op_that_holds_it(
    spans: list[tuple[int, int, int]],
) -> None:
    ops = [(tid, start, start + length) for tid, start, length in spans]
    expected = _parents_by_definition(ops)
    assert list(_parents(_table(ops))) == expected
    table = _table(ops)
    assert list(_walk(table, _in_order(table))) == expected  # the walk after a sort
    # in the order profilers write them (each thread's ops by start, the longer
    # first): the walk that needs no sort
    written = sorted(ops, key=lambda op: (op[1], -op[2]))
    with mock.patch.object(op_rows, "_in_order", side_effect=AssertionError("sorted")):
        assert list(_parents(_table(written))) == _parents_by_definition(written)
