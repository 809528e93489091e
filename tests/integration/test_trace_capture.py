"""The hook's captures carry the trace metrics: computed from torch's raw events,
they equal what ``gputui analyze`` computes from the same capture's trace file."""

from __future__ import annotations

import importlib.metadata
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gputui.client.hook import HookClient
from gputui.hook._reduce import reduce_events
from gputui.protocol.capture import CaptureResult
from gputui.protocol.fields import SchemaError
from gputui.protocol.trace_metrics import TraceMetrics
from gputui.trace.trace_metrics import compute
from gputui.tracefile.reader import read_trace
from tests.helpers import hookutil
from tests.helpers.tracegen import reference_trace


def kineto_events(doc: dict[str, Any]) -> list[Any]:
    """The trace's complete events as torch's raw ``_KinetoEvent``s show them."""
    out = []
    for e in doc["traceEvents"]:
        if e.get("ph") != "X" or e.get("cat") == "Trace":
            continue
        args = e.get("args", {})
        gpu = "stream" in args
        cat = e["cat"]
        out.append(
            SimpleNamespace(
                name=lambda e=e: e["name"],
                device_type=lambda gpu=gpu: SimpleNamespace(name="CUDA" if gpu else "CPU"),
                start_ns=lambda e=e: round(e["ts"] * 1000),
                duration_ns=lambda e=e: round(e["dur"] * 1000),
                activity_type=lambda cat=cat: cat,
                is_user_annotation=lambda cat=cat: cat == "user_annotation",
                is_python_function=lambda: False,
                start_thread_id=lambda e=e: e["tid"],
                device_index=lambda args=args: args.get("device", 0),
                device_resource_id=lambda args=args, e=e: args.get("stream", e["tid"]),
                correlation_id=lambda args=args: args.get(
                    "correlation", args.get("External id", 0)
                ),
                linked_correlation_id=lambda args=args: args.get("External id", 0),
            )
        )
    return out


def test_raw_events_give_the_metrics_of_the_trace_file(tmp_path: Path) -> None:
    builder = reference_trace()
    from_file = compute(read_trace(builder.write(tmp_path / "t.json")).timeline)
    out = reduce_events(kineto_events(builder.document()))
    assert out["trace_metrics"] == from_file
    assert from_file.temporal is not None and from_file.comm_compute_overlap_pct == 75.0


def test_reduce_without_correlation_accessors_still_sends_tables() -> None:
    """An older torch without correlation ids or streams: the tables as before,
    metrics from what there is (no launch statistics)."""
    events = kineto_events(reference_trace().document())
    for ev in events:
        del ev.correlation_id, ev.device_resource_id, ev.linked_correlation_id
    out = reduce_events(events)
    assert out["kernels"] and out["gpu_time"] is not None
    m = out["trace_metrics"]
    assert isinstance(m, TraceMetrics) and m.temporal is not None and m.launch is None


def test_capture_result_carries_the_metrics() -> None:
    metrics = reduce_events(kineto_events(reference_trace().document()))["trace_metrics"]
    result = CaptureResult(id="c1", events=3, trace_metrics=metrics)
    wire = json.loads(json.dumps(result.to_wire()))
    assert wire["trace_metrics"]["temporal"]["idle_pct"] == 51.18
    assert wire["trace_metrics"]["idle_breakdown"]["host_wait_pct"] == 54.35
    back = CaptureResult.from_wire(wire)
    assert back.trace_metrics == metrics
    del wire["trace_metrics"]  # a hook that predates the field
    assert CaptureResult.from_wire(wire).trace_metrics is None


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("temporal", "span_us"), -1.0, "capture_result.trace_metrics.temporal.span_us"),
        (("launch", "launches"), "many", "capture_result.trace_metrics.launch.launches"),
        (("step_breakdown", "step_us"), [1.0, float("inf")], "step_breakdown.step_us[1]"),
        (("idle_breakdown", "streams"), {"stream": 1}, "trace_metrics.idle_breakdown.streams"),
        (("comm_compute_overlap_pct",), 250.0, "trace_metrics.comm_compute_overlap_pct"),
    ],
)
def test_bad_metrics_are_refused_naming_the_field(
    path: tuple[str, ...], value: Any, field: str
) -> None:
    metrics = reduce_events(kineto_events(reference_trace().document()))["trace_metrics"]
    wire = CaptureResult(id="c1", trace_metrics=metrics).to_wire()
    obj = wire["trace_metrics"]
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = value
    with pytest.raises(SchemaError) as err:
        CaptureResult.from_wire(wire)
    assert field in str(err.value)


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], hookutil.Job]]:
    """A stepping job per device, started on first use and shared by the
    captures of this module (each capture is of its own steps)."""
    started: dict[str, hookutil.Job] = {}
    with hookutil.isolated_dirs() as dirs, pytest.MonkeyPatch.context() as mp:
        env = hookutil.make_env(*dirs)
        mp.setenv("GPUTUI_SOCKET_DIR", dirs[0])  # where HookClient looks

        def on(device: str) -> hookutil.Job:
            if device not in started:
                args = ["--install", "--steps", "0", "--device", device]
                started[device] = hookutil.start_job(env, tmp_path_factory.mktemp(device), args)
            return started[device]

        try:
            yield on
        finally:
            for j in started.values():
                j.stop()


def _capture(job: hookutil.Job, flops: bool = False) -> CaptureResult:
    client = HookClient.connect(job.pid)
    try:
        client.subscribe(history=0)
        client.start()
        cid = client.request_capture(steps=3, warmup=1, flops=flops)
        result = next(
            ev for ev in hookutil.events(client) if isinstance(ev, CaptureResult) and ev.id == cid
        )
    finally:
        client.close()
    assert result.error is None and result.trace_path
    return result


def _cuts_open_ranges() -> bool:
    """torch 2.4 exports a range still open when the trace stops (the optimizer
    step whose post hook ends a capture) with no duration, where its raw events
    keep the time: the trace file has that much less op time in its last step
    (2.13 exports the range whole)."""
    version = importlib.metadata.version("torch")
    major, minor = (int(part) for part in re.findall(r"\d+", version)[:2])
    return (major, minor) <= (2, 4)


def _agree(live: TraceMetrics, trace: TraceMetrics) -> None:
    """The capture's metrics and those of its trace file: the same definitions
    over the same events, rounded from nanoseconds in one and from the trace's
    microseconds in the other."""
    assert (live.steps_total, live.last_step_dropped) == (
        trace.steps_total,
        trace.last_step_dropped,
    )
    a, b = live.step_breakdown, trace.step_breakdown
    assert a is not None and b is not None and a.steps == b.steps
    cut = _cuts_open_ranges()
    for category in ("kernel", "runtime", "dataloader", "cpu_op", "other"):
        pa, pb = a.category_pct(category), b.category_pct(category)
        assert pa is not None and pb is not None, category
        if cut and category in ("cpu_op", "other"):
            continue
        assert abs(pa - pb) <= 0.5, category
    if cut:
        # the cut range's time is "other" in the trace, "cpu_op" in the events
        assert a.category_pct("cpu_op") >= b.category_pct("cpu_op") - 0.5  # type: ignore[operator]
        pairs = [
            (x.category_pct("cpu_op") or 0.0) + (x.category_pct("other") or 0.0) for x in (a, b)
        ]
        assert abs(pairs[0] - pairs[1]) <= 0.5
    if trace.temporal is None:
        assert live.temporal is None
        return
    assert live.temporal is not None and live.idle_breakdown is not None
    ta, tb = live.temporal, trace.temporal
    for x, y in zip(
        (ta.idle_pct, ta.compute_pct, ta.non_compute_pct),
        (tb.idle_pct, tb.compute_pct, tb.non_compute_pct),
        strict=True,
    ):
        assert x is not None and y is not None and abs(x - y) <= 0.5
    assert trace.idle_breakdown is not None
    ia, ib = live.idle_breakdown, trace.idle_breakdown
    for x, y in zip(
        (ia.host_wait_pct, ia.kernel_wait_pct, ia.other_pct),
        (ib.host_wait_pct, ib.kernel_wait_pct, ib.other_pct),
        strict=True,
    ):
        assert x is not None and y is not None and abs(x - y) <= 0.5
    assert [s.stream for s in ia.streams] == [s.stream for s in ib.streams]
    assert live.launch is not None and trace.launch is not None
    assert abs(live.launch.launches - trace.launch.launches) <= 0.01 * trace.launch.launches


@pytest.mark.slow
def test_cpu_capture_metrics_match_its_trace(job: Callable[[str], hookutil.Job]) -> None:
    result = _capture(job("cpu"))
    live = result.trace_metrics
    assert live is not None and live.temporal is None  # no GPU
    assert live.steps_total == 3 and live.last_step_dropped
    _agree(live, compute(read_trace(result.trace_path or "").timeline))


@pytest.mark.slow
@pytest.mark.gpu
def test_cuda_capture_metrics_match_its_trace(job: Callable[[str], hookutil.Job]) -> None:
    """On a GPU: correlation ids and streams come from torch's raw events (their
    accessors are guarded, so a mismatch would show as missing launch stats)."""
    result = _capture(job("cuda"))
    live = result.trace_metrics
    assert live is not None and live.temporal is not None and live.launch is not None
    assert live.launch.launches > 0
    _agree(live, compute(read_trace(result.trace_path or "").timeline))


def _rows_agree(result: CaptureResult) -> None:
    """The op rows the hook sent are those ``gputui analyze`` reads from the same
    capture's trace file (GPU times rounded from ns in one, from us in the other)."""
    assert result.options.flops and result.options.shapes and result.op_rows
    assert result.op_rows_ms is not None
    traced = {(r.name, r.input_dims): r for r in read_trace(result.trace_path or "").op_rows}
    assert traced
    missing = [
        (r.name, r.input_dims) for r in result.op_rows[:10] if (r.name, r.input_dims) not in traced
    ]
    assert not missing, (missing, sorted(traced)[:20])
    for row in result.op_rows[:10]:
        other = traced[(row.name, row.input_dims)]
        assert (other.calls, other.kernels, other.input_types) == (
            row.calls,
            row.kernels,
            row.input_types,
        )
        assert other.device_us == pytest.approx(row.device_us, rel=1e-3, abs=0.01)
        if row.flops_source == "estimated":
            assert other.flops == pytest.approx(row.flops)


@pytest.mark.slow
def test_cpu_capture_with_flops_sends_op_rows(job: Callable[[str], hookutil.Job]) -> None:
    result = _capture(job("cpu"), flops=True)
    rows = {r.name: r for r in result.op_rows}
    # the job's nn.Linear layers: torch's own FLOP count, from the raw events
    assert "aten::addmm" in rows and rows["aten::addmm"].flops_source == "profiler"
    _rows_agree(result)


@pytest.mark.slow
@pytest.mark.gpu
def test_cuda_capture_with_flops_sends_op_rows(job: Callable[[str], hookutil.Job]) -> None:
    result = _capture(job("cuda"), flops=True)
    top = result.op_rows[0]
    assert top.device_us > 0 and top.kernels > 0
    _rows_agree(result)


def test_raw_events_without_activity_types_give_the_same_metrics(tmp_path: Path) -> None:
    """torch 2.11's raw events have no ``activity_type()``: launch calls, copies
    and kernels are told apart by device and name, with the same metrics."""
    builder = reference_trace()
    from_file = compute(read_trace(builder.write(tmp_path / "t.json")).timeline)
    events = kineto_events(builder.document())
    for ev in events:
        del ev.activity_type
    out = reduce_events(events)
    assert out["trace_metrics"] == from_file
