"""The training-thread recorder with a stand-in for torch.cuda (no GPU needed)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from gputui.hook._recorder import (
    LOG_MAX,
    PHASE_GPU_PERIOD_S,
    SEGMENT,
    Recorder,
    Unpacked,
    replay,
    replay_gpu,
    unpack,
)


class FakeEvent:
    recorded = 0
    #: the stream argument of every record() call (None: record() on its own)
    streams: list[Any] = []

    def __init__(self, enable_timing: bool = False) -> None:
        self.at = 0.0

    def record(self, stream: Any = None) -> None:
        FakeEvent.recorded += 1
        FakeEvent.streams.append(stream)

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.at - self.at) * 1000.0


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


def run_steps(recorder: Recorder, clock: FakeClock, n: int, step_s: float) -> list[Unpacked]:
    recorder.boundary()  # the first boundary starts step 0
    for _ in range(n):
        for phase in ("data", "forward", "backward", "optimizer"):
            recorder.enter(phase)
            clock.t += step_s / 4
            recorder.exit(phase)
        recorder.boundary()
    return [unpack(raw) for raw in recorder.out]


def test_long_steps_time_every_phase_on_the_gpu() -> None:
    recorder, clock = make_recorder()
    steps = run_steps(recorder, clock, 10, step_s=2 * PHASE_GPU_PERIOD_S)
    assert len(steps) == 10
    assert [s.idx for s in steps] == list(range(10))
    # one event per edge: the (shared) start, each enter and exit of four phases,
    # the end
    assert all(s.full and s.events is not None and len(s.events) == 10 for s in steps)
    assert all(s.shared for s in steps)


def test_short_steps_are_gpu_timed_on_a_sample_of_steps() -> None:
    recorder, clock = make_recorder()
    recorded_before = FakeEvent.recorded
    step_s = PHASE_GPU_PERIOD_S / 10
    steps = run_steps(recorder, clock, 100, step_s=step_s)
    timed = [s for s in steps if s.events is not None]
    # about one step in ten is GPU-timed, with an event at each edge; the others
    # are plain: no CUDA event at all, their log handed over as is
    assert 8 <= len(timed) <= 14
    assert all(s.full and len(s.events or ()) == 10 for s in timed)
    assert sum(not s.full for s in steps) >= 80
    assert FakeEvent.recorded - recorded_before <= 14 * 10
    # wall phases are still measured on every step and add up to the step
    open_phases: list[str] = []
    assert [s.idx for s in steps] == list(range(100))
    for s in steps:
        acc = replay(s.start, s.end, s.log, open_phases)
        assert abs(sum(acc.values()) - (s.end - s.start)) < 1e-9
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


def test_replay_gives_time_to_the_innermost_phase() -> None:
    recorder, clock = make_recorder()
    recorder.gpu_timing = False
    recorder.boundary()
    clock.t += 1.0  # other
    recorder.enter("forward")
    clock.t += 2.0  # forward
    recorder.enter("loss")
    clock.t += 0.5  # loss, inside forward
    recorder.exit("loss")
    clock.t += 0.25  # forward again
    recorder.exit("forward")
    recorder.enter("optimizer")  # open across the boundary
    clock.t += 0.125
    recorder.boundary()
    clock.t += 4.0
    recorder.exit("optimizer")
    clock.t += 1.0
    recorder.boundary()
    first, second = [unpack(raw) for raw in recorder.out]
    stack: list[str] = []
    assert replay(first.start, first.end, first.log, stack) == {
        "other": 1.0,
        "forward": 2.25,
        "loss": 0.5,
        "optimizer": 0.125,
    }
    assert stack == ["optimizer"]  # still open when the first step ended
    assert replay(second.start, second.end, second.log, stack) == {
        "optimizer": 4.0,
        "other": 1.0,
    }
    assert stack == []


def test_replay_survives_an_exit_that_was_skipped() -> None:
    stack: list[str] = []
    # enter a, enter b, exit a (b's exit was skipped by an exception), exit c (never entered)
    log = [0, 0.0, 1.0, "a", 2.0, "b", 3.0, "\x00a", 4.0, "\x00c"]
    acc = replay(0.0, 5.0, log, stack)
    assert acc == {"other": 1.0, "a": 1.0, "b": 3.0}
    assert stack == ["b"]


class TimedEvent:
    def __init__(self, at: float) -> None:
        self.at = at

    def elapsed_time(self, end: TimedEvent) -> float:
        return (end.at - self.at) * 1000.0


def test_replay_gpu_follows_the_phases_of_the_edge_log() -> None:
    log = [0, 0.0, 1.0, "forward", 2.0, "\x00forward", 3.0, "optimizer", 4.0, "\x00optimizer"]
    events = [TimedEvent(t) for t in (0.0, 0.5, 3.5, 4.0, 4.25, 6.0)]
    stack: list[str] = []
    times = replay_gpu(log, events, stack)
    assert times == {"other": 0.5 + 0.5 + 1.75, "forward": 3.0, "optimizer": 0.25}
    assert stack == []  # a copy is used: the wall replay still starts from here


def test_a_step_with_thousands_of_edges_is_flushed_in_segments() -> None:
    recorder, clock = make_recorder()
    recorder.gpu_timing = False
    recorder.boundary()
    edges = LOG_MAX  # entries are two per edge: two segments and a rest
    for _ in range(edges // 2):
        recorder.enter("inner")
        clock.t += 0.001
        recorder.exit("inner")
        clock.t += 0.001
    recorder.boundary()
    raws = list(recorder.out)
    assert len(raws) >= 3
    assert all(type(r) is tuple and r[0] == SEGMENT for r in raws[:-1])
    assert all(len(r[1]) <= LOG_MAX + 2 for r in raws[:-1])
    # the segments and the rest add up to the step, every edge counted once
    last = unpack(raws[-1])
    stack: list[str] = []
    acc: dict[str, float] = {}
    since = last.start
    for _, log, _, until in raws[:-1]:
        acc = replay(since, until, log, stack, acc)
        since = until
    acc = replay(since, last.end, last.log, stack, acc)
    assert abs(acc["inner"] - edges // 2 * 0.001) < 1e-9
    assert abs(sum(acc.values()) - (last.end - last.start)) < 1e-9


def test_backward_entry_wakes_the_io_thread_once_a_round_is_due() -> None:
    recorder, clock = make_recorder()
    woken: list[float] = []
    recorder.io_wake = lambda: woken.append(clock.t)
    recorder.boundary()
    recorder.io_due = clock.t + 1.0  # the next round is due in a second
    recorder.enter_wake("backward")
    recorder.exit("backward")
    assert woken == []
    clock.t += 2.0
    recorder.enter_wake("backward")
    recorder.exit("backward")
    recorder.enter_wake("backward")  # once per round: the I/O thread sets the next one
    assert woken == [clock.t]


def test_gpu_replay_of_steps_ended_by_the_optimizer_exit() -> None:
    # exit_boundary records one event for the optimizer's exit and the step's end
    recorder, clock = make_recorder()
    recorder.boundary()
    for _ in range(3):
        for phase in ("data", "forward", "backward"):
            recorder.enter(phase)
            clock.t += PHASE_GPU_PERIOD_S
            recorder.exit(phase)
        recorder.enter("optimizer")
        clock.t += PHASE_GPU_PERIOD_S
        recorder.exit_boundary("optimizer")
    steps = [unpack(raw) for raw in recorder.out]
    assert len(steps) == 3
    for step in steps:
        events = step.events
        assert events is not None
        for k, event in enumerate(events):
            event.at = float(k)  # one second of GPU time between consecutive events
        times = replay_gpu(step.log, events, [])
        assert set(times) >= {"data", "forward", "backward", "optimizer"}
        assert abs(sum(times.values()) - (len(events) - 1)) < 1e-9
