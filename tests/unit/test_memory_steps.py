"""Each memory sample carries the step it was taken at, so a one-shot report
sees growth from the history the hook keeps (an older hook's samples still read,
stamped with the newest step as before)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from gputui.analysis.memory import memory_growth
from gputui.hook._memory import MemorySampler
from gputui.protocol.schema import Hello, MemoryBatch, MemorySample, StepBatch, StepRecord
from gputui.session.attach import AttachState
from gputui.session.oneshot import Collected

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
    # an older hook: no step in the samples, the whole batch at the newest step
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
