"""The automatic capture of every rank of a job (``attach LAUNCHER --once``)
waits for its result as long as a one-shot capture of one job does: a few tens
of seconds and the job's own steps, not ``--timeout``.  A job whose ranks stop
stepping as the capture begins (one gone, the others stalled in a collective)
gets its report without it."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest

from gputui.client.hook import AttachError
from gputui.protocol.capture import CaptureResult, CaptureStatus
from gputui.protocol.messages import CAPTURE_ARMED, CAPTURE_RECORDING
from gputui.session import oneshot
from gputui.session.autocapture import (
    CAPTURE_WAIT_S,
    CAPTURE_WAIT_STEPS,
    FAILED,
    auto_request,
    stall_reason,
)
from gputui.session.reading import JobFailed, capture_live
from tests.helpers.evidence import steps


class _Client:
    def __init__(self, pid: int) -> None:
        self.pid = pid


class _Got:
    def __init__(self, wall_s: float) -> None:
        self.steps = steps(n=60, walls=[wall_s] * 60)
        self.status = None
        self.capture = None


def test_the_ranks_automatic_capture_waits_as_long_as_a_one_shots(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waited: list[float] = []

    checks: list[Any] = []

    def capture_live(
        client: Any, got: Any, request: Any, timeout: float, quiet: bool, stalled: Any = None
    ) -> None:
        waited.append(timeout)
        checks.append(stalled)
        raise AttachError("gputui attach: no capture result in time")

    monkeypatch.setattr(oneshot, "wait_turn", lambda *_args: None)
    monkeypatch.setattr(oneshot, "capture_live", capture_live)
    shot = oneshot.OneShot(oneshot.OnceOptions(timeout_s=300.0, quiet=True))
    clients = [_Client(10), _Client(11)]
    collected = [_Got(0.05), _Got(0.5)]  # the slower rank sets the wait
    outcome = shot._auto_capture(clients, collected, [])  # type: ignore[arg-type]
    assert outcome.state == FAILED
    assert len(waited) == 2
    assert all(w == pytest.approx(CAPTURE_WAIT_S + CAPTURE_WAIT_STEPS * 0.5) for w in waited)
    # each rank's wait gives up once that rank stops stepping (its steps here
    # ended long ago: the check says so)
    assert len(checks) == 2 and all(c is not None for c in checks)
    assert all("has not finished a step" in c() for c in checks)
    # a capture the user asked for (--capture N) still waits for --timeout
    waited.clear()
    checks.clear()
    with pytest.raises(oneshot.JobFailed):
        shot._capture(clients, collected, oneshot.auto_request("x"), [])  # type: ignore[arg-type]
    assert set(waited) == {300.0} and checks == [None, None]


# -- the wait itself ------------------------------------------------------------------------
class _Hook:
    """A hook that takes the capture and then says only ``said`` (in order),
    then nothing: each ``get`` without news waits a little, as a quiet socket
    does."""

    pid = 4242

    def __init__(self, said: list[Any]) -> None:
        self.said = list(said)
        self.cancelled = 0
        self.polls = 0

    def request_capture(self, **_kw: Any) -> str:
        return "c1"

    def cancel_capture(self) -> None:
        self.cancelled += 1

    def get(self, timeout: float | None = None) -> Any:
        self.polls += 1
        if self.said:
            return self.said.pop(0)
        time.sleep(min(timeout or 0.0, 0.02))
        return None


class _Seen:
    def __init__(self, recent: bool) -> None:
        made = steps(n=30, walls=[0.05] * 30)
        if recent:  # the job's last step ended a moment ago
            shift = time.time() - made[-1].t
            made = [replace(r, t=r.t + shift) for r in made]
        self.steps = made
        self.added: list[Any] = []

    def add(self, event: Any) -> None:
        self.added.append(event)


def _status(state: str) -> CaptureStatus:
    return CaptureStatus(state, "c1", step=40, steps=5)


def test_an_armed_automatic_capture_is_given_up_once_the_job_stops_stepping() -> None:
    """Armed for a step the job never reaches (a rank gone, the others stuck in
    a collective): the capture is cancelled with the job's stall as the reason,
    not waited for until its timeout (two minutes here)."""
    hook = _Hook([_status(CAPTURE_ARMED)])
    seen = _Seen(recent=False)
    with pytest.raises(JobFailed) as err:
        capture_live(
            hook,
            seen,
            auto_request("c1"),
            120.0,
            True,
            lambda: stall_reason(seen),  # type: ignore[arg-type]
        )
    assert "not taken: the job has not finished a step" in str(err.value)
    assert hook.cancelled == 1


def test_a_capture_that_has_begun_is_not_given_up_for_a_stall() -> None:
    """Once the profiler runs, slow steps are its own: the wait goes on to its
    timeout (short here) whatever the stall check says."""
    hook = _Hook([_status(CAPTURE_ARMED), _status(CAPTURE_RECORDING)])
    seen = _Seen(recent=False)
    asked: list[int] = []

    def stalled() -> str | None:
        asked.append(1)
        return "the job has not finished a step for 1 min"

    with pytest.raises(JobFailed) as err:
        capture_live(hook, seen, auto_request("c1"), 2.5, True, stalled)  # type: ignore[arg-type]
    assert "did not finish within 2.5 s" in str(err.value)
    assert not asked  # (the check is asked at most once a second, and only before it began)


def test_a_job_that_steps_gets_its_capture_and_a_check_that_says_nothing() -> None:
    result = CaptureResult(id="c1", steps=5)
    hook = _Hook([_status(CAPTURE_ARMED), None, None, _status(CAPTURE_RECORDING), result])
    seen = _Seen(recent=True)
    assert stall_reason(seen) is None  # type: ignore[arg-type]
    capture_live(hook, seen, auto_request("c1"), 60.0, True, lambda: stall_reason(seen))  # type: ignore[arg-type]
    assert hook.cancelled == 0 and seen.added[-1] is result
