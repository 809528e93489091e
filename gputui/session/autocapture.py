"""The viewer's automatic capture: a job attached to with no capture of the last
ten minutes is profiled once, with FLOPs and shapes, as soon as it is steady
(:mod:`gputui.analysis.auto_capture` says when), so that the kernel-level
findings and the MFU come without a keypress.

:class:`AutoCapture` is one viewer's (the attach screen's, or the rank view's
for every rank at once): fed the session's snapshots, it says when to ask the
hook (:meth:`AutoCapture.due`), follows the capture it asked for to its result,
holds a user's capture (key ``p``) asked for meanwhile until then, and says
what it is doing in one line, with the capture's cost once measured.
``attach --once`` follows the same rules in a straight line
(:func:`capture_once`, :func:`wait_turn`).

The capture runs through the hook's capture controller like any other: the
profiler starts and stops at step boundaries on the training thread, the events
are reduced on the hook's worker thread, and nothing in the job waits for the
viewer.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gputui import fmt
from gputui.analysis.auto_capture import (
    RECENT_CAPTURE_S,
    CaptureCost,
    Steadiness,
    capture_age_s,
    capture_cost,
    recent_capture,
    steadiness,
)
from gputui.client.hook import Disconnected, HookClient
from gputui.protocol import messages
from gputui.protocol.capture import CaptureResult
from gputui.protocol.requests import CaptureRequest
from gputui.protocol.schema import StepRecord
from gputui.session.attach import StateSnapshot
from gputui.session.feeds import CAPTURE_STEPS, CAPTURE_WARMUP_STEPS
from gputui.session.reading import Collected, JobFailed, capture_live

# -- states ------------------------------------------------------------------------------
OFF = "off"  #: turned off (--no-capture, or the key)
WAITING = "waiting"  #: for the history, the job's steady state, or another capture
SKIPPED = "skipped"  #: the job has a capture of the last ten minutes
ASKED = "asked"  #: asked for; its result not here yet
DONE = "done"  #: its result arrived
FAILED = "failed"  #: refused, failed, or the job went away or stopped stepping
REPLACED = "replaced"  #: the user's own capture came first (p, --capture N)

#: the key that turns the automatic capture off and on (the attach screen, the rank view)
KEY = "a"


def auto_request(capture_id: str, start_step: int | None = None) -> CaptureRequest:
    """The automatic capture's request: the screen's capture (5 steps after one
    warm-up step) with FLOPs and shapes, marked automatic."""
    return CaptureRequest(
        id=capture_id,
        steps=CAPTURE_STEPS,
        warmup=CAPTURE_WARMUP_STEPS,
        shapes=True,
        flops=True,
        start_step=start_step,
        auto=True,
    )


def auto_id(serial: int) -> str:
    return f"auto-{os.getpid()}-{serial}"


class _Captured(Protocol):
    """A rank's record of the job: the attach model's snapshot, a one-shot read."""

    @property
    def steps(self) -> Sequence[StepRecord]: ...
    @property
    def capture(self) -> CaptureResult | None: ...


def costliest(
    records: Sequence[_Captured], capture_id: str | None
) -> tuple[CaptureCost | None, CaptureResult | None]:
    """Capture ``capture_id``'s cost on the rank it cost most (the one rank of
    one job), and that rank's result; (None, None) without a result."""
    best: tuple[CaptureCost | None, CaptureResult | None] = (None, None)
    for record in records:
        result = record.capture
        if result is None or result.id != capture_id:
            continue
        cost = capture_cost(record.steps, result)
        if best[1] is None or (
            cost is not None and (best[0] is None or cost.extra_s > best[0].extra_s)
        ):
            best = (cost, result)
    return best


def kind_of(result: CaptureResult | None, automatic: bool) -> str:
    """How a line names a capture: ``automatic capture with FLOPs``, ``this
    capture``; a hook that predates FLOPs captures without them, said so."""
    if not automatic:
        return "this capture"
    flops = result is not None and result.options.flops
    return "automatic capture with FLOPs" if flops else "automatic capture (no FLOPs)"


def cost_parts(cost: CaptureCost | None, stop_ms: float | None = None) -> list[str]:
    """What a capture cost the job, in a few parts, most telling first: the
    time it took from the job (in its ordinary steps), the profiled steps'
    slowdown, the profiler's stop, the steps it was measured over."""
    if cost is None:
        parts = ["cost not measured (its steps are not in the history)"]
        if stop_ms is not None:
            parts.append(f"profiler stop {fmt.ms(stop_ms / 1000.0)}")
        return parts
    first = f"cost the job {fmt.ms(cost.extra_s)}"
    if cost.extra_steps is not None:
        first += f" ({cost.extra_steps:.1f} steps' time)"
    parts = [first + ("" if cost.complete else ", still measuring")]
    if cost.slowdown is not None:
        parts.append(f"profiled steps x{cost.slowdown:.2f}")
    if cost.stop_s is not None:
        parts.append(f"profiler stop {fmt.ms(cost.stop_s)}")
    else:
        parts.append("profiler stop unavailable (an older hook)")
    parts.append(f"over {cost.profiled_steps + cost.after_steps} steps")
    return parts


def cost_text(cost: CaptureCost | None, stop_ms: float | None = None) -> str:
    """:func:`cost_parts` in one sentence."""
    return ", ".join(cost_parts(cost, stop_ms))


def _recent_text(capture: CaptureResult | None, now_s: float) -> str:
    # the capture's time of day, not its age: the line stays true as it stays up
    at = capture_age_s(capture, now_s)
    when = "at an unknown time" if at is None else f"at {fmt.clock(now_s - at)}"
    return f"not needed: the job was captured {when} (within {RECENT_CAPTURE_S / 60:g} minutes)"


@dataclass(frozen=True)
class AutoLine:
    """What the screen says about the automatic capture: its state, one line,
    and the measured cost once known."""

    state: str
    text: str
    cost: CaptureCost | None = None
    #: the user's capture waits for the automatic one
    user_waits: bool = False
    #: the automatic capture's id once asked for (a hook that predates the
    #: ``auto`` flag sends its result without it: the id says it is this one)
    capture_id: str | None = None
    #: more about it (why the job counts as steady, or not yet), when there is room
    detail: str = ""


class AutoCapture:
    """One viewer's automatic capture, over one job's ranks (one, for the
    attach screen).  Methods take the ranks' snapshots; a lock makes them safe
    from the UI thread and the worker that sends the requests."""

    def __init__(self, enabled: bool = True) -> None:
        self._lock = threading.Lock()
        self.state = WAITING if enabled else OFF
        self.capture_id: str | None = None
        self.reason = "waiting for the job's history"
        #: more about the reason (the steadiness's): shown when there is room
        self.detail = ""
        self.steady: Steadiness | None = None
        #: who asked for the capture that waits (a screen's name), None: nobody
        self.waiting_user: str | None = None
        self._serial = 0

    @property
    def user_waits(self) -> bool:
        return self.waiting_user is not None

    # -- the user's keys --------------------------------------------------------------
    def toggle(self) -> str:
        """Turn it off, or on again (when it has not run yet); returns what the
        screen tells the user."""
        with self._lock:
            if self.state == OFF:
                self.state = WAITING
                self.reason = "waiting for the job's steady state"
                return "automatic capture on: one capture with FLOPs once the job is steady"
            if self.state == WAITING:
                self.state = OFF
                return f"automatic capture off ({KEY} turns it on again)"
            if self.state == ASKED:
                return "the automatic capture is under way: it ends after its steps"
            return f"the automatic capture is over ({self.state}): nothing to turn off"

    def user_capture(self, who: str = "") -> bool:
        """The user pressed ``p`` on screen ``who``: True when that capture must
        wait for the automatic one (that screen sends it when
        :meth:`take_user_turn` says); False when it goes now (an automatic
        capture not asked for yet is then replaced by it: it carries FLOPs too)."""
        with self._lock:
            if self.state == ASKED:
                self.waiting_user = who
                return True
            if self.state == WAITING:
                self.state = REPLACED
                self.reason = "your capture (p) came first"
            return False

    def take_user_turn(self, who: str = "") -> bool:
        """Screen ``who``'s capture waited, and the automatic one has ended: True
        once."""
        with self._lock:
            if self.waiting_user == who and self.state not in (ASKED, WAITING):
                self.waiting_user = None
                return True
            return False

    def forget_user(self, who: str) -> None:
        """Screen ``who`` closed: its waiting capture is dropped."""
        with self._lock:
            if self.waiting_user == who:
                self.waiting_user = None

    # -- the session ---------------------------------------------------------------------
    def due(self, snaps: Sequence[StateSnapshot], now_s: float) -> str | None:
        """The capture id to ask every rank of ``snaps`` for now, else None
        (also follows the capture asked for to its result).  The caller sends
        it, off the UI thread, and calls :meth:`failed` if it cannot."""
        with self._lock:
            if self.state == ASKED:
                self._follow(snaps)
                return None
            if self.state != WAITING:
                return None
            self.detail = ""
            live = [s for s in snaps if s.hello is not None and s.disconnected is None]
            if not live or not all(s.synced for s in live):
                self.reason = "waiting for the job's history"
                return None
            recent = next((s.capture for s in live if recent_capture(s.capture, now_s)), None)
            if recent is not None:
                self.state = SKIPPED
                self.reason = _recent_text(recent, now_s)
                return None
            if any(_under_way(s) for s in live):
                self.reason = "waiting: another capture is under way"
                return None
            judged = [steadiness(s.steps, now_s) for s in live]
            self.steady = min(judged, key=lambda j: (j.steady, j.run_steps))
            if not self.steady.steady:
                self.reason = "waiting for the job's steady state"
                self.detail = self.steady.reason
                return None
            self._serial += 1
            self.capture_id = auto_id(self._serial)
            self.state = ASKED
            self.reason = f"capturing {CAPTURE_STEPS} steps with FLOPs"
            self.detail = self.steady.reason
            return self.capture_id

    def failed(self, why: str) -> None:
        """The request could not be sent."""
        with self._lock:
            if self.state == ASKED:
                self.state = FAILED
                self.reason = f"not taken: {why}"

    def _follow(self, snaps: Sequence[StateSnapshot]) -> None:
        cid = self.capture_id
        pending = 0
        for snap in snaps:
            result, status = snap.capture, snap.capture_status
            if result is not None and result.id == cid:
                if result.error:
                    self.state = FAILED
                    self.reason = f"failed: {fmt.clean(result.error)}"
                    return
                continue
            if status is not None and status.id == cid and status.ended:
                if status.state == messages.CAPTURE_BUSY:
                    # another viewer's capture came first: it will be the recent one
                    self.state = WAITING
                    self.reason = "waiting: another capture is under way"
                    return
                self.state = FAILED
                self.reason = f"{status.state}: {fmt.clean(status.reason or 'no reason given')}"
                return
            if snap.disconnected is not None:
                self.state = FAILED
                self.reason = "the job disconnected before it ended"
                return
            pending += 1
        if not pending:
            self.state = DONE

    def line(self, snaps: Sequence[StateSnapshot]) -> AutoLine:
        """The screen's line: what it does or did, and what it cost."""
        with self._lock:
            state, reason, cid, waits = self.state, self.reason, self.capture_id, self.user_waits
            detail = self.detail if state in (WAITING, ASKED) else ""
        if state == OFF:
            return AutoLine(state, f"automatic capture off ({KEY}: on)", capture_id=cid)
        if state == DONE:
            cost, result = costliest(snaps, cid)
            stop = None if result is None else result.stop_ms
            text = f"{kind_of(result, True)}: " + cost_text(cost, stop)
            if waits:
                text += "; your capture (p) goes next"
            return AutoLine(state, text, cost, waits, cid)
        if state == ASKED:
            wait = "; your capture (p) waits for it, then runs" if waits else ""
            text = f"automatic capture: {reason}{wait}"
            return AutoLine(state, text, None, waits, cid, detail)
        if state == WAITING:
            text = f"automatic capture: {reason} ({KEY}: off)"
            return AutoLine(state, text, capture_id=cid, detail=detail)
        return AutoLine(state, f"automatic capture: {reason}", capture_id=cid)


def _under_way(snap: StateSnapshot) -> bool:
    """A capture (anyone's, as the hook's status says, or this viewer's own) is
    armed or running."""
    status = snap.status
    info = None if status is None else status.capture
    return bool(snap.capture_wanted) or (info is not None and info.state is not None)


# -- attach --once: the same rules in a straight line ------------------------------------------
#: how long a one-shot report waits, after the result, for the steps that say
#: what the capture cost (the steps while the hook processed it)
COST_WAIT_S = 30.0
#: a one-shot capture's wait for its result: this long, plus CAPTURE_WAIT_STEPS
#: of the job's median steps
CAPTURE_WAIT_S = 60.0
CAPTURE_WAIT_STEPS = 20


@dataclass(frozen=True)
class AutoOutcome:
    """What ``attach --once``'s automatic capture did: its state, why, and what
    it cost the job (on the rank it cost most, for a job's ranks)."""

    state: str
    reason: str
    capture_id: str | None = None
    cost: CaptureCost | None = None
    stop_ms: float | None = None
    #: the capture carries FLOPs (False from a hook that predates them)
    flops: bool = True

    @property
    def text(self) -> str:
        """The report's line."""
        if self.state == DONE:
            kind = "automatic capture with FLOPs" if self.flops else "automatic capture (no FLOPs)"
            return f"{kind} ({self.reason}): " + cost_text(self.cost, self.stop_ms)
        return f"automatic capture: {self.reason}"

    def to_json(self) -> dict[str, Any]:
        """``auto_capture`` in ``attach --once --json`` (docs/json.md)."""
        cost = self.cost
        return {
            "state": self.state,
            "reason": self.reason,
            "id": self.capture_id,
            "cost": None if cost is None else cost_json(cost),
        }


def cost_json(cost: CaptureCost) -> dict[str, Any]:
    """A capture's cost as ``--json`` prints it (milliseconds)."""

    def ms(seconds: float | None) -> float | None:
        return None if seconds is None else round(seconds * 1000.0, 3)

    return {
        "ordinary_ms": ms(cost.ordinary_s),
        "profiled_steps": cost.profiled_steps,
        "profiled_mean_ms": ms(cost.profiled_mean_s),
        "slowdown": None if cost.slowdown is None else round(cost.slowdown, 4),
        "after_steps": cost.after_steps,
        "extra_ms": ms(cost.extra_s),
        "extra_steps": None if cost.extra_steps is None else round(cost.extra_steps, 3),
        "stop_ms": ms(cost.stop_s),
        "ready_after_ms": ms(cost.ready_after_s),
        "complete": cost.complete,
    }


def _say(quiet: bool, line: str) -> None:
    if not quiet:
        print(line, file=sys.stderr)


def read_until(
    client: HookClient, got: Collected, until: Callable[[], bool], deadline: float
) -> bool:
    """Read the job's events into ``got`` until ``until()`` (True) or the
    deadline or the job's going away (False, unless ``until()`` then holds)."""
    while not until():
        remaining = deadline - time.monotonic()
        event = client.get(timeout=min(remaining, 1.0)) if remaining > 0 else None
        if event is None:
            if remaining <= 0:
                return False
            continue  # no event this second: look at the condition again (a clock)
        got.add(event)
        if isinstance(event, Disconnected):
            return until()
    return True


def wait_turn(
    client: HookClient, got: Collected, deadline: float, quiet: bool
) -> AutoOutcome | None:
    """Wait until the job may be captured: None once it is steady; else an
    outcome that says why not: a capture of the last ten minutes (one under way
    counts once it ends), a job that has stopped stepping, exited, or was not
    steady by the deadline."""
    info = None if got.status is None else got.status.capture
    if info is not None and info.state is not None:
        _say(quiet, "automatic capture: another capture is under way; waiting for its result")
        until = min(deadline, time.monotonic() + capture_wait_s(got, deadline))
        read_until(client, got, lambda: got.capture is not None and not got.capture.replay, until)
    if recent_capture(got.capture, time.time()):
        return AutoOutcome(SKIPPED, _recent_text(got.capture, time.time()))
    judged = steadiness(got.steps, time.time())
    if not judged.steady and not judged.stalled:
        _say(quiet, f"automatic capture: waiting for the job's steady state ({judged.reason})")

        def settled() -> bool:
            now = steadiness(got.steps, time.time())
            return now.steady or now.stalled

        read_until(client, got, settled, deadline)
        judged = steadiness(got.steps, time.time())
    if judged.steady:
        return None
    if got.disconnected is not None:
        return AutoOutcome(FAILED, f"not taken: the job exited ({judged.reason})")
    if judged.stalled:
        return AutoOutcome(FAILED, f"not taken: {judged.reason}")
    return AutoOutcome(FAILED, f"not taken: not steady by the deadline ({judged.reason})")


def stall_reason(got: Collected) -> str | None:
    """Why the job counts as having stopped stepping (:func:`steadiness`' stall),
    or None while it steps: an automatic capture armed for a step it does not
    reach is given up at once."""
    judged = steadiness(got.steps, time.time())
    return judged.reason if judged.stalled else None


def capture_wait_s(got: Collected, deadline: float) -> float:
    """How long a one-shot automatic capture waits for its result: a job that
    stops stepping meanwhile does not hold the report for ``--timeout``."""
    walls = sorted(s.wall for s in got.steps[-50:])
    typical = walls[len(walls) // 2] if walls else 1.0
    return max(1.0, min(deadline - time.monotonic(), CAPTURE_WAIT_S + CAPTURE_WAIT_STEPS * typical))


def settle_cost(client: HookClient, got: Collected, capture_id: str, deadline: float) -> None:
    """Read on until the steps that say what capture ``capture_id`` cost have
    arrived (at most COST_WAIT_S)."""

    def known() -> bool:
        result = got.capture
        if result is None or result.id != capture_id:
            return True
        cost = capture_cost(got.steps, result)
        return cost is None or cost.complete

    read_until(client, got, known, min(deadline, time.monotonic() + COST_WAIT_S))


def capture_once(client: HookClient, got: Collected, timeout_s: float, quiet: bool) -> AutoOutcome:
    """``attach --once``'s automatic capture of one job: unless the job was
    captured in the last ten minutes, wait for its steady state, capture 5 steps
    with FLOPs and shapes, and measure what it cost.  Never raises for the
    capture: a refusal or a failure is the outcome's."""
    deadline = time.monotonic() + timeout_s
    waited = wait_turn(client, got, deadline, quiet)
    if waited is not None:
        return waited
    why = steadiness(got.steps).reason
    cid = auto_id(1)
    _say(quiet, f"automatic capture: {CAPTURE_STEPS} steps with FLOPs ({why})")
    try:
        wait = capture_wait_s(got, deadline)
        capture_live(client, got, auto_request(cid), wait, quiet, lambda: stall_reason(got))
    except JobFailed as exc:
        return AutoOutcome(FAILED, fmt.clean(str(exc).removeprefix("gputui attach: ")), cid)
    settle_cost(client, got, cid, deadline)
    return outcome_of([got], cid, why)


def outcome_of(collected: Sequence[_Captured], capture_id: str, why: str) -> AutoOutcome:
    """The outcome of capture ``capture_id`` over one job's ranks."""
    cost, result = costliest(collected, capture_id)
    if result is None:
        return AutoOutcome(FAILED, "no result arrived", capture_id)
    return AutoOutcome(DONE, why, capture_id, cost, result.stop_ms, result.options.flops)
