"""The training-thread recorder with a stand-in for torch.cuda (no GPU needed)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from gputui.hook._recorder import PHASE_GPU_PERIOD_S, Recorder


class FakeEvent:
    recorded = 0
    #: the stream argument of every record() call (None: record() on its own)
    streams: list[Any] = []

    def __init__(self, enable_timing: bool = False) -> None:
        self.at = 0.0

    def record(self, stream: Any = None) -> None:
        FakeEvent.recorded += 1
        FakeEvent.streams.append(stream)


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def make_recorder() -> tuple[Recorder, FakeClock]:
    cuda = SimpleNamespace(
        is_initialized=lambda: True,
        current_device=lambda: 0,
        is_current_stream_capturing=lambda: False,
        Event=FakeEvent,
    )
    recorder = Recorder()
    clock = FakeClock()
    recorder.clock = clock
    recorder.torch = SimpleNamespace(cuda=cuda)
    recorder.gpu_timing = True
    return recorder, clock


def run_steps(recorder: Recorder, clock: FakeClock, n: int, step_s: float) -> list[Any]:
    recorder.boundary()  # the first boundary starts step 0
    for _ in range(n):
        for phase in ("data", "forward", "backward", "optimizer"):
            recorder.enter(phase)
            clock.t += step_s / 4
            recorder.exit(phase)
        recorder.boundary()
    return list(recorder.out)


def test_long_steps_time_every_phase_on_the_gpu() -> None:
    recorder, clock = make_recorder()
    steps = run_steps(recorder, clock, 10, step_s=2 * PHASE_GPU_PERIOD_S)
    assert len(steps) == 10
    assert all(raw[10] for raw in steps)
    # one event per edge: the (shared) start, each enter and exit of four phases,
    # the end
    assert all(len(raw[4]) == 10 for raw in steps)


def test_short_steps_are_gpu_timed_on_a_sample_of_steps() -> None:
    recorder, clock = make_recorder()
    recorded_before = FakeEvent.recorded
    step_s = PHASE_GPU_PERIOD_S / 10
    steps = run_steps(recorder, clock, 100, step_s=step_s)
    timed = [raw for raw in steps if raw[10]]
    untimed = [raw for raw in steps if not raw[10]]
    # about one step in ten is GPU-timed, with an event at each edge; the others
    # record no CUDA event at all
    assert 8 <= len(timed) <= 14
    assert all(raw[4] is None for raw in untimed)
    assert all(len(raw[4]) == 10 for raw in timed)
    assert FakeEvent.recorded - recorded_before <= 14 * 10
    # wall phases are still measured on every step and add up to the step
    for raw in steps:
        _index, start, end, acc = raw[:4]
        assert abs(sum(acc.values()) - (end - start)) < 1e-9
        assert set(acc) >= {"data", "forward", "backward", "optimizer"}


class FakeStream:
    built = 0

    def __init__(self, stream_id: int, device_index: int, device_type: int) -> None:
        FakeStream.built += 1
        self.key = (stream_id, device_index, device_type)


def test_events_are_recorded_on_a_kept_stream_object_until_the_stream_changes() -> None:
    recorder, clock = make_recorder()
    current = {"stream": (7, 0, 1)}

    def get_stream(device: int) -> tuple[int, int, int]:
        assert device == 0
        return current["stream"]

    recorder.torch.cuda.Stream = FakeStream
    recorder.torch._C = SimpleNamespace(
        _cuda_getCurrentStream=get_stream, _cuda_getDevice=lambda: 0
    )
    FakeStream.built, FakeEvent.streams = 0, []
    run_steps(recorder, clock, 5, step_s=2 * PHASE_GPU_PERIOD_S)
    assert FakeStream.built == 1
    assert FakeEvent.streams and all(s.key == (7, 0, 1) for s in FakeEvent.streams)
    current["stream"] = (9, 0, 1)  # the job switched streams
    FakeEvent.streams = []
    run_steps(recorder, clock, 2, step_s=2 * PHASE_GPU_PERIOD_S)
    assert FakeStream.built == 2
    assert all(s.key == (9, 0, 1) for s in FakeEvent.streams)


def test_without_torch_private_stream_bindings_events_record_on_their_own() -> None:
    recorder, clock = make_recorder()

    def broken(device: int) -> tuple[int, int, int]:
        raise RuntimeError("changed in a later torch")

    recorder.torch.cuda.Stream = FakeStream
    recorder.torch._C = SimpleNamespace(_cuda_getCurrentStream=broken, _cuda_getDevice=lambda: 0)
    FakeEvent.streams = []
    steps = run_steps(recorder, clock, 3, step_s=2 * PHASE_GPU_PERIOD_S)
    assert len(steps) == 3 and recorder.enabled
    assert FakeEvent.streams and all(s is None for s in FakeEvent.streams)
