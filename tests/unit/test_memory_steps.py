"""Each memory sample carries the step it was taken at, so a one-shot report
sees growth from the history the hook keeps (an older hook's samples carry none:
their growth is judged over their own times)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest

from gputui.analysis.memory import memory_growth
from gputui.hook._memory import MemorySampler
from gputui.protocol.schema import Hello, MemoryBatch, MemorySample, StepBatch, StepRecord
from gputui.session.attach import AttachState
from gputui.session.reading import Collected

MIB = 1 << 20


def fake_torch(allocated: list[int]) -> Any:
    def stats(_device: int) -> dict[str, Any]:
        value = allocated[0]
        entry = {"all": {"current": value, "peak": value}}
        return {"allocated_bytes": entry, "reserved_bytes": entry, "active_bytes": entry}

    return SimpleNamespace(
        _C=SimpleNamespace(_cuda_memoryStats=stats),
        cuda=SimpleNamespace(is_initialized=lambda: True),
    )


def test_the_hook_stamps_each_sample_with_the_newest_finished_step() -> None:
    sampler = MemorySampler()
    torch = fake_torch([64 * MIB])
    assert sampler.sample(torch, 0, step=41)["step"] == 41  # type: ignore[index]
    assert "step" not in sampler.sample(torch, 0, step=-1)  # type: ignore[operator]
    assert MemorySample.from_wire(sampler.samples[0]).step == 41


def leaking_history(with_steps: bool) -> MemoryBatch:
    """200 samples over steps 0..199, 1 MiB more each step."""
    return MemoryBatch(
        tuple(
            MemorySample(
                t=1_700_000_000.0 + i,
                device=0,
                allocated=(100 + i) * MIB,
                reserved=512 * MIB,
                step=i if with_steps else None,
            )
            for i in range(200)
        )
    )


def steps() -> StepBatch:
    return StepBatch(
        tuple(StepRecord(i, 1_700_000_000.0 + i, 0.1, {"forward": 0.1}) for i in range(200))
    )


def test_attach_once_sees_growth_from_the_kept_history() -> None:
    got = Collected(Hello(pid=7, cuda_in_use=True))
    got.add(steps())
    got.add(leaking_history(with_steps=True))
    found = memory_growth(got.memory)
    assert found is not None and found.growing and found.steps >= 100
    assert abs(found.per_step_bytes - MIB) < 0.05 * MIB
    # an older hook: no step in the samples (judged over their times, with a step rate)
    old = Collected(Hello(pid=7, cuda_in_use=True))
    old.add(steps())
    old.add(leaking_history(with_steps=False))
    assert memory_growth(old.memory) is None


def test_the_attach_screen_uses_each_samples_step() -> None:
    state = AttachState()
    state.add(steps())
    state.add(leaking_history(with_steps=True))
    points = state.snapshot().memory
    assert [at for _s, at in points[:3]] == [0, 1, 2]


def test_gpu_samples_taken_during_a_capture_are_not_the_jobs() -> None:
    """The attach screen's GPU rules read only samples taken while no capture ran."""
    from gputui.protocol.schema import CaptureStatus
    from gputui.session import attach
    from tests.helpers.evidence import gpu_samples

    state = AttachState()
    state.set_hello(Hello(pid=7, cuda_in_use=True))
    busy, spiky = gpu_samples(6, util_gpu_pct=100.0), gpu_samples(4, util_gpu_pct=5.0)
    for d in busy[:3]:
        state.add_gpu(d)
    state.set_capture_wanted("c1")
    for d in spiky:  # the profiler's stop stalls the job: the GPU drops
        state.add_gpu(d)
    state.add(CaptureStatus("failed", "c1", reason="test"))  # over
    for d in busy[3:]:
        state.add_gpu(d)
    snap = state.snapshot()
    assert len(snap.gpu) == 10  # the screen's graph keeps them all
    ev = attach.evidence(snap)
    assert ev.gpu is not None and ev.gpu.samples == 6 and ev.gpu.util_pct == 100.0


def test_memory_taken_during_a_capture_is_not_growth() -> None:
    """Memory that rose only while a long capture ran (its samples are all the
    window holds): no growth finding; the same samples without the capture: one."""
    from gputui.analysis import engine
    from tests.helpers.evidence import capture, evidence, memory, steps

    rising = memory([((2 << 30) + at * (8 << 20), at) for at in range(0, 300, 3)])
    cap = dataclasses.replace(capture(), first_step=0, last_step=299)
    rules = [f.rule for f in engine.analyze(evidence(steps(300), rising, cap))]
    assert "memory.growth" not in rules
    control = [f.rule for f in engine.analyze(evidence(steps(300), rising, None))]
    assert "memory.growth" in control


def test_samples_without_step_numbers_are_judged_over_their_own_times() -> None:
    """An older hook's samples carry no step: a history batch arrives at one
    moment, so the arrival's step says nothing.  Flat memory after a start-up ramp
    is not growth; a real leak over minutes is, per step at the job's rate."""
    from gputui.analysis.memory import MIN_TIME_SPAN_S, memory_growth
    from gputui.protocol.steps import MemorySample

    gib = 2**30

    def sample(t: float, allocated: float) -> tuple[MemorySample, None]:
        return MemorySample(t=t, device=0, allocated=int(allocated), reserved=int(allocated)), None

    ramp_then_flat = [sample(t, min(t, 10) * gib) for t in range(0, 600, 5)]
    flat = memory_growth(ramp_then_flat, steps_per_s=10.0)
    assert flat is not None and not flat.growing and flat.by_time
    leak = [sample(t, 4 * gib + t * 2**20) for t in range(0, 600, 5)]  # 1 MiB/s
    grown = memory_growth(leak, steps_per_s=10.0)
    assert grown is not None and grown.growing and grown.by_time
    assert grown.per_step_bytes == pytest.approx(2**20 / 10, rel=0.05)
    # too short a span, or no step rate: nothing said
    short = [sample(t, 4 * gib + t * 2**20) for t in range(0, int(MIN_TIME_SPAN_S) - 10, 5)]
    assert memory_growth(short, steps_per_s=10.0) is None
    assert memory_growth(leak) is None
