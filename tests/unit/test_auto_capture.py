"""The automatic capture's rules: when a job is steady enough to profile, the
ten-minute rule, what a capture cost the job (from its steps), and one
viewer's state machine (p waits, --no-capture, a recent capture, a refusal)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from gputui.analysis.auto_capture import (
    RECENT_CAPTURE_S,
    STALLED_MIN_S,
    STEADY_MIN_STEPS,
    STEADY_TOLERANCE,
    UNSETTLED_STEPS,
    capture_cost,
    recent_capture,
    steadiness,
)
from gputui.analysis.steps import WARMUP_STEPS
from gputui.protocol import messages
from gputui.protocol.capture import CaptureOptions, CaptureResult, CaptureStatus
from gputui.protocol.hello import CaptureInfo, Status
from gputui.protocol.messages import StepFlag
from gputui.protocol.requests import CaptureRequest
from gputui.protocol.schema import Hello, StepRecord
from gputui.session.attach import AttachState, StateSnapshot
from gputui.session.autocapture import (
    ASKED,
    DONE,
    FAILED,
    OFF,
    REPLACED,
    SKIPPED,
    WAITING,
    AutoCapture,
    auto_request,
    cost_text,
)

T0 = 1_800_000_000.0


def run(walls: Sequence[float], start: int = 0, flags: dict[int, int] | None = None) -> list:
    """Steps ``start``.. with these wall times (seconds), back to back from T0."""
    out, t = [], T0
    for k, wall in enumerate(walls):
        t += wall
        index = start + k
        out.append(
            StepRecord(
                index=index,
                t=t,
                wall=wall,
                phases={"other": wall},
                flags=(flags or {}).get(index, 0),
            )
        )
    return out


# -- steady state -----------------------------------------------------------------------------
def test_the_warm_up_steps_are_never_steady() -> None:
    steps = run([0.01] * (WARMUP_STEPS + STEADY_MIN_STEPS - 1))
    judged = steadiness(steps)
    assert not judged.steady and judged.run_steps == STEADY_MIN_STEPS - 1
    assert "warm-up" in judged.reason
    steps = run([0.01] * (WARMUP_STEPS + STEADY_MIN_STEPS))
    judged = steadiness(steps)
    assert judged.steady and judged.settled and judged.since_step == WARMUP_STEPS


def test_a_compile_step_starts_the_count_again() -> None:
    steps = run([0.01] * 40, flags={35: int(StepFlag.COMPILE)})
    judged = steadiness(steps)
    assert not judged.steady and judged.since_step == 36 and judged.run_steps == 4
    assert "torch.compile compiled at step 35" in judged.reason


def test_a_compile_step_at_the_boundary() -> None:
    # STEADY_MIN_STEPS ordinary steps after the compile: steady; one fewer: not
    n = 40
    steps = run([0.01] * n, flags={n - STEADY_MIN_STEPS - 1: int(StepFlag.COMPILE)})
    assert steadiness(steps).steady
    steps = run([0.01] * n, flags={n - STEADY_MIN_STEPS: int(StepFlag.COMPILE)})
    assert not steadiness(steps).steady


@pytest.mark.parametrize(
    ("flag", "words"),
    [(StepFlag.PROFILED, "profiled at step"), (StepFlag.GRAPH_CAPTURE, "CUDA graph")],
)
def test_profiled_and_graph_capture_steps_are_not_ordinary(flag: StepFlag, words: str) -> None:
    steps = run([0.01] * 30, flags={27: int(flag)})
    judged = steadiness(steps)
    assert not judged.steady and words in judged.reason


def test_step_times_must_settle() -> None:
    # a job still speeding up: the newer half's median is 40% below the older's
    slowing = run([0.01] * 3 + [0.02] * 10 + [0.012] * 10)
    judged = steadiness(slowing)
    assert not judged.steady and "not settled" in judged.reason
    # within the tolerance: settled
    within = 1.0 - STEADY_TOLERANCE + 0.01
    steps = run([0.01] * 3 + [0.02] * 10 + [0.02 * within] * 10)
    assert steadiness(steps).steady
    beyond = 1.0 - STEADY_TOLERANCE - 0.01
    steps = run([0.01] * 3 + [0.02] * 10 + [0.02 * beyond] * 10)
    assert not steadiness(steps).steady


def test_a_periodic_slow_step_does_not_unsettle() -> None:
    walls = [0.01] * 40
    for k in range(5, 40, 10):
        walls[k] = 0.2  # a checkpoint every 10 steps
    assert steadiness(run(walls)).steady


def test_times_that_never_settle_are_captured_after_enough_steps() -> None:
    # the older half of the newest steps fast, the newer slow: the medians moved
    walls = [0.01] * 3 + [0.01] * (UNSETTLED_STEPS - 10) + [0.03] * 10
    judged = steadiness(run(walls))
    assert judged.run_steps == UNSETTLED_STEPS
    assert judged.steady and not judged.settled and "not settled" in judged.reason
    judged = steadiness(run(walls[1:]))
    assert not judged.steady


def test_a_job_that_stopped_stepping_is_not_steady() -> None:
    steps = run([0.01] * 30)
    last = steps[-1].t
    assert steadiness(steps, now_s=last + 1.0).steady
    judged = steadiness(steps, now_s=last + STALLED_MIN_S + 0.1)
    assert not judged.steady and judged.stalled and "not finished a step" in judged.reason
    # slow steps: ten of them, not STALLED_MIN_S, make a stall
    slow = run([2.0] * 30)
    assert steadiness(slow, now_s=slow[-1].t + 15.0).steady
    assert steadiness(slow, now_s=slow[-1].t + 21.0).stalled


# -- the ten-minute rule ----------------------------------------------------------------------
def result(
    first: int = 10, last: int = 14, end: float | None = T0, ready_ms: float | None = 50.0, **kw
) -> CaptureResult:
    return CaptureResult(
        id=kw.pop("id", "c1"),
        first_step=first,
        last_step=last,
        window_end_wall=end,
        ready_after_ms=ready_ms,
        stop_ms=kw.pop("stop_ms", 20.0),
        **kw,
    )


def test_ten_minutes() -> None:
    cap = result(end=T0)
    assert recent_capture(cap, T0 + RECENT_CAPTURE_S - 1)
    assert not recent_capture(cap, T0 + RECENT_CAPTURE_S)
    assert not recent_capture(None, T0)
    # a failed capture is no capture; one of unknown time counts as recent
    assert not recent_capture(dataclasses.replace(cap, error="boom"), T0)
    assert recent_capture(dataclasses.replace(cap, window_end_wall=None), T0 + 10 * 3600)
    # an older hook's result without its end: its start says when
    old = dataclasses.replace(cap, window_end_wall=None, started=T0)
    assert not recent_capture(old, T0 + RECENT_CAPTURE_S)


# -- what it cost -----------------------------------------------------------------------------
def profiled_job(after: list[float]) -> list[StepRecord]:
    """20 ordinary 10 ms steps, a warm-up step and 5 recorded steps at 20 ms
    (profiled), then ``after``."""
    walls = [0.01] * 20 + [0.02] * 6 + after
    flags = {k: int(StepFlag.PROFILED) for k in range(20, 26)}
    return run(walls, flags=flags)


def test_cost_sums_the_profiled_steps_and_those_until_the_result() -> None:
    steps = profiled_job([0.05, 0.015, 0.012, 0.01, 0.01])
    # the window ended at the end of step 25; the result was ready 60 ms later:
    # steps 26 (the stop, 50 ms) and 27 (15 ms) started before, 28 at 65 ms after
    end = steps[25].t
    cap = result(first=21, last=25, end=end, ready_ms=60.0, stop_ms=40.0)
    cost = capture_cost(steps, cap)
    assert cost is not None and cost.complete
    assert cost.profiled_steps == 6 and cost.after_steps == 2
    assert cost.ordinary_s == pytest.approx(0.01)
    assert cost.profiled_mean_s == pytest.approx(0.02)
    assert cost.slowdown == pytest.approx(2.0)
    assert cost.extra_s == pytest.approx(6 * 0.01 + 0.04 + 0.005)
    assert cost.extra_steps == pytest.approx(10.5)
    assert cost.stop_s == pytest.approx(0.04)
    text = cost_text(cost)
    assert "cost the job 105ms (10.5 steps' time)" in text
    assert "profiled steps x2.00" in text and "profiler stop 40.0ms" in text
    assert "over 8 steps" in text


def test_the_steps_run_while_a_capture_is_processed_count_flagged_or_not() -> None:
    """A hook flags the steps that run while its worker processes the capture as
    profiled (they stay out of the step statistics): they are the capture's
    cost all the same, as an older hook's unflagged ones are."""
    walls = [0.05, 0.015, 0.012, 0.01, 0.01]
    older = profiled_job(walls)
    newer = run(
        [0.01] * 20 + [0.02] * 6 + walls,
        flags={k: int(StepFlag.PROFILED) for k in range(20, 28)},
    )
    costs = [
        capture_cost(steps, result(first=21, last=25, end=steps[25].t, ready_ms=60.0))
        for steps in (older, newer)
    ]
    assert costs[0] is not None and costs[0] == costs[1]
    assert costs[0].after_steps == 2 and costs[0].extra_s == pytest.approx(0.105)


def test_cost_is_incomplete_until_a_step_after_the_result_arrives() -> None:
    steps = profiled_job([0.05, 0.015])
    cap = result(first=21, last=25, end=steps[25].t, ready_ms=60.0)
    cost = capture_cost(steps, cap)
    assert cost is not None and not cost.complete
    assert "still measuring" in cost_text(cost)
    assert capture_cost(profiled_job([]), cap) is not None
    assert not capture_cost(profiled_job([]), cap).complete  # type: ignore[union-attr]


def test_cost_from_an_older_hook_takes_the_stop_step_only() -> None:
    steps = profiled_job([0.05, 0.015, 0.012])
    cap = result(first=21, last=25, end=None, ready_ms=None, stop_ms=None)
    cost = capture_cost(steps, cap)
    assert cost is not None and cost.complete and cost.after_steps == 1
    assert cost.stop_s is None and "profiler stop unavailable" in cost_text(cost)


def test_no_cost_without_the_steps() -> None:
    steps = profiled_job([0.05])
    assert capture_cost(steps[22:], result(first=21, last=25)) is None  # its start is gone
    assert capture_cost(steps, result(first=100, last=104)) is None
    assert "not measured" in cost_text(None, 12.0)


# -- one viewer's state machine ----------------------------------------------------------------
HELLO = Hello.from_wire({"v": 1, "type": "hello", "protocol": 1, "pid": 4242, "argv": ["train.py"]})


def snap(
    steps: Sequence[StepRecord],
    *,
    capture: CaptureResult | None = None,
    status: CaptureStatus | None = None,
    under_way: str | None = None,
    wanted: str | None = None,
) -> StateSnapshot:
    base = AttachState().snapshot()
    return dataclasses.replace(
        base,
        hello=HELLO,
        synced=True,
        steps=tuple(steps),
        status=Status(t=T0, capture=CaptureInfo(state=under_way)),
        capture=capture,
        capture_status=status,
        capture_wanted=wanted,
    )


def steady_steps() -> list[StepRecord]:
    return run([0.01] * 30)


def now_of(steps: Sequence[StepRecord]) -> float:
    return steps[-1].t + 0.01


def test_it_waits_for_the_history_and_the_steady_state() -> None:
    auto = AutoCapture()
    steps = run([0.01] * 6)
    not_synced = dataclasses.replace(snap(steps), synced=False)
    assert auto.due([not_synced], now_of(steps)) is None and "history" in auto.reason
    assert auto.due([snap(steps)], now_of(steps)) is None
    assert auto.state == WAITING and "steady state" in auto.line([snap(steps)]).text
    steps = steady_steps()
    cid = auto.due([snap(steps)], now_of(steps))
    assert cid is not None and auto.state == ASKED
    assert auto.due([snap(steps)], now_of(steps)) is None  # asked once


def test_a_recent_capture_makes_it_unneeded() -> None:
    auto = AutoCapture()
    steps = steady_steps()
    cap = result(end=now_of(steps) - 120)
    assert auto.due([snap(steps, capture=cap)], now_of(steps)) is None
    assert auto.state == SKIPPED and "the job was captured at " in auto.reason
    # eleven minutes ago: taken
    auto = AutoCapture()
    cap = result(end=now_of(steps) - 660)
    assert auto.due([snap(steps, capture=cap)], now_of(steps)) is not None


def test_another_capture_under_way_is_waited_for() -> None:
    auto = AutoCapture()
    steps = steady_steps()
    assert auto.due([snap(steps, under_way="recording")], now_of(steps)) is None
    assert auto.state == WAITING and "another capture" in auto.reason
    assert auto.due([snap(steps, wanted="mine-1")], now_of(steps)) is None
    # its result arrives: it is the recent capture
    cap = result(end=now_of(steps))
    assert auto.due([snap(steps, capture=cap)], now_of(steps)) is None
    assert auto.state == SKIPPED


def test_the_result_ends_it_and_the_users_capture_goes_next() -> None:
    auto = AutoCapture()
    steps = profiled_job([0.05, 0.015, 0.012, 0.01] + [0.01] * 10)
    pre = steps[:20]
    cid = auto.due([snap(pre)], now_of(pre))
    assert cid is not None
    assert auto.user_capture("attach")  # p while it runs: waits
    assert not auto.take_user_turn("attach")
    line = auto.line([snap(pre)])
    assert line.user_waits and "your capture (p) waits" in line.text
    cap = result(id=cid, first=21, last=25, end=steps[25].t, ready_ms=30.0, auto=True)
    done = snap(steps, capture=cap)
    auto.due([done], now_of(steps))
    assert auto.state == DONE
    assert not auto.take_user_turn("ranks")  # another screen's turn: not this one
    assert auto.take_user_turn("attach") and not auto.take_user_turn("attach")
    line = auto.line([done])
    assert line.cost is not None and "cost the job" in line.text


def test_a_closed_screens_waiting_capture_is_dropped() -> None:
    auto = AutoCapture()
    steps = steady_steps()
    assert auto.due([snap(steps)], now_of(steps)) is not None
    assert auto.user_capture("attach") and auto.user_waits
    auto.forget_user("ranks")  # another screen's: nothing
    assert auto.user_waits
    auto.forget_user("attach")
    assert not auto.user_waits


def test_p_before_it_is_asked_replaces_it() -> None:
    auto = AutoCapture()
    assert not auto.user_capture()  # goes at once
    assert auto.state == REPLACED
    steps = steady_steps()
    assert auto.due([snap(steps)], now_of(steps)) is None


@pytest.mark.parametrize(
    ("state", "reason", "after"),
    [
        (messages.CAPTURE_REFUSED, "a torch profiler session is already running", FAILED),
        (messages.CAPTURE_BUSY, "a capture is already in progress", WAITING),
    ],
)
def test_a_refusal(state: str, reason: str, after: str) -> None:
    auto = AutoCapture()
    steps = steady_steps()
    cid = auto.due([snap(steps)], now_of(steps))
    refused = CaptureStatus(state, cid, reason)
    auto.due([snap(steps, status=refused)], now_of(steps))
    assert auto.state == after
    if after == FAILED:
        assert reason in auto.line([snap(steps)]).text


def test_a_result_with_an_error_is_a_failure() -> None:
    auto = AutoCapture()
    steps = steady_steps()
    cid = auto.due([snap(steps)], now_of(steps))
    broken = result(id=cid, error="RuntimeError: boom")
    auto.due([snap(steps, capture=broken)], now_of(steps))
    assert auto.state == FAILED and "boom" in auto.line([snap(steps)]).text


def test_off_and_on_again() -> None:
    auto = AutoCapture(enabled=False)
    steps = steady_steps()
    assert auto.state == OFF and auto.due([snap(steps)], now_of(steps)) is None
    assert "off" in auto.line([snap(steps)]).text
    assert "on" in auto.toggle() and auto.state == WAITING
    assert "off" in auto.toggle() and auto.state == OFF
    auto.toggle()
    auto.due([snap(steps)], now_of(steps))
    assert auto.state == ASKED and "under way" in auto.toggle()


def test_every_rank_must_be_steady_and_one_id_asks_them_all() -> None:
    auto = AutoCapture()
    steady, young = steady_steps(), run([0.01] * 7)
    assert auto.due([snap(steady), snap(young)], now_of(steady)) is None
    assert auto.state == WAITING
    cid = auto.due([snap(steady), snap(steady)], now_of(steady))
    assert cid is not None
    # one rank's result is not the end
    cap = result(id=cid, first=21, last=25)
    auto.due([snap(steady, capture=cap), snap(steady)], now_of(steady))
    assert auto.state == ASKED
    auto.due([snap(steady, capture=cap), snap(steady, capture=cap)], now_of(steady))
    assert auto.state == DONE


def test_the_request_carries_flops_and_shapes_and_says_it_is_automatic() -> None:
    request = auto_request("auto-1", start_step=40)
    assert request.flops and request.shapes and request.auto and request.start_step == 40
    wire = request.to_wire()
    assert wire["auto"] is True
    assert CaptureRequest.from_wire(wire).auto
    # a viewer's request without the key (an older viewer) is not automatic
    del wire["auto"]
    assert not CaptureRequest.from_wire(wire).auto
    assert "auto" not in CaptureRequest(id="x").to_wire()


def test_the_result_says_automatic_and_an_older_peer_reads_what_it_knows() -> None:
    cap = result(auto=True)
    wire = cap.to_wire()
    assert wire["auto"] is True and CaptureResult.from_wire(wire).auto
    # an older hook's result (no flag): not automatic; the viewer knows its id
    del wire["auto"]
    assert not CaptureResult.from_wire(wire).auto
    # a capture that is not automatic is sent as before: no new key
    assert "auto" not in result().to_wire()
    # an older peer reads past keys it does not know
    wire["some_later_key"] = {"x": 1}
    assert CaptureResult.from_wire(wire).id == cap.id
    request = auto_request("auto-1").to_wire()
    request["some_later_key"] = 3
    assert CaptureRequest.from_wire(request).auto


def test_an_older_hooks_result_is_still_the_automatic_capture() -> None:
    from gputui.tui.attach.capture_panels import cost_line

    auto = AutoCapture()
    steps = profiled_job([0.05, 0.015, 0.012, 0.01] + [0.01] * 10)
    cid = auto.due([snap(steps[:20])], now_of(steps[:20]))
    flops = CaptureOptions(shapes=True, flops=True)
    old = result(id=cid, first=21, last=25, end=None, ready_ms=None, stop_ms=None, options=flops)
    done = snap(steps, capture=old)
    auto.due([done], now_of(steps))
    assert auto.state == DONE
    from gputui.session.attach import build_view

    view = build_view(done, now_of(steps))
    parts = [text for text, _style in cost_line(view, auto.line([done]))]
    assert parts[0].startswith("automatic capture with FLOPs: cost the job")
    assert "profiler stop unavailable (an older hook)" in parts
    # a hook older still, without FLOPs: the capture is named for what it is
    plain = dataclasses.replace(old, options=CaptureOptions())
    done = snap(steps, capture=plain)
    view = build_view(done, now_of(steps))
    first = cost_line(view, auto.line([done]))[0][0]
    assert first.startswith("automatic capture (no FLOPs): cost the job")
