"""A trace's class shares are over the span its kernels cover: ``gputui analyze``
on the trace a capture wrote says what the live capture said of the same steps
(two H100s, DDP with NCCL: tests/data/h100x2-nccl)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputui.analysis.evidence import CaptureView
from gputui.analysis.trace_evidence import trace_capture
from gputui.analysis.trace_summary import TraceSummary, summarize
from gputui.tracefile.reader import read_trace

DATA = Path(__file__).resolve().parents[1] / "data"
NCCL = DATA / "h100x2-nccl"


def _capture(path: Path) -> tuple[TraceSummary, CaptureView]:
    summary = summarize(read_trace(path).timeline, 0, "order", str(path))
    cap = trace_capture(summary)
    assert cap is not None and cap.span_us
    return summary, cap


@pytest.mark.parametrize(
    ("case", "trace"), [("overlap", "overlap"), ("nooverlap", "nooverlap"), ("bigslow", "bigslow")]
)
@pytest.mark.parametrize("rank", [0, 1])
def test_the_traces_communication_share_is_the_live_captures(
    case: str, trace: str, rank: int
) -> None:
    """The live report (rank_cases.json) and the trace that capture wrote: the
    communication kernels' share of the GPU span agrees within a point (the
    raw events and the exported trace differ by a few activities), where the
    trace has no GPU work before its first step.  Where it has (the tail of an
    all-reduce the step before launched), the live capture counted it and the
    trace's tables, which cover the steps, leave it out: within three points."""
    cases = json.loads((NCCL / "rank_cases.json").read_text())["cases"]
    live = cases[case]["ranks"][rank]["capture"]
    live_comm = sum(us for cls, _calls, us in live["kernels"] if cls == "communication")
    live_share = live_comm / live["span_us"]
    summary, cap = _capture(NCCL / f"{trace}-rank{rank}.pt.trace.json.gz")
    share = cap.by_class_us.get("communication", 0.0) / cap.span_us
    apart = 0.03 if summary.setup.gpu_activities else 0.01
    assert share == pytest.approx(live_share, abs=apart), (share, live_share)


@pytest.mark.parametrize(
    "path", sorted(DATA.rglob("*.pt.trace.json.gz")), ids=lambda p: p.name.split(".")[0]
)
def test_busy_keeps_htas_idle_share_and_the_span_covers_every_activity(path: Path) -> None:
    summary, cap = _capture(path)
    temporal = summary.metrics.temporal
    assert temporal is not None and summary.gpu_span_us is not None
    assert cap.span_us == pytest.approx(summary.gpu_span_us)
    idle = 1.0 - (cap.busy_us or 0.0) / cap.span_us
    assert idle == pytest.approx(temporal.idle_us / temporal.span_us, abs=1e-9)
