"""Device memory over a job's steps: is the baseline growing? (pure)"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gputui.protocol.value import ValueBase, value_class

#: baseline growth this large over the window is flagged (bytes)
GROWTH_FLAG_BYTES = 64 * 2**20
#: ... and only when it is at least this share of the starting baseline
GROWTH_FLAG_SHARE = 0.05
#: fewer samples than this (with a step index) say nothing
MIN_POINTS = 6
#: samples without step numbers (an older hook's) are judged over their own
#: times, and only over at least this many seconds: the history a hook sends on
#: subscribe arrives at one moment, and its first minutes are the job's start
MIN_TIME_SPAN_S = 120.0


class MemoryLike(Protocol):
    @property
    def allocated(self) -> int: ...

    @property
    def t(self) -> float: ...


#: a leak grows in both halves of the window: each must show at least this
#: share of the whole growth (a warm-up ramp grows once, then stays flat)
SUSTAINED_SHARE = 0.25


@value_class
class MemoryGrowth(ValueBase):
    per_step_bytes: float  # growth of the allocated baseline per step, over the window
    steps: int  # steps the window spans
    growing: bool  # large and sustained enough to be a leak, not noise or a ramp
    #: growth per step over the window's second half (what the near future holds)
    recent_per_step_bytes: float = 0.0
    #: judged over the samples' times (they carry no step numbers: an older
    #: hook's), per step at the job's step rate
    by_time: bool = False

    @property
    def total_bytes(self) -> float:
        return self.per_step_bytes * self.steps


def memory_growth(
    points: Sequence[tuple[MemoryLike, int | None]], steps_per_s: float | None = None
) -> MemoryGrowth | None:
    """Growth of the allocated baseline per step over ``(sample, step index when
    it was taken)`` pairs, oldest first; None with too few points.

    Samples land anywhere inside a step (after forward the activations are live,
    after the optimizer they are not), so single samples swing by gigabytes.  The
    baseline is the minimum over each third of the window: a leak lifts the
    minimum, the forward/backward swing does not; and a leak lifts it in both
    halves, where the first steps' ramp (optimizer state, allocator caches)
    lifts only the first.

    Samples without a step index (an older hook's) are judged over their own
    times instead, over at least :data:`MIN_TIME_SPAN_S`, and per step at
    ``steps_per_s`` (None without it).
    """
    usable = [(s, float(at)) for s, at in points if at is not None]
    by_time = False
    if len(usable) < MIN_POINTS:
        timed = [(s, float(s.t)) for s, at in points if at is None and s.t > 0]
        if len(timed) < MIN_POINTS or not steps_per_s or steps_per_s <= 0:
            return None
        if timed[-1][1] - timed[0][1] < MIN_TIME_SPAN_S:
            return None
        # the times as steps, at the job's rate
        usable = [(s, t * steps_per_s) for s, t in timed]
        by_time = True
    third = len(usable) // 3
    head, middle, tail = usable[:third], usable[third : len(usable) - third], usable[-third:]
    base_head = min(s.allocated for s, _ in head)
    base_middle = min(s.allocated for s, _ in middle)
    base_tail = min(s.allocated for s, _ in tail)
    head_step = head[len(head) // 2][1]
    middle_step = middle[len(middle) // 2][1]
    tail_step = tail[len(tail) // 2][1]
    span = tail_step - head_step
    if span <= 0:
        return None
    grew = base_tail - base_head
    # A leak keeps growing: the second half grows too, not only the start (the
    # allocator and optimizer state filling up during the first steps).
    sustained = (
        grew > 0
        and base_middle - base_head >= SUSTAINED_SHARE * grew
        and base_tail - base_middle >= SUSTAINED_SHARE * grew
    )
    growing = (
        sustained and grew > GROWTH_FLAG_BYTES and grew > GROWTH_FLAG_SHARE * max(base_head, 1)
    )
    recent_span = tail_step - middle_step
    recent = (base_tail - base_middle) / recent_span if recent_span > 0 else 0.0
    return MemoryGrowth(grew / span, round(span), growing, recent, by_time)
