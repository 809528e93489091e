"""The hook's memory snapshot controller over a stand-in for torch's allocator
(no GPU): states, refusals, the history turned on and off at step boundaries,
the markers found again in the trace, the leak named, the private file."""

from __future__ import annotations

import os
import pickle
import stat
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gputui.hook._capture import CaptureController
from gputui.hook._memsnap import NO_CUDA, MemorySnapshotController
from gputui.hook._recorder import FLAG_PROFILED, Recorder, unpack
from gputui.protocol import memsnap as ms
from gputui.protocol import messages
from gputui.protocol.memsnap import MemorySnapshotRequest, MemorySnapshotResult
from gputui.protocol.schema import CaptureRequest
from tests.helpers.deadlines import WAIT_S

MIB = 2**20


class FakeAllocator:
    """The caching allocator's history as torch keeps it: a ring of events with
    the caller's Python frames (innermost first), cleared when turned off."""

    def __init__(self) -> None:
        self.on = False
        self.max_entries = 0
        self.trace: list[dict[str, Any]] = []
        self.live: dict[int, int] = {}
        self.next = 0x1000
        self.calls: list[Any] = []
        self.fail_on: str | None = None

    def record(self, enabled: Any, *args: Any, **kwargs: Any) -> None:
        self.calls.append((enabled, kwargs))
        if self.fail_on == "record":
            raise RuntimeError("no history for you")
        self.on = enabled is not None
        self.max_entries = kwargs.get("max_entries", 0)
        if not self.on:
            self.trace = []

    def _event(self, action: str, addr: int, size: int, frames: list[Any]) -> None:
        if not self.on:
            return
        self.trace.append({"action": action, "addr": addr, "size": size, "frames": frames})
        del self.trace[: -self.max_entries]

    def alloc(self, size: int, depth: int = 1) -> int:
        frames = []
        frame = sys._getframe(depth)
        while frame is not None:
            code = frame.f_code
            frames.append(
                {"filename": code.co_filename, "line": frame.f_lineno, "name": code.co_name}
            )
            frame = frame.f_back
        addr, self.next = self.next, self.next + size + 512
        self.live[addr] = size
        self._event("alloc", addr, size, frames)
        return addr

    def free(self, addr: int) -> None:
        size = self.live.pop(addr)
        self._event("free_requested", addr, size, [])
        self._event("free_completed", addr, size, [])

    def snapshot(self) -> dict[str, Any]:
        segments = [
            {
                "device": 0,
                "address": addr,
                "total_size": 2 * MIB,
                "allocated_size": size,
                "active_size": size,
                "requested_size": size,
                "stream": 0,
                "segment_type": "small",
                "is_expandable": False,
                "blocks": [
                    {
                        "address": addr,
                        "size": size,
                        "requested_size": size,
                        "state": "active_allocated",
                        "frames": [],
                    }
                ],
            }
            for addr, size in self.live.items()
        ]
        return {"segments": segments, "device_traces": [list(self.trace)]}


def fake_torch(alloc: FakeAllocator, cuda: bool = True, new: bool = True) -> Any:
    def caching_allocator_alloc(size: int, device: int | None = None) -> int:
        return alloc.alloc(size, depth=2)  # torch's own frame is not in the stack we keep

    memory = SimpleNamespace(_record_memory_history=alloc.record, _snapshot=alloc.snapshot)
    c_api = SimpleNamespace(_cuda_isHistoryEnabled=lambda: False)
    if new:
        c_api._cuda_record_memory_history = object()  # type: ignore[attr-defined]
    return SimpleNamespace(
        __version__="2.13.0" if new else "2.0.1",
        __file__="/fake/torch/__init__.py",
        _C=c_api,
        cuda=SimpleNamespace(
            is_initialized=lambda: cuda,
            caching_allocator_alloc=caching_allocator_alloc,
            caching_allocator_delete=alloc.free,
            memory=memory,
        ),
    )


class Job:
    """A recorder over the fake torch, a controller, and the messages it posted."""

    def __init__(self, torch: Any, device: int | None = 0) -> None:
        self.recorder = Recorder()
        self.recorder.torch = torch
        self.recorder.device = device
        self.recorder.gpu_timing = False
        self.posted: list[tuple[int | None, dict[str, Any]]] = []
        self.capture = CaptureController(self.recorder, lambda *a: None)
        self.ctl = MemorySnapshotController(
            self.recorder,
            lambda vid, obj: self.posted.append((vid, obj)),
            capture_busy=lambda: self.capture.armed is not None or self.capture.state is not None,
        )
        self.kept: list[int] = []
        self.recorder.boundary()  # training has started

    def step(self, alloc: FakeAllocator) -> None:
        act = alloc.alloc(8 * MIB)
        self.kept.append(alloc.alloc(MIB))  # LEAK_LINE: a tensor kept every step
        alloc.free(act)
        self.recorder.boundary()

    def result(self, timeout: float = WAIT_S) -> MemorySnapshotResult:
        deadline = time.monotonic() + timeout
        while not self._done() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert self._done(), f"the worker did not send a result: {self.posted}"
        return MemorySnapshotResult.from_wire(self.posted[-1][1])

    def _done(self) -> bool:
        return bool(self.posted) and self.posted[-1][1]["type"] == messages.MEMSNAP_RESULT


LEAK_LINE = Job.step.__code__.co_firstlineno + 2


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path


def test_snapshot_of_n_steps_names_the_leak_and_writes_a_private_file(cache: Path) -> None:
    alloc = FakeAllocator()
    job = Job(fake_torch(alloc))
    job.step(alloc)
    armed = job.ctl.request(7, MemorySnapshotRequest(id="s1", steps=4, max_entries=5000))
    assert (armed.state, armed.id, armed.steps) == (ms.ARMED, "s1", 4)
    assert not alloc.on  # nothing happens until the next step boundary
    for _ in range(8):
        job.step(alloc)
    result = job.result()
    # history on at one boundary, off at the one four steps later, python stacks only
    assert [c[0] for c in alloc.calls] == ["all", None] and not alloc.on
    assert alloc.calls[0][1] == {"context": "alloc", "stacks": "python", "max_entries": 5000}
    states = [obj.get("state") for _, obj in job.posted[:-1]]
    assert states == [ms.RECORDING, ms.PROCESSING]
    assert all(vid == 7 for vid, _ in job.posted)
    assert (result.id, result.steps, result.device, result.pid) == ("s1", 4, 0, os.getpid())
    assert result.last_step is not None and result.first_step is not None
    assert result.last_step - result.first_step + 1 == 4
    assert result.boundaries == 5 and result.growth_checked and not result.truncated
    # the leak, by file and line; the activations freed each step are not growing
    assert len(result.growing) == 1
    site = result.growing[0].site
    assert site is not None and (site.file, site.line) == (__file__, LEAK_LINE)
    assert result.growing[0].live_bytes == (MIB, 2 * MIB, 3 * MIB, 4 * MIB)
    assert {s.site.line for s in result.sites if s.site} == {LEAK_LINE, LEAK_LINE - 1}
    assert result.stop_ms is not None and result.summary_ms is not None
    # torch's snapshot file, private, in a private directory
    assert result.snapshot_path is not None and result.snapshot_error is None
    path = Path(result.snapshot_path)
    assert path.parent == cache / "gputui" / "memory"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert result.snapshot_bytes == path.stat().st_size
    # (the test reads the file to check its format; gputui itself never does)
    saved = pickle.loads(path.read_bytes())
    assert set(saved) == {"segments", "device_traces"} and saved["device_traces"][0]
    # the recorder is free again, and the steps under history are flagged
    assert job.recorder.on_boundary is None and job.ctl.last_result is not None
    flags = [unpack(raw).flags for raw in job.recorder.out]
    assert sum(1 for f in flags if f & FLAG_PROFILED) == 4


def test_refusals_name_the_reason(cache: Path) -> None:
    alloc = FakeAllocator()
    req = MemorySnapshotRequest(id="x", steps=3)
    cpu = Job(fake_torch(alloc, cuda=False), device=None).ctl.request(1, req)
    assert cpu.state == ms.UNSUPPORTED and cpu.reason == NO_CUDA
    assert "need a CUDA job" in (cpu.reason or "")
    old = Job(fake_torch(alloc, new=False)).ctl.request(1, req)
    assert old.state == ms.UNSUPPORTED and "torch 2.1" in (old.reason or "")
    assert "2.0.1" in (old.reason or "")
    torchless = Job(None).ctl.request(1, req)
    assert torchless.state == ms.UNSUPPORTED
    user = fake_torch(alloc)
    user._C._cuda_isHistoryEnabled = lambda: True
    mine = Job(user).ctl.request(1, req)
    assert mine.state == ms.REFUSED and "its own allocation history" in (mine.reason or "")
    disabled = Job(fake_torch(alloc))
    disabled.recorder.disable()
    assert disabled.ctl.request(1, req).state == ms.REFUSED
    assert alloc.calls == []  # none of them touched the allocator


def test_one_at_a_time_and_never_with_a_capture(cache: Path) -> None:
    alloc = FakeAllocator()
    job = Job(fake_torch(alloc))
    assert job.ctl.request(1, MemorySnapshotRequest(id="a", steps=3)).state == ms.ARMED
    again = job.ctl.request(2, MemorySnapshotRequest(id="b", steps=3))
    assert again.state == ms.BUSY and "memory snapshot" in (again.reason or "")
    # a profiler capture waits for the step boundary the snapshot holds
    cap = job.capture.request(2, CaptureRequest(id="c", steps=2))
    assert cap.state == messages.CAPTURE_BUSY and "memory snapshot" in (cap.reason or "")
    # ... and the other way round
    other = Job(fake_torch(FakeAllocator()))
    other.capture.armed = CaptureRequest(id="c")
    busy = other.ctl.request(1, MemorySnapshotRequest(id="d", steps=3))
    assert busy.state == ms.BUSY and "capture" in (busy.reason or "")


def test_a_failing_history_call_fails_the_snapshot_not_the_job(cache: Path) -> None:
    alloc = FakeAllocator()
    alloc.fail_on = "record"
    job = Job(fake_torch(alloc))
    job.ctl.request(3, MemorySnapshotRequest(id="f", steps=3))
    job.step(alloc)
    assert job.posted[-1][1]["state"] == ms.FAILED
    assert "no history for you" in job.posted[-1][1]["reason"]
    assert job.ctl.state is None and job.recorder.on_boundary is None
    assert job.recorder.enabled  # training goes on, recorded as before
    job.step(alloc)
    assert job.recorder.index >= 2


def test_a_file_that_cannot_be_written_still_sends_the_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # not a directory
    alloc = FakeAllocator()
    job = Job(fake_torch(alloc))
    job.ctl.request(None, MemorySnapshotRequest(id="w", steps=3))
    for _ in range(5):
        job.step(alloc)
    result = job.result()
    assert result.snapshot_path is None and result.snapshot_error
    assert result.growing and result.error is None


def test_the_viewer_leaving_does_not_stop_the_snapshot(cache: Path) -> None:
    alloc = FakeAllocator()
    job = Job(fake_torch(alloc))
    job.ctl.request(5, MemorySnapshotRequest(id="v", steps=3))
    job.step(alloc)
    job.ctl.viewer_gone(5)
    for _ in range(4):
        job.step(alloc)
    job.result()
    assert job.posted[-1][0] is None  # the result goes to every subscribed viewer


def test_stop_turns_a_running_history_off(cache: Path) -> None:
    alloc = FakeAllocator()
    job = Job(fake_torch(alloc))
    job.ctl.request(1, MemorySnapshotRequest(id="u", steps=50))
    job.step(alloc)
    assert alloc.on and job.ctl.state == ms.RECORDING
    job.ctl.stop()  # the hook is uninstalled mid-window
    assert not alloc.on and job.ctl.state is None and job.recorder.on_boundary is None
