"""The training-thread recorder with a stand-in for torch.cuda (no GPU needed)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from gputui.hook._recorder import PHASE_GPU_PERIOD_S, Recorder


class FakeEvent:
    recorded = 0

    def __init__(self, enable_timing: bool = False) -> None:
        self.at = 0.0

    def record(self) -> None:
        FakeEvent.recorded += 1


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
    # one event per phase edge: the shared start plus enter/exit of four phases
    assert all(len(raw[4]) >= 8 for raw in steps)


def test_short_steps_time_phases_on_a_sample_but_every_step_total() -> None:
    recorder, clock = make_recorder()
    step_s = PHASE_GPU_PERIOD_S / 10
    steps = run_steps(recorder, clock, 100, step_s=step_s)
    timed = [raw for raw in steps if raw[10]]
    untimed = [raw for raw in steps if not raw[10]]
    # about one step in ten carries phase edges; every step has start and end events
    assert 8 <= len(timed) <= 14
    assert all(raw[4] is not None and len(raw[4]) == 2 for raw in untimed)
    assert all(len(raw[4]) >= 8 for raw in timed)
    # wall phases are still measured on every step and add up to the step
    for raw in steps:
        _index, start, end, acc = raw[:4]
        assert abs(sum(acc.values()) - (end - start)) < 1e-9
        assert set(acc) >= {"data", "forward", "backward", "optimizer"}
