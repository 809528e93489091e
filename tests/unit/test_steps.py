from __future__ import annotations

import math

import pytest

from gputui.analysis.steps import percentile, phase_order, step_stats
from gputui.protocol.schema import StepRecord


def rec(
    i: int,
    data: float,
    fwd: float,
    other: float = 0.0,
    flags: int = 0,
    gpu: dict[str, float] | None = None,
    samples: int | None = 10,
) -> StepRecord:
    phases = {"data": data, "forward": fwd, "other": other}
    return StepRecord(
        index=i,
        t=float(i),
        wall=data + fwd + other,
        phases=phases,
        gpu=gpu,
        gpu_total=sum(gpu.values()) if gpu else None,
        samples=samples,
        flags=flags,
    )


def test_percentile_matches_numpy_linear() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 50) == 2.5
    assert percentile(values, 90) == pytest.approx(3.7)
    assert percentile([5.0], 99) == 5.0
    assert math.isnan(percentile([], 50))


def test_phase_order() -> None:
    assert phase_order(["other", "zeta", "backward", "data", "alpha"]) == [
        "data",
        "backward",
        "alpha",
        "zeta",
        "other",
    ]


def test_step_stats_shares_and_rates() -> None:
    steps = [rec(i, 0.01, 0.03) for i in range(10)]
    steps.append(rec(10, 0.5, 0.5, flags=1))  # profiled: left out
    stats = step_stats(steps)
    assert stats.count == 10 and stats.excluded_profiled == 1
    assert stats.first_index == 0 and stats.last_index == 9
    assert stats.wall is not None and stats.wall.p50 == pytest.approx(0.04)
    shares = {d.name: d.share for d in stats.phases}
    assert shares == pytest.approx({"data": 0.25, "forward": 0.75, "other": 0.0})
    assert stats.steps_per_s == pytest.approx(25.0)
    assert stats.samples_per_s == pytest.approx(250.0)
    assert stats.gpu is None
    assert step_stats(steps, exclude_profiled=False).count == 11


def test_missing_phase_counts_as_zero_and_gpu() -> None:
    a = rec(0, 0.0, 0.02, gpu={"forward": 0.015, "other": 0.005})
    b = StepRecord(
        index=1, t=1.0, wall=0.02, phases={"backward": 0.02}, gpu={"backward": 0.01}, gpu_total=0.01
    )
    stats = step_stats([a, b])
    back = {d.name: d for d in stats.phases}["backward"]
    assert back.p50 == pytest.approx(0.01) and back.min == 0.0
    assert stats.gpu is not None and stats.gpu.total == pytest.approx(0.03)
    assert {d.name: d.share for d in stats.gpu_phases}["forward"] == pytest.approx(0.5)


def test_empty() -> None:
    stats = step_stats([])
    assert stats.count == 0 and stats.wall is None and stats.steps_per_s is None
