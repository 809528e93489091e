"""Timing one GPU operation honestly (stdlib only; the clock is injected).

- The device's own clock: :class:`Clock` times a batch of runs between two
  events on the GPU's stream (``CudaEventClock`` in ``probes``), never the host's
  clock around an asynchronous launch.
- Batches: one repetition runs the operation ``inner`` times back to back, with
  ``inner`` chosen from a first timed run so that a repetition lasts about
  ``target_rep_ms``.  A lone 1 ms matrix product between synchronisations never
  heats the GPU to the clocks and power it runs at under sustained load.
- Warm-up: repetitions for ``warmup_s`` seconds (at least one) are thrown away:
  the first ones pay for library initialisation, autotuning, allocation and
  clock ramp-up.
- The median of the repetitions is the result, with the slowest and fastest
  beside it: robust to a stray slow repetition (another process, a clock dip)
  and honest about the spread.
- A budget: repetitions stop at ``reps`` or when ``max_s`` seconds have passed
  (after at least ``min_reps``), so a slow GPU cannot stretch the whole bench.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class MeasureError(Exception):
    """A measurement that cannot be trusted (a non-positive or infinite time)."""


class Clock(Protocol):
    def time_ms(self, run: Callable[[], object], inner: int) -> float:
        """Run ``run`` ``inner`` times back to back; the device time of all of
        them in milliseconds (blocks until it is known)."""
        ...


@dataclass(frozen=True)
class Plan:
    """How long to measure: the same code runs the full and the quick bench."""

    warmup_s: float
    target_rep_ms: float
    reps: int
    min_reps: int
    max_s: float  #: per measurement, warm-up included
    max_inner: int = 100_000


FULL = Plan(warmup_s=0.5, target_rep_ms=50.0, reps=15, min_reps=5, max_s=5.0)
QUICK = Plan(warmup_s=0.1, target_rep_ms=10.0, reps=7, min_reps=3, max_s=1.5)


@dataclass(frozen=True)
class Timing:
    """Repetitions of ``inner`` runs each; times in milliseconds per repetition."""

    samples_ms: tuple[float, ...]
    inner: int
    warmup_reps: int

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def per_run_median_s(self) -> float:
        return self.median_ms / 1000.0 / self.inner

    @property
    def per_run_min_s(self) -> float:
        return min(self.samples_ms) / 1000.0 / self.inner

    @property
    def per_run_max_s(self) -> float:
        return max(self.samples_ms) / 1000.0 / self.inner


def _checked(ms: float) -> float:
    if not isinstance(ms, (int, float)) or not ms > 0 or math.isinf(ms):
        raise MeasureError(f"the device clock gave {ms!r} ms")
    return float(ms)


def measure(
    run: Callable[[], object],
    clock: Clock,
    plan: Plan,
    now: Callable[[], float] = time.perf_counter,
) -> Timing:
    """Warm up, pick the batch size, then time repetitions (see the module doc)."""
    started = now()
    first = _checked(clock.time_ms(run, 1))
    inner = max(1, min(plan.max_inner, math.ceil(plan.target_rep_ms / first)))
    warmup = 0
    while True:
        _checked(clock.time_ms(run, inner))
        warmup += 1
        if now() - started >= plan.warmup_s:
            break
    samples: list[float] = []
    while len(samples) < plan.reps:
        samples.append(_checked(clock.time_ms(run, inner)))
        if len(samples) >= plan.min_reps and now() - started >= plan.max_s:
            break
    return Timing(tuple(samples), inner, warmup)


def rate(work: float, timing: Timing, scale: float) -> tuple[float, float, float]:
    """(median, slowest, fastest) of ``work`` per second per run, divided by
    ``scale`` (1e9 for GB/s, 1e12 for TFLOP/s)."""
    return (
        work / timing.per_run_median_s / scale,
        work / timing.per_run_max_s / scale,
        work / timing.per_run_min_s / scale,
    )


class WallClock:
    """The host's clock around synchronous work: for CPU tests of the probes, and
    nothing else (a GPU launch returns before the work is done)."""

    def __init__(self, sync: Callable[[], object] | None = None) -> None:
        self.sync = sync

    def time_ms(self, run: Callable[[], object], inner: int) -> float:
        start = time.perf_counter()
        for _ in range(inner):
            run()
        if self.sync is not None:
            self.sync()
        return max((time.perf_counter() - start) * 1000.0, 1e-6)
