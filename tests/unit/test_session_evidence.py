"""One evidence builder: the attach screen, ``attach --once`` and the rank view
hand the analyzer the same evidence of the same job."""

from __future__ import annotations

import dataclasses

import pytest

from gputui.analysis.engine import analyze
from gputui.analysis.roofline import Roof
from gputui.protocol.hello import LoaderInfo, Status
from gputui.protocol.schema import DeviceInfo, Hello, MemoryBatch, MemorySample, StepBatch
from gputui.protocol.steps import StepRecord
from gputui.session import attach, rank_view
from gputui.session.oneshot import JobReport
from gputui.session.rank_feeds import rank_input
from gputui.session.reading import Collected
from tests.helpers import memsnap

HELLO = Hello(
    pid=4242,
    argv=("python", "train.py"),
    torch="2.13.0",
    cuda="13.0",
    cuda_in_use=True,
    device=DeviceInfo(0, "NVIDIA H100 80GB HBM3", 80 * 2**30, "GPU-1"),
    rank=0,
    local_rank=0,
    world_size=2,
)
ROOF = Roof(3350.0, (("bf16", 989.0),), "datasheet", "H100 SXM5 datasheet")


def events() -> list[object]:
    """A job that waits on a loader without workers, with a memory snapshot."""
    steps = tuple(
        StepRecord(
            i, 1_700_000_000.0 + i * 0.1, 0.1, {"data": 0.06, "forward": 0.02, "backward": 0.02}
        )
        for i in range(60)
    )
    sample = MemorySample(t=1_700_000_006.0, device=0, allocated=2**30, reserved=2**31)
    return [
        StepBatch(steps, 0, False),
        MemoryBatch((sample,)),
        Status(t=1_700_000_006.0, steps=60, last_step=59, loader=LoaderInfo(num_workers=0)),
        memsnap.result(memsnap.planted_leak()),
    ]


def test_the_rank_view_sees_what_the_single_job_view_sees() -> None:
    state = attach.AttachState()
    state.set_hello(HELLO)
    state.set_roof(ROOF)
    for event in events():
        state.add(event)  # type: ignore[arg-type]
    snap = state.snapshot()
    single = attach.evidence(snap)
    in_ranks = rank_view.rank_evidence(rank_input(snap, HELLO)).job
    assert single.loader is not None and single.memory_snapshot is not None
    assert single.roofline == in_ranks.roofline
    assert in_ranks == single
    assert [f.rule for f in analyze(in_ranks)] == [f.rule for f in analyze(single)]


def test_attach_once_sees_what_the_screen_sees() -> None:
    got = Collected(HELLO)
    got.roof = ROOF
    for event in events():
        got.add(event)  # type: ignore[arg-type]
    state = attach.AttachState()
    state.set_hello(HELLO)
    state.set_roof(ROOF)
    for event in events():
        state.add(event)  # type: ignore[arg-type]
    screen = attach.evidence(state.snapshot())
    once = JobReport.of(HELLO.pid, got, 1000).findings
    assert [f.rule for f in once] == [f.rule for f in analyze(screen)]
    assert any(f.rule == "data.loader_wait" for f in once), [f.rule for f in once]
    assert dataclasses.replace(screen) == screen


def test_mfu_and_compile_are_the_same_on_the_screen_once_and_in_the_rank_view() -> None:
    from gputui.protocol.capture import CaptureOptions, CaptureResult
    from gputui.protocol.compile import CompileReason, CompileReport
    from gputui.protocol.messages import StepFlag
    from gputui.protocol.op_rows import FlopTotals

    compiled = StepRecord(60, 1_700_000_006.1, 3.0, {"forward": 3.0}, flags=int(StepFlag.COMPILE))
    extra: list[object] = [
        StepBatch((compiled,), 0, False),
        CaptureResult(
            id="c1",
            first_step=61,
            last_step=65,
            options=CaptureOptions(shapes=True, flops=True),
            flop_totals=FlopTotals(5 * 2e12, 5 * 2.5e12, (("bf16", 5 * 2e12),)),
        ),
        CompileReport(
            frames=2, graphs=3, graph_breaks=1, breaks=(CompileReason("print", 1, "t.py", 3),)
        ),
    ]
    got = Collected(HELLO)
    state = attach.AttachState()
    state.set_hello(HELLO)
    for event in events() + extra:
        got.add(event)  # type: ignore[arg-type]
        state.add(event)  # type: ignore[arg-type]
    view = attach.build_view(state.snapshot(), 0.0)
    once = JobReport.of(HELLO.pid, got, 1000).utilisation
    assert view.utilisation == once and once is not None
    # 2 TFLOP per step at 10 ordinary steps/s (the compiling step is left out)
    assert once.achieved_tflops == pytest.approx(20.0)
    assert once.mfu == pytest.approx(20.0 / 989.5)
    assert view.stats.excluded_compile == 1
    snap = state.snapshot()
    in_ranks = rank_view.rank_evidence(rank_input(snap, HELLO)).job
    assert in_ranks.compile_report == attach.evidence(snap).compile_report == got.compile_report
    assert "compile.breaks_recompiles" in [f.rule for f in analyze(in_ranks)]
