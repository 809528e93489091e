"""An armed capture has a thread import what torch.profiler's start imports
(``torch._inductor``, seconds in an eager job), and starts once that is done:
the training thread does not stop for the import.  A synchronized capture
starts at its step whatever the import's progress."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from gputui.hook import _capture
from gputui.hook._capture import CaptureController
from gputui.hook._recorder import Recorder
from gputui.protocol import messages
from gputui.protocol.schema import CaptureRequest
from tests.helpers.deadlines import WAIT_S


class Job:
    """A recorder, a capture controller whose profiler start is only noted, and
    an import the test lets finish."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, needs: bool = True) -> None:
        self.release = threading.Event()
        self.imports: list[str] = []
        self.began: list[int] = []

        def preload() -> None:
            self.imports.append(threading.current_thread().name)
            assert self.release.wait(WAIT_S)

        monkeypatch.setattr(_capture, "_needs_preload", lambda torch: needs)
        monkeypatch.setattr(_capture, "_preload", preload)
        self.recorder = Recorder()
        self.recorder.torch = SimpleNamespace(
            autograd=SimpleNamespace(),
            _C=SimpleNamespace(),
            cuda=SimpleNamespace(is_initialized=lambda: False),
        )
        self.recorder.gpu_timing = False
        self.capture = CaptureController(self.recorder, lambda *a: None)
        monkeypatch.setattr(self.capture, "_begin", lambda req, index: self.began.append(index))
        self.recorder.boundary()  # training has started

    def arm(self, **kwargs: Any) -> None:
        status = self.capture.request(1, CaptureRequest(id="c1", **kwargs))
        assert status.state == messages.CAPTURE_ARMED

    def steps(self, n: int) -> None:
        for _ in range(n):
            self.recorder.boundary()

    def imported(self) -> None:
        self.release.set()
        deadline = time.monotonic() + WAIT_S
        while not self.capture.preloaded and time.monotonic() < deadline:
            time.sleep(0.01)
        assert self.capture.preloaded


def test_a_capture_starts_once_the_profilers_import_is_done(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = Job(monkeypatch)
    job.arm()
    job.steps(5)  # the import is under way: the steps go on, the capture waits
    assert job.began == [] and job.capture.armed is not None
    assert job.imports == ["gputui-capture-prep"]  # on its own thread, not the training one
    job.imported()
    job.steps(1)
    assert job.began == [job.recorder.index]


def test_a_job_that_imported_it_already_starts_at_the_next_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = Job(monkeypatch, needs=False)
    job.arm()
    job.steps(1)
    assert job.began == [job.recorder.index] and job.imports == []


def test_a_synchronized_capture_starts_at_its_step_whatever_the_import(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = Job(monkeypatch)
    start = job.recorder.index + 3
    job.arm(start_step=start, warmup=0)
    job.steps(2)
    assert job.began == []
    job.steps(1)
    assert job.began == [start]  # every rank from the same step, as before
    job.release.set()


def test_the_wait_for_the_import_has_a_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    job = Job(monkeypatch)
    job.arm()
    job.steps(1)
    assert job.began == []
    job.capture.preload_since -= _capture.PRELOAD_WAIT_S  # as if it had waited that long
    job.steps(1)
    assert job.began == [job.recorder.index]
    job.release.set()


def test_one_import_however_often_captures_are_armed(monkeypatch: pytest.MonkeyPatch) -> None:
    job = Job(monkeypatch)
    job.arm()
    assert job.capture.cancel(1).state == messages.CAPTURE_CANCELLED
    job.arm()
    job.imported()
    job.steps(1)
    assert job.imports == ["gputui-capture-prep"] and len(job.began) == 1
