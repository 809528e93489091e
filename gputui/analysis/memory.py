"""Device memory over a job's steps: is the baseline growing? (pure)"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

#: baseline growth this large over the window is flagged (bytes)
GROWTH_FLAG_BYTES = 64 * 2**20
#: ... and only when it is at least this share of the starting baseline
GROWTH_FLAG_SHARE = 0.05
#: fewer samples than this (with a step index) say nothing
MIN_POINTS = 6


class MemoryLike(Protocol):
    @property
    def allocated(self) -> int: ...


@dataclass(frozen=True)
class MemoryGrowth:
    per_step_bytes: float  # growth of the allocated baseline per step
    steps: int  # steps the window spans
    growing: bool  # large enough to be a leak, not noise

    @property
    def total_bytes(self) -> float:
        return self.per_step_bytes * self.steps


def memory_growth(points: Sequence[tuple[MemoryLike, int | None]]) -> MemoryGrowth | None:
    """Growth of the allocated baseline per step over ``(sample, step index when
    it was taken)`` pairs, oldest first; None with too few points.

    Samples land anywhere inside a step (after forward the activations are live,
    after the optimizer they are not), so single samples swing by gigabytes.  The
    baseline is the minimum over the first and over the last third of the window:
    a leak lifts the minimum, the forward/backward swing does not.
    """
    usable = [(s, at) for s, at in points if at is not None]
    if len(usable) < MIN_POINTS:
        return None
    third = len(usable) // 3
    head, tail = usable[:third], usable[-third:]
    base_head = min(s.allocated for s, _ in head)
    base_tail = min(s.allocated for s, _ in tail)
    head_step = head[len(head) // 2][1] or 0
    tail_step = tail[len(tail) // 2][1] or 0
    span = tail_step - head_step
    if span <= 0:
        return None
    grew = base_tail - base_head
    growing = grew > GROWTH_FLAG_BYTES and grew > GROWTH_FLAG_SHARE * max(base_head, 1)
    return MemoryGrowth(grew / span, span, growing)
