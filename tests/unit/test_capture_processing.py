"""The steps that run while a capture is processed (its reduction and its trace
written, on the hook's worker thread, which shares the GIL with them) are
flagged as profiled, as the recorded ones are: the step statistics and the
slow-step findings leave them out.  The first step after the processing is an
ordinary one, and the step boundary is free again for the next capture."""

from __future__ import annotations

import threading
import time
from contextlib import nullcontext
from types import SimpleNamespace
from typing import Any

import pytest

from gputui.hook import _capture
from gputui.hook._capture import CaptureController
from gputui.hook._recorder import FLAG_PROFILED, Recorder, unpack
from gputui.protocol import messages
from gputui.protocol.schema import CaptureRequest
from tests.helpers.deadlines import WAIT_S


class Prof:
    """torch.profiler.profile as the controller drives it, recording nothing."""

    def __init__(self, **_options: Any) -> None:
        self.profiler = SimpleNamespace(kineto_results=SimpleNamespace(events=lambda: []))

    def prepare_trace(self) -> None: ...
    def start_trace(self) -> None: ...
    def stop_trace(self) -> None: ...


def fake_torch() -> Any:
    return SimpleNamespace(
        autograd=SimpleNamespace(),
        _C=SimpleNamespace(),
        cuda=SimpleNamespace(is_available=lambda: False, is_initialized=lambda: False),
        profiler=SimpleNamespace(
            profile=Prof,
            record_function=lambda name: nullcontext(),
            ProfilerActivity=SimpleNamespace(CPU="cpu", CUDA="cuda"),
        ),
    )


def test_steps_run_while_a_capture_is_processed_are_flagged_as_profiled(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    release = threading.Event()

    def slow_reduce(events: Any) -> dict[str, Any]:
        assert release.wait(WAIT_S)  # the processing lasts until the test says
        return {"events": 0}

    monkeypatch.setattr(_capture, "reduce_events", slow_reduce)
    monkeypatch.setattr(_capture, "_needs_preload", lambda torch: False)
    recorder = Recorder()
    recorder.torch = fake_torch()
    recorder.gpu_timing = False
    posted: list[dict[str, Any]] = []
    capture = CaptureController(recorder, lambda vid, obj: posted.append(obj))
    recorder.boundary()
    armed = capture.request(1, CaptureRequest(id="c", steps=2, warmup=0))
    assert armed.state == messages.CAPTURE_ARMED
    for _ in range(3):  # it starts, records two steps, and stops
        recorder.boundary()
    assert capture.state == messages.CAPTURE_PROCESSING
    for _ in range(3):  # three steps while the worker holds the capture
        recorder.boundary()
    release.set()
    deadline = time.monotonic() + WAIT_S
    while capture.state is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert capture.state is None and recorder.on_boundary is None
    for _ in range(2):  # the step in progress ends, then one run after it
        recorder.boundary()
    steps = [unpack(raw) for raw in recorder.out if raw[0] != "segment"]
    profiled = [s.idx for s in steps if s.flags & FLAG_PROFILED]
    last = steps[-1].idx
    # the two recorded steps; the step that began where the profiler stopped,
    # the two after it and the one in progress when the worker finished, all
    # run beside the processing; not the one after it
    assert profiled == list(range(last - 6, last))
    assert not steps[-1].flags & FLAG_PROFILED
    assert any(obj.get("type") == messages.CAPTURE_RESULT for obj in posted)
    # the boundary is free: the next capture arms
    assert capture.request(1, CaptureRequest(id="d")).state == messages.CAPTURE_ARMED
