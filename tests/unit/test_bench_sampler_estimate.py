"""bench/bench_sampler.py's per-tick estimate recovers a known cost a tick from
synthetic step times, and the off blocks' null removes the bias of long steps
catching more ticks."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.helpers.bench_scripts import bench_module

pytest.importorskip("torch")


def _bench() -> Any:
    return bench_module("bench_sampler")


RATE = 100.0


def _block(bench: Any, rng: random.Random, cost_s: float, start: float, on: bool) -> Any:
    """~0.5 s of ~2 ms steps whose length varies (a twentieth of them half
    as long again, a few hiccups); each tick adds ``cost_s`` to its step."""
    ticks = bench.random_ticks(start, start + 1.0, RATE, rng)
    steps = []
    t = start
    for _ in range(250):
        length = 0.002 * rng.lognormvariate(0, 0.1) * (1.5 if rng.random() < 0.05 else 1)
        if rng.random() < 0.003:
            length += 0.05  # a hiccup: cut by the estimate
        hit = sum(1 for x in ticks if t <= x < t + length)
        length += hit * cost_s
        steps.append((t, t + length))
        t += length
    # the off blocks' ticks are drawn by the bench itself, as in a run
    drawn = ticks if on else bench.random_ticks(start, t, RATE, rng)
    return bench.Block(steps, [x for x in drawn if x < t])


def _rounds(bench: Any, cost_s: float, seed: int) -> list[dict[str, list[Any]]]:
    rng = random.Random(seed)
    rounds = []
    for i in range(40):
        rounds.append(
            {
                "O": [_block(bench, rng, 0.0, 10.0 * i, False) for _ in range(2)],
                "S": [_block(bench, rng, cost_s, 10.0 * i + 5, True) for _ in range(2)],
            }
        )
    return rounds


@pytest.mark.parametrize("cost_us", [0.0, 40.0, 120.0])
def test_the_per_tick_estimate_recovers_the_cost(cost_us: float) -> None:
    bench = _bench()
    result = bench.per_tick(_rounds(bench, cost_us / 1e6, 7), "S", draws=200)
    assert result["us_per_tick"] == pytest.approx(cost_us, abs=20.0)
    low, high = result["ci95"]
    expected = cost_us / 1e6 * result["ticks_per_s"]
    assert low - 0.001 <= expected <= high + 0.001
    assert result["cut_per_1000"] > 0  # the hiccups were left out


def test_without_the_null_long_steps_look_like_a_cost() -> None:
    bench = _bench()
    result = bench.per_tick(_rounds(bench, 0.0, 3), "S", draws=50)
    assert result["null_us"] > 20.0  # the bias the off blocks measure
    assert abs(result["us_per_tick"]) < 20.0


def test_ticks_fall_in_the_step_they_lie_in() -> None:
    bench = _bench()
    steps = [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0)]
    assert bench.ticks_per_step(steps, [-1.0, 0.5, 1.0, 1.5, 1.7, 3.5]) == [1, 3, 0]
