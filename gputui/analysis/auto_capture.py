"""The arithmetic of a capture nobody asked for: when a job is steady enough to
profile (:func:`steadiness`), whether it was profiled lately
(:func:`recent_capture`), and what a capture cost it (:func:`capture_cost`),
from the step records the hook sends (pure functions, no I/O).

**Steady state.** A capture should see the job as it normally runs, not its
start: the first :data:`~gputui.analysis.steps.WARMUP_STEPS` steps (allocator,
autotuning), torch.compile's compiling steps (flagged by the hook), steps
captured into a CUDA graph, and the steps of an earlier capture or memory
snapshot (flagged profiled) are not that.  The job is steady once

- at least :data:`STEADY_MIN_STEPS` ordinary steps follow the last such step
  (the *run*: its steps all unflagged, all past the warm-up), and
- their times have settled: the newest :data:`STEADY_WINDOW` steps of the run,
  split in an older and a newer half, have medians within
  :data:`STEADY_TOLERANCE` of each other (a job still speeding up or slowing
  down has not settled; a periodic slow step, a checkpoint every 10 steps,
  moves neither median).

A job whose step times never settle (lengths that vary by batch) is taken as
steady once its run holds :data:`UNSETTLED_STEPS` steps: the capture then says
so.  A job that has stopped stepping (its newest step ended more than
:data:`STALLED_MIN_S`, and more than :data:`STALLED_STEPS` of its median steps,
ago) is not steady: a capture would wait for steps that do not come.

**What it cost.** A capture slows the steps it profiles (its warm-up step and
the recorded ones, flagged profiled), the step after them pays torch's
profiler stop (the controller stops it at that step's start), and the steps
that run while the hook's worker thread reduces the events and writes the
trace share the interpreter with it.  :func:`capture_cost` sums, over those
steps, each step's time beyond the median of the ordinary steps before the
capture: the time the capture took from the job, measured, not estimated.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from gputui import fmt
from gputui.analysis.steps import WARMUP_STEPS
from gputui.protocol.capture import CaptureResult
from gputui.protocol.messages import StepFlag
from gputui.protocol.steps import StepRecord

#: ordinary steps after the warm-up, the last compile and the last profiled step
#: before the job counts as steady
STEADY_MIN_STEPS = 6
#: the newest ordinary steps whose halves are compared
STEADY_WINDOW = 20
#: the halves' medians may differ by this share of the larger one
STEADY_TOLERANCE = 0.25
#: ordinary steps after which a job whose times do not settle is captured anyway
UNSETTLED_STEPS = 60
#: the newest steps looked at (a longer run changes nothing)
SCAN_STEPS = 200
#: a job whose newest step ended longer ago than both of these (seconds; its
#: median steps) has stopped stepping
STALLED_MIN_S = 5.0
STALLED_STEPS = 10
#: a capture this recent (seconds) is the job's capture: none is taken
RECENT_CAPTURE_S = 600.0
#: ordinary steps before a capture whose median is its baseline
BASELINE_STEPS = 50

#: steps that do not show the job's ordinary pace
_NOT_ORDINARY = int(StepFlag.PROFILED | StepFlag.COMPILE | StepFlag.GRAPH_CAPTURE)
#: the steps after a capture that it did not cost
_NOT_BESIDE = int(StepFlag.COMPILE | StepFlag.GRAPH_CAPTURE)


@dataclass(frozen=True)
class Steadiness:
    """Whether the job is steady enough to profile, and why (or why not yet)."""

    steady: bool
    #: the step from which its times are ordinary (the run's first); None: no run yet
    since_step: int | None
    #: ordinary steps in the run
    run_steps: int
    #: its times settled (False for a job captured once UNSETTLED_STEPS passed)
    settled: bool
    #: one line: what the job is waiting for, or why it counts as steady
    reason: str
    #: the job has stopped stepping (no step for a while)
    stalled: bool = False


def _median_ms(steps: Sequence[StepRecord]) -> float:
    return statistics.median(s.wall for s in steps) * 1000.0


def steadiness(steps: Sequence[StepRecord], now_s: float | None = None) -> Steadiness:
    """Whether the newest of ``steps`` (oldest first) show a steady job (the
    module's definition); with ``now_s`` (Unix seconds), one that has stopped
    stepping is not."""
    run: list[StepRecord] = []
    blocker: StepRecord | None = None
    for step in reversed(steps):
        if step.flags & _NOT_ORDINARY or step.index < WARMUP_STEPS:
            blocker = step
            break
        run.append(step)
        if len(run) >= SCAN_STEPS:
            break
    run.reverse()
    since = run[0].index if run else None
    if now_s is not None and steps:
        last = steps[-1]
        typical = statistics.median(s.wall for s in run[-STEADY_WINDOW:]) if run else last.wall
        idle = now_s - last.t
        if idle > max(STALLED_MIN_S, STALLED_STEPS * typical):
            reason = f"the job has not finished a step for {fmt.duration(idle)}"
            return Steadiness(False, since, len(run), False, reason, stalled=True)
    if len(run) < STEADY_MIN_STEPS:
        return Steadiness(False, since, len(run), False, _waiting(blocker, len(run)))
    newest = run[-STEADY_WINDOW:]
    half = len(newest) // 2
    older, newer = _median_ms(newest[:half]), _median_ms(newest[half:])
    larger = max(older, newer)
    settled = larger <= 0 or abs(older - newer) <= STEADY_TOLERANCE * larger
    count = f"{len(run)}+" if len(run) >= SCAN_STEPS else str(len(run))
    if settled:
        reason = f"steady: {count} ordinary steps since step {since}, median {newer:.3g} ms"
        return Steadiness(True, since, len(run), True, reason)
    moving = f"median {older:.3g} ms, then {newer:.3g} ms"
    if len(run) >= UNSETTLED_STEPS:
        reason = f"step times have not settled in {count} ordinary steps ({moving})"
        return Steadiness(True, since, len(run), False, reason)
    return Steadiness(False, since, len(run), False, f"step times not settled yet ({moving})")


def _waiting(blocker: StepRecord | None, run: int) -> str:
    need = f"{run} of {STEADY_MIN_STEPS} ordinary steps"
    if blocker is None:
        return f"waiting for steps ({need})"
    if blocker.flags & StepFlag.COMPILE:
        return f"torch.compile compiled at step {blocker.index} ({need} since)"
    if blocker.flags & StepFlag.GRAPH_CAPTURE:
        return f"a CUDA graph was captured at step {blocker.index} ({need} since)"
    if blocker.flags & StepFlag.PROFILED:
        return f"profiled at step {blocker.index} ({need} since)"
    return f"warm-up ({need} after the first {WARMUP_STEPS})"


def capture_age_s(capture: CaptureResult | None, now_s: float) -> float | None:
    """Seconds since ``capture``'s window ended (its start, from a hook that
    does not say when it ended); None without a capture or a time."""
    if capture is None:
        return None
    at = capture.window_end_wall if capture.window_end_wall is not None else capture.started
    return None if at is None else max(0.0, now_s - at)


def recent_capture(capture: CaptureResult | None, now_s: float) -> bool:
    """The job has a capture of the last :data:`RECENT_CAPTURE_S` seconds (one
    whose time is unknown counts as recent: the job is not profiled again on a
    guess)."""
    if capture is None or capture.error:
        return False
    age = capture_age_s(capture, now_s)
    return age is None or age < RECENT_CAPTURE_S


@dataclass(frozen=True)
class CaptureCost:
    """What one capture cost the job, measured on its steps (seconds)."""

    #: median wall time of the ordinary steps before the capture
    ordinary_s: float
    #: profiled steps (warm-up and recorded) and their mean wall time
    profiled_steps: int
    profiled_mean_s: float
    #: steps after the profiled ones until the result was ready (the first pays
    #: the profiler's stop; the others share the interpreter with the worker)
    after_steps: int
    #: every one of those steps' time beyond the ordinary median, summed
    extra_s: float
    #: torch's profiler stop, as the result reports it (None: an older hook)
    stop_s: float | None
    #: from the window's end to the result (None: an older hook)
    ready_after_s: float | None
    #: every step the capture cost has arrived (a step started after the result
    #: was ready); False while the figures may still grow
    complete: bool = True

    @property
    def slowdown(self) -> float | None:
        """The profiled steps' mean over the ordinary median (1.8: 80% slower)."""
        return self.profiled_mean_s / self.ordinary_s if self.ordinary_s > 0 else None

    @property
    def extra_steps(self) -> float | None:
        """The extra time in ordinary steps: the steps the job did not make."""
        return self.extra_s / self.ordinary_s if self.ordinary_s > 0 else None


def capture_cost(steps: Sequence[StepRecord], capture: CaptureResult) -> CaptureCost | None:
    """What ``capture`` cost the job, from its steps (oldest first); None when
    the steps do not hold it (its steps are older than the records kept, or the
    baseline before it is missing)."""
    first, last = capture.first_step, capture.last_step
    if first is None or last is None:
        return None
    end, start = _position(steps, last), _position(steps, first)
    if end is None or start is None:
        return None
    # the profiled steps: the recorded ones and the warm-up flagged before them
    while start > 0 and steps[start - 1].flags & StepFlag.PROFILED:
        start -= 1
    profiled = steps[start : end + 1]
    before = [
        s
        for s in steps[max(0, start - BASELINE_STEPS * 2) : start]
        if not s.flags & _NOT_ORDINARY and s.index >= WARMUP_STEPS
    ][-BASELINE_STEPS:]
    if not before or not profiled:
        return None
    ordinary = statistics.median(s.wall for s in before)
    after, complete = _after(steps, end, capture)
    extra = sum(s.wall - ordinary for s in (*profiled, *after))
    return CaptureCost(
        ordinary_s=ordinary,
        profiled_steps=len(profiled),
        profiled_mean_s=statistics.fmean(s.wall for s in profiled),
        after_steps=len(after),
        extra_s=max(0.0, extra),
        stop_s=None if capture.stop_ms is None else capture.stop_ms / 1000.0,
        ready_after_s=None if capture.ready_after_ms is None else capture.ready_after_ms / 1000.0,
        complete=complete,
    )


def _position(steps: Sequence[StepRecord], index: int) -> int | None:
    """Where step ``index`` is in ``steps`` (in index order), or None."""
    at = bisect.bisect_left(steps, index, key=lambda s: s.index)
    return at if at < len(steps) and steps[at].index == index else None


def _after(
    steps: Sequence[StepRecord], end: int, capture: CaptureResult
) -> tuple[list[StepRecord], bool]:
    """The steps after the profiled ones that the capture still cost: the one
    that paid the profiler's stop, and those that started before the result was
    ready (when the hook says when that was); and whether a step that started
    after it has arrived (the list is then complete)."""
    # (a hook flags the steps run while the capture is processed as profiled:
    # they are the capture's; a compiling or graph-capturing step is not)
    tail = [s for s in steps[end + 1 :] if not s.flags & _NOT_BESIDE]
    if not tail:
        return [], False
    ready = None
    if capture.window_end_wall is not None and capture.ready_after_ms is not None:
        ready = capture.window_end_wall + capture.ready_after_ms / 1000.0
    if ready is None:
        return tail[:1], True
    out = [tail[0]]
    for step in tail[1:]:
        if step.t - step.wall >= ready:
            return out, True
        out.append(step)
    return out, False
