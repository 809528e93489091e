"""Step statistics from hook step records (pure functions, no I/O).

Records are anything with the attributes of
:class:`gputui.protocol.schema.StepRecord` (``wall``, ``phases``, ``gpu``,
``gpu_total``, ``samples``, ``samples_inferred``, ``flags``, ``index``).  Steps
recorded while a profiler capture ran are left out by default: profiling slows a
launch-bound step by 75-95%, which would swamp the percentiles.  So are steps
during which torch.compile compiled (its own phase: seconds per graph).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import Any, Protocol

from gputui.analysis import thresholds
from gputui.protocol.messages import BUILTIN_PHASES, OTHER, StepFlag
from gputui.protocol.value import ValueBase, value_class

PROFILED_FLAG = int(StepFlag.PROFILED)
#: steps torch.compile compiled in, or that captured a CUDA graph: building, not running
COMPILE_FLAG = int(StepFlag.COMPILE | StepFlag.GRAPH_CAPTURE)
#: steps whose time says nothing about the job's pace
_NOT_TIMED = PROFILED_FLAG | COMPILE_FLAG
#: the first steps of a job are warm-up (allocator, cudnn autotune, compilation)
WARMUP_STEPS = 3
#: a step slower than this many times the median is an outlier (checkpoint, eval, GC)
SLOW_FACTOR = thresholds.value("steps.slow_factor")


class StepLike(Protocol):
    @property
    def index(self) -> int: ...
    @property
    def wall(self) -> float: ...
    @property
    def phases(self) -> Mapping[str, float]: ...
    @property
    def gpu(self) -> Mapping[str, float] | None: ...
    @property
    def gpu_total(self) -> float | None: ...
    @property
    def samples(self) -> int | None: ...
    @property
    def samples_inferred(self) -> bool: ...
    @property
    def flags(self) -> int: ...


@value_class
class Dist(ValueBase):
    """Distribution of one quantity over steps (seconds)."""

    name: str
    mean: float
    p50: float
    p90: float
    p99: float
    min: float
    max: float
    total: float
    share: float  # of the summed step time (wall or GPU)


@value_class
class StepStats(ValueBase):
    count: int
    first_index: int | None
    last_index: int | None
    excluded_profiled: int
    wall: Dist | None  # whole-step wall time
    phases: tuple[Dist, ...]  # wall time per phase, display order
    gpu: Dist | None  # whole-step GPU time, when recorded
    gpu_phases: tuple[Dist, ...]
    steps_per_s: float | None
    samples_per_s: float | None
    samples_inferred: bool
    #: steps left out because torch.compile compiled during them (or they
    #: captured a CUDA graph)
    excluded_compile: int = 0
    #: the first steps, left out as warm-up (``ordinary_only``)
    excluded_warmup: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default) of an ascending sequence."""
    if not sorted_values:
        return math.nan
    if len(sorted_values) == 1:
        return float(sorted_values[0])
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac)


def dist(name: str, values: Iterable[float], denominator: float) -> Dist:
    data = sorted(values)
    total = math.fsum(data)
    n = len(data)
    return Dist(
        name=name,
        mean=total / n if n else math.nan,
        p50=percentile(data, 50),
        p90=percentile(data, 90),
        p99=percentile(data, 99),
        min=data[0] if data else math.nan,
        max=data[-1] if data else math.nan,
        total=total,
        share=total / denominator if denominator > 0 else 0.0,
    )


def phase_order(names: Iterable[str]) -> list[str]:
    """Built-in phases first, then user phases alphabetically, ``other`` last."""
    present = set(names)
    ordered = [p for p in BUILTIN_PHASES if p in present]
    ordered += sorted(p for p in present if p not in BUILTIN_PHASES and p != OTHER)
    if OTHER in present:
        ordered.append(OTHER)
    return ordered


def _per_phase(steps: Sequence[StepLike], get: Any, denominator: float) -> tuple[Dist, ...]:
    # One pass over the steps (this runs every second over 1,000 steps).
    values: dict[str, list[float]] = {}
    for s in steps:
        for name, value in get(s).items():
            column = values.get(name)
            if column is None:
                values[name] = [value]
            else:
                column.append(value)
    n = len(steps)
    # A phase absent from a step took 0 s in it: percentiles are over all steps.
    return tuple(
        dist(name, values[name] + [0.0] * (n - len(values[name])), denominator)
        for name in phase_order(values)
    )


def step_stats(
    steps: Sequence[StepLike], exclude_profiled: bool = True, *, ordinary_only: bool = False
) -> StepStats:
    """Statistics over ``steps`` (e.g. the last N records of a stream).
    ``ordinary_only``: the analyzer's window, the first :data:`WARMUP_STEPS`
    left out too (every report's statistics, so that they and the analyzer's
    ledger print the same step)."""
    # Each step left out is counted under one reason, the most telling first:
    # compiling (torch.compile's first steps are warm-up steps too), profiled, warm-up.
    compiling = excluded = warm = 0
    kept: list[StepLike] = []
    for s in steps:
        if exclude_profiled and s.flags & COMPILE_FLAG:
            compiling += 1
        elif exclude_profiled and s.flags & PROFILED_FLAG:
            excluded += 1
        elif ordinary_only and s.index < WARMUP_STEPS:
            warm += 1
        else:
            kept.append(s)
    if not kept:
        return StepStats(
            0, None, None, excluded, None, (), None, (), None, None, False, compiling, warm
        )
    wall_total = math.fsum(s.wall for s in kept)
    wall = dist("step", (s.wall for s in kept), wall_total)
    phases = _per_phase(kept, lambda s: s.phases, wall_total)
    # Every step has its whole-step GPU time; on short steps the hook times GPU
    # phases on a sample of steps only, so phase shares come from those steps.
    timed = [s for s in kept if s.gpu_total is not None]
    phase_timed = [s for s in timed if s.gpu is not None]
    gpu = None
    gpu_phases: tuple[Dist, ...] = ()
    if timed:
        gpu_sum = math.fsum(float(s.gpu_total or 0.0) for s in timed)
        gpu = dist("step", (float(s.gpu_total or 0.0) for s in timed), gpu_sum)
    if phase_timed:
        phase_sum = math.fsum(float(s.gpu_total or 0.0) for s in phase_timed)
        gpu_phases = _per_phase(phase_timed, lambda s: s.gpu or {}, phase_sum)
    with_samples = [s for s in kept if s.samples]
    samples_per_s = None
    if with_samples:
        seconds = math.fsum(s.wall for s in with_samples)
        if seconds > 0:
            samples_per_s = sum(int(s.samples or 0) for s in with_samples) / seconds
    return StepStats(
        count=len(kept),
        first_index=kept[0].index,
        last_index=kept[-1].index,
        excluded_profiled=excluded,
        wall=wall,
        phases=phases,
        gpu=gpu,
        gpu_phases=gpu_phases,
        steps_per_s=len(kept) / wall_total if wall_total > 0 else None,
        samples_per_s=samples_per_s,
        samples_inferred=any(s.samples_inferred for s in with_samples),
        excluded_compile=compiling,
        excluded_warmup=warm,
    )


# -- outliers ------------------------------------------------------------------------------
@value_class
class Outlier(ValueBase):
    index: int
    wall_s: float
    why: str  # "warm-up" or "slow"


def is_warmup(index: int) -> bool:
    return index < WARMUP_STEPS


def is_slow(wall_s: float, p50_s: float | None) -> bool:
    """Slower than :data:`SLOW_FACTOR` times the median step."""
    return p50_s is not None and p50_s > 0 and wall_s > SLOW_FACTOR * p50_s


def outliers(steps: Sequence[StepLike], p50_s: float | None, limit: int = 6) -> tuple[Outlier, ...]:
    """The newest slow steps, newest first; those among the first steps are called
    warm-up.  Profiled and compiling steps are slow by design: they are marked,
    not listed."""
    found: list[Outlier] = []
    for step in reversed(steps):
        if step.flags & _NOT_TIMED or not is_slow(step.wall, p50_s):
            continue
        why = "warm-up" if is_warmup(step.index) else "slow"
        found.append(Outlier(step.index, step.wall, why))
        if len(found) >= limit:
            break
    return tuple(found)
