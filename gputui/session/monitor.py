"""The monitor's session, headless: what the monitor knows between two snapshots.

A :class:`MonitorSession` owns the source, the poller that calls it (and with it
the interval), the bounded history, the recent window and the findings' cadence,
the replay's progress, the measured ceilings of this machine's GPUs and the
poller's last failure.  The Textual app only draws it: the poller's thread makes
a :class:`Reading` of each snapshot (:meth:`MonitorSession.reading`) and hands it
to the app's ``on_reading``; the app's loop gives it back to :meth:`take` and
redraws.  Nothing here imports Textual: a test drives a session with
:meth:`advance`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gputui.analysis.finding import FINDINGS_WINDOW, Finding
from gputui.analysis.monitor_findings import findings
from gputui.host.in_view import InView
from gputui.snapshot.history import History
from gputui.snapshot.model import Snapshot
from gputui.sources.poller import Poller

if TYPE_CHECKING:  # the live monitor never imports the replay module
    from gputui.ceilings.measured import Ceilings
    from gputui.recording.replay import ReplayProgress
    from gputui.sources.base import SnapshotSource

#: the findings are worked out again when this much data time has passed since
#: they last were (or sooner when the GPUs change): they read a window of
#: FINDINGS_WINDOW samples, so a finding shows at most a sample later, and at a
#: 1 s interval the rules run at every other sample
FINDINGS_EVERY_S = 2.0

#: the interval steps that + and - move through
INTERVALS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


@dataclass
class Current:
    """The newest data, shared by every screen."""

    snapshot: Snapshot | None = None
    #: the time the data describes: a recording's own time, else the sample time
    data_time_s: float = 0.0
    findings: list[Finding] = field(default_factory=list)
    #: the poller's last failure, until a snapshot comes again
    poll_error: str | None = None
    #: where a replay is (position, total, loops); None for live data
    replay: ReplayProgress | None = None
    #: GPU UUID -> the ceilings `gputui bench` measured on it (live data only)
    ceilings: Mapping[str, Ceilings] = field(default_factory=dict)


@dataclass(frozen=True, eq=False, slots=True)
class Reading:
    """One snapshot and what the source said with it, made on the thread that
    sampled it: the time the data describes, the replay's progress, and the
    measured ceilings (None: not looked up, a recording's)."""

    snapshot: Snapshot
    data_time_s: float
    replay: ReplayProgress | None = None
    ceilings: Mapping[str, Ceilings] | None = None


def _dropped(_item: object) -> None:
    pass


class MonitorSession:
    """The monitor over ``source``, polled every ``interval_s`` once started.

    ``on_reading`` and ``on_failure`` receive, on the poller's thread, each
    :class:`Reading` and the text of each failed sample; whoever draws hands them
    back to :meth:`take` and :meth:`take_failure` on its own thread.
    """

    def __init__(
        self,
        source: SnapshotSource,
        interval_s: float = 1.0,
        on_reading: Callable[[Reading], None] = _dropped,
        on_failure: Callable[[str], None] = _dropped,
    ) -> None:
        self.source = source
        self.on_reading = on_reading
        self.on_failure = on_failure
        #: the one holder of the interval (``+``/``-`` set it there)
        self.poller = Poller(source, interval_s, self._polled, self._poll_failed)
        self.history = History()
        self.current = Current()
        self.snapshot_count = 0
        #: the pids on screen (the process table, the detail screen), for the collector
        self.in_view = InView()
        self._view_given = False
        self._recent: deque[Snapshot] = deque(maxlen=FINDINGS_WINDOW)
        #: the data time and the GPUs of the findings' last run
        self._findings_for: tuple[float, tuple[tuple[str, bool], ...]] | None = None
        #: measured ceilings per GPU UUID, and the UUIDs already looked up
        self._ceilings: Mapping[str, Ceilings] = {}
        self._ceilings_tried: set[str] = set()

    # -- the poller's thread ---------------------------------------------------------

    def start(self) -> None:
        self.poller.start()

    def close(self) -> None:
        self.poller.stop()
        self.source.close()

    def _polled(self, snapshot: Snapshot) -> None:
        self.on_reading(self.reading(snapshot))

    def _poll_failed(self, exc: BaseException) -> None:
        self.on_failure(f"sampling failed: {type(exc).__name__}: {exc}")

    def reading(self, snapshot: Snapshot, ceilings: bool = True) -> Reading:
        """``snapshot`` with what the source says of it, asked right after its
        ``sample()`` on the same thread (the recorded time and the progress are
        this very snapshot's).  ``ceilings``: look up the measured ceilings of
        its GPUs (never a recording's)."""
        source = self.source
        if not self._view_given:
            # after the first sample: a source still opening is never waited for
            self._view_given = True
            source.use_view(self.in_view)
        recorded = source.recorded_at_s
        return Reading(
            snapshot,
            snapshot.timestamp_s if recorded is None else recorded,
            source.progress(),
            self._ceilings_of(snapshot) if ceilings and not source.is_recording else None,
        )

    def _ceilings_of(self, snapshot: Snapshot) -> Mapping[str, Ceilings]:
        """The measured ceilings of this machine's GPUs (``gputui bench`` saves
        them per UUID): read on the poller's thread, once per GPU."""
        known = self._ceilings
        new = [d.uuid for d in snapshot.devices if d.uuid and d.uuid not in self._ceilings_tried]
        if new:
            from gputui.ceilings.cache import load_ceilings

            found = dict(known)
            for uuid in new:
                self._ceilings_tried.add(uuid)
                measured = load_ceilings(uuid)
                if measured is not None:
                    found[uuid] = measured
            self._ceilings = known = found
        return known

    # -- the drawing thread ----------------------------------------------------------

    def take(self, reading: Reading) -> bool:
        """Take one reading: history, findings, the newest data; the poller's
        failure is over.  True when a replay has just started over."""
        current = self.current
        if reading.ceilings is not None:
            current.ceilings = reading.ceilings
        snapshot = reading.snapshot
        data_time = reading.data_time_s
        replay, previous = reading.replay, current.replay
        current.replay = replay
        self.snapshot_count += 1
        step = self.source.natural_interval_s or self.poller.interval_s
        # time went back when a replay restarts: History.add breaks the graphs there
        self.history.add(snapshot, data_time, step)
        self._recent.append(snapshot)
        current.snapshot = snapshot
        current.data_time_s = data_time
        gpus = tuple((device.uuid, device.lost) for device in snapshot.devices)
        last = self._findings_for
        if (
            last is None
            or last[1] != gpus
            or not 0 <= data_time - last[0] < FINDINGS_EVERY_S - step / 2
        ):
            current.findings = findings(snapshot, list(self._recent))
            self._findings_for = (data_time, gpus)
        current.poll_error = None
        return replay is not None and previous is not None and replay.loops > previous.loops

    def take_failure(self, error: str) -> None:
        """The poller's last sample failed: said until a snapshot comes."""
        self.current.poll_error = error

    def sample_now(self) -> Reading:
        """A sample of the source now, on this thread (tests, screenshots: with the
        poller not started), with no ceilings looked up."""
        return self.reading(self.source.sample(), ceilings=False)

    def advance(self, count: int = 1) -> None:
        """Sample the source ``count`` times now, on this thread, and take each."""
        for _ in range(count):
            self.take(self.sample_now())

    # -- the user's controls ---------------------------------------------------------

    def toggle_pause(self) -> bool:
        """Pause or resume polling; True when now paused."""
        paused = not self.poller.paused
        self.poller.set_paused(paused)
        return paused

    def change_interval(self, step: int) -> float:
        """The next of :data:`INTERVALS` up (``step`` > 0) or down from the
        poller's interval, set on the poller and returned."""
        current = self.poller.interval_s
        if step > 0:
            bigger = [i for i in INTERVALS if i > current + 1e-9]
            new = bigger[0] if bigger else INTERVALS[-1]
        else:
            smaller = [i for i in INTERVALS if i < current - 1e-9]
            new = smaller[-1] if smaller else INTERVALS[0]
        self.poller.set_interval(new)
        return new
