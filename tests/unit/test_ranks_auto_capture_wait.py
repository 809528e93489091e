"""The automatic capture of every rank of a job (``attach LAUNCHER --once``)
waits for its result as long as a one-shot capture of one job does: a few tens
of seconds and the job's own steps, not ``--timeout``.  A job whose ranks stop
stepping as the capture begins (one gone, the others stalled in a collective)
gets its report without it."""

from __future__ import annotations

from typing import Any

import pytest

from gputui.client.hook import AttachError
from gputui.session import oneshot
from gputui.session.autocapture import CAPTURE_WAIT_S, CAPTURE_WAIT_STEPS, FAILED
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

    def capture_live(client: Any, got: Any, request: Any, timeout: float, quiet: bool) -> None:
        waited.append(timeout)
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
    # a capture the user asked for (--capture N) still waits for --timeout
    waited.clear()
    with pytest.raises(oneshot.JobFailed):
        shot._capture(clients, collected, oneshot.auto_request("x"), [])  # type: ignore[arg-type]
    assert set(waited) == {300.0}
