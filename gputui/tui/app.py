"""The monitor app and its factory, shared by the CLI and the tests.

Data flow: the :class:`~gputui.sources.poller.Poller` thread calls
``source.sample()`` and hands a
:class:`SnapshotReady` to the app's loop through an :class:`~gputui.tui.inbox.Inbox`
(not Textual's message queue: a tenth of a millisecond a sample less); a newer
snapshot replaces one still waiting (``can_replace``), so a slow terminal
always draws the newest snapshot, never a backlog.  The app keeps
the bounded history and the findings and tells the visible screen to redraw.
"""

from __future__ import annotations

import gc
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from textual.app import SystemCommand
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.message import Message
from textual.screen import Screen

from gputui import fmt
from gputui.analysis.finding import FINDINGS_WINDOW
from gputui.analysis.monitor_findings import findings
from gputui.host import processes
from gputui.host.in_view import InView
from gputui.snapshot.history import History
from gputui.snapshot.model import ProcessSnapshot, Snapshot
from gputui.sources.base import SnapshotSource
from gputui.sources.poller import Poller
from gputui.tui import ascii, footprint
from gputui.tui.base import BaseApp
from gputui.tui.inbox import Inbox
from gputui.tui.messages import PollFailed, SnapshotReady
from gputui.tui.monitor_host import Current
from gputui.tui.widgets.repaint import draw_now, held_prompts

if TYPE_CHECKING:  # the live monitor never imports the replay module
    from gputui.ceilings.measured import Ceilings
    from gputui.recording.replay import ReplayProgress

#: the interval steps that + and - move through
#: the findings are worked out again when this much data time has passed since
#: they last were (or sooner when the GPUs change): they read a window of
#: FINDINGS_WINDOW samples, so a finding shows at most a sample later, and at a
#: 1 s interval the rules run at every other sample
FINDINGS_EVERY_S = 2.0

INTERVALS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)

AttachFactory = Callable[[int], "Screen[object] | None"]


#: seconds after start-up when the objects made so far leave the cyclic collector
GC_FREEZE_AFTER_S = 5.0


class GputuiApp(BaseApp):
    CSS_PATH = "gputui.tcss"
    TITLE = "gputui"

    # q, Ctrl-C, ? and d: BaseApp
    BINDINGS = [
        Binding("p", "toggle_pause", "Pause"),
        Binding("plus,equals_sign", "change_interval(1)", "Interval+", show=False),
        Binding("minus", "change_interval(-1)", "Interval-", show=False),
        Binding("f", "findings", "Findings"),
    ]

    def __init__(
        self,
        source: SnapshotSource,
        interval_s: float = 1.0,
        readonly: bool = False,
        ascii_only: bool = False,
        banner: str | None = None,
        attach_factory: AttachFactory | None = None,
        autostart: bool = True,
    ) -> None:
        super().__init__()
        self.autostart = autostart
        self.source = source
        self.interval_s = max(0.1, interval_s)
        self.readonly = readonly
        self.ascii_only = ascii_only
        self.banner = banner
        self.attach_factory = attach_factory
        self.history = History()
        self.current = Current()
        self.snapshot_count = 0
        self._recent: deque[Snapshot] = deque(maxlen=FINDINGS_WINDOW)
        #: the data time and the GPUs of the findings' last run
        self._findings_for: tuple[float, tuple[tuple[str, bool], ...]] | None = None
        #: measured ceilings per GPU UUID, and the UUIDs already looked up
        self._ceilings: Mapping[str, Ceilings] = {}
        self._ceilings_tried: set[str] = set()
        #: the pids on screen (the process table, the detail screen), for the collector
        self.in_view = InView()
        self._view_given = False
        #: the collector's housekeeping for thousands of processes (a real screen)
        self._freezer: footprint.SampleFreezer | None = None
        #: what the poller thread hands the loop: snapshots and its failures, in order
        self._inbox: Inbox[Message] = Inbox(
            self._take, self._inbox_failed, lambda new, waiting: new.can_replace(waiting)
        )
        self.poller = Poller(source, self.interval_s, self._on_sample, self._on_sample_error)
        if ascii_only:
            ascii.use_ascii(self)

    def replay_status(self) -> str | None:
        """Where a replay is, for the banner: '1,234/86,400', then '... pass 2'."""
        replay = self.current.replay
        if replay is None:
            return None
        total = "?" if replay.total is None else f"{replay.total:,}"
        text = f"{replay.position:,}/{total}"
        return f"{text}  pass {replay.loops + 1}" if replay.loops else text

    def recording_banner(self) -> str | None:
        """The line every screen shows while the data is not this machine now."""
        if not (self.banner or self.source.is_recording):
            return None
        label = self.source.label
        text = self.banner or f"RECORDING, not this machine: {label}"
        if self.banner and label not in self.banner:
            # "DEMO: recording of ..." under a "DEMO: a recording ..." banner: say
            # each once
            text += f": {label.removeprefix('DEMO: ').removeprefix('recording of ')}"
        return " " + text

    # -- lifecycle ---------------------------------------------------------------

    def get_default_screen(self) -> Screen[object]:
        from gputui.tui.screens.monitor import MonitorScreen

        return MonitorScreen()

    def on_mount(self) -> None:
        self._inbox.open()
        if self.autostart:
            self.poller.start()
        if not self.is_headless:  # tests and screenshots: many apps in one process
            self.start_housekeeping()

    def start_housekeeping(self) -> None:
        """What a monitor that runs for days does to its own memory."""
        self.set_timer(GC_FREEZE_AFTER_S, self._freeze_startup_objects)
        footprint.fewer_young_passes()
        # the start-up's freed memory back to the kernel, then what later frees
        self.set_timer(footprint.FIRST_TRIM_S, lambda: footprint.trim())
        self.set_interval(footprint.TRIM_EVERY_S, lambda: footprint.trim())
        self._freezer = footprint.SampleFreezer()
        if self.source.is_recording:  # the live monitor never loads the replay's decoder
            self._freezer.engage()

    def _freeze_startup_objects(self) -> None:
        # Modules, styles, widgets (and a short recording, decoded by then) live as
        # long as the monitor: taken out of the cyclic collector, they are no longer
        # walked by every full collection (a tenth of the monitor's CPU time with
        # 8 GPUs and 40 processes).  Reference counting still frees them.
        gc.freeze()

    def on_unmount(self) -> None:
        self._inbox.close()
        self.poller.stop()
        self.source.close()

    # -- data in -----------------------------------------------------------------

    def _on_sample(self, snapshot: Snapshot) -> None:
        # Runs on the poller thread, right after sample(): the source's notion of the
        # recorded time belongs to this very snapshot.
        self._give_view()
        recorded_at = self.source.recorded_at_s
        ceilings = None if self.source.is_recording else self._ceilings_of(snapshot)
        self._deliver(SnapshotReady(snapshot, recorded_at, self._replay_progress(), ceilings))
        freezer = self._freezer
        if freezer is not None:
            freezer.after_sample(len(snapshot.processes))

    def _give_view(self) -> None:
        """Tell a live source which processes are on screen (after its first
        sample: a source still opening is not waited for on the UI thread)."""
        if not self._view_given:
            self._view_given = True
            self.source.use_view(self.in_view)

    def _ceilings_of(self, snapshot: Snapshot) -> Mapping[str, Ceilings]:
        """The measured ceilings of this machine's GPUs (``gputui bench`` saves
        them per UUID): read on the poller thread, once per GPU."""
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

    def _replay_progress(self) -> ReplayProgress | None:
        return self.source.progress()

    def _on_sample_error(self, exc: BaseException) -> None:
        self._deliver(PollFailed(f"sampling failed: {type(exc).__name__}: {exc}"))

    def _deliver(self, message: Message) -> None:
        """To the loop through the inbox; as a message while the inbox is not open
        (an app not mounted yet, or one taken down)."""
        if not self._inbox.put(message):
            self.post_message(message)

    def _take(self, message: Message) -> None:
        if isinstance(message, SnapshotReady):
            self.on_snapshot_ready(message)
        elif isinstance(message, PollFailed):
            self.on_poll_failed(message)

    def _inbox_failed(self, error: Exception) -> None:
        # as an exception in a message handler: Textual shows it and ends the app
        handle = getattr(self, "_handle_exception", None)
        if not callable(handle):
            raise error
        handle(error)

    def on_snapshot_ready(self, message: SnapshotReady) -> None:
        if message.ceilings is not None:
            self.current.ceilings = message.ceilings
        self.ingest(message.snapshot, message.recorded_at_s, message.replay)

    def on_poll_failed(self, message: PollFailed) -> None:
        self.current.poll_error = message.error
        self._refresh_screens()

    def ingest(
        self,
        snapshot: Snapshot,
        recorded_at_s: float | None = None,
        replay: ReplayProgress | None = None,
    ) -> None:
        """Take one snapshot: history, findings, then redraw the visible screen."""
        data_time = recorded_at_s if recorded_at_s is not None else snapshot.timestamp_s
        previous = self.current.replay
        self.current.replay = replay
        if replay is not None and previous is not None and replay.loops > previous.loops:
            # The history graphs break here too (time went back: History.add).
            self.notify("replay restarted from the beginning", timeout=3)
        self.snapshot_count += 1
        step = self.source.natural_interval_s or self.poller.interval_s
        self.history.add(snapshot, data_time, step)
        self._recent.append(snapshot)
        self.current.snapshot = snapshot
        self.current.data_time_s = data_time
        gpus = tuple((device.uuid, device.lost) for device in snapshot.devices)
        last = self._findings_for
        if (
            last is None
            or last[1] != gpus
            or not 0 <= data_time - last[0] < FINDINGS_EVERY_S - step / 2
        ):
            self.current.findings = findings(snapshot, list(self._recent))
            self._findings_for = (data_time, gpus)
        self.current.poll_error = None
        self._refresh_screens()

    def advance(self, count: int = 1) -> None:
        """Sample the source ``count`` times now, on this thread (screenshots, tests).

        Use with ``autostart=False`` (or a long interval) so that the poller thread
        does not sample the same source meanwhile.
        """
        for _ in range(count):
            snapshot = self.source.sample()
            self._give_view()
            self.ingest(snapshot, self.source.recorded_at_s, self._replay_progress())

    def _refresh_screens(self) -> None:
        # Only the top screen is drawn; screens below catch up when they resume.
        # A snapshot can arrive while the app shuts down, after its screens are gone.
        if not self.screen_stack:
            return
        screen = self.screen
        refresh = getattr(screen, "refresh_data", None)
        if refresh is None:
            return
        with held_prompts():  # the screen is drawn here, not woken to draw
            try:
                refresh()
            except NoMatches:
                # ... or while the screen is being taken down: its panels are gone,
                # and there is nothing left to draw (never worth a crash of the monitor).
                return
            draw_now(screen)

    # -- actions -----------------------------------------------------------------

    def action_findings(self) -> None:
        from gputui.tui.screens.findings import FindingsScreen

        if not isinstance(self.screen, FindingsScreen):
            self.push_screen(FindingsScreen())

    def action_toggle_pause(self) -> None:
        paused = not self.poller.paused
        self.poller.set_paused(paused)
        self.notify("paused" if paused else "resumed", timeout=1.5)
        self._refresh_screens()

    def action_change_interval(self, step: int) -> None:
        current = self.poller.interval_s
        if step > 0:
            bigger = [i for i in INTERVALS if i > current + 1e-9]
            new = bigger[0] if bigger else INTERVALS[-1]
        else:
            smaller = [i for i in INTERVALS if i < current - 1e-9]
            new = smaller[-1] if smaller else INTERVALS[0]
        self.interval_s = new
        self.poller.set_interval(new)
        self.notify(f"sampling every {new:g} s", timeout=1.5)
        self._refresh_screens()

    # -- processes: signals and attach --------------------------------------------

    def request_signal(self, proc: ProcessSnapshot | None) -> None:
        """Ask for a signal to ``proc`` through the confirmation dialog."""
        if proc is None:
            self.notify("no process selected", severity="warning")
            return
        if self.readonly:
            self.notify(
                "read-only mode (--readonly): sending signals is disabled", severity="warning"
            )
            return
        if self.source.is_recording:
            self.notify(
                f"this is a recording: pid {proc.pid} is not that process on this machine",
                severity="warning",
            )
            return
        if proc.pid_is_host:
            self.notify(
                f"pid {proc.pid} is the host's, not a process of this PID namespace: not signalled",
                severity="warning",
            )
            return
        from gputui.tui.screens.dialogs import SignalDialog

        def done(signum: int | None) -> None:
            if signum is not None:
                self.send_signal(proc, signum)

        self.push_screen(SignalDialog(proc), done)

    def send_signal(self, proc: ProcessSnapshot, signum: int) -> bool:
        outcome = processes.send_signal(proc.pid, signum, proc.start_time_s, proc.user)
        self.notify(fmt.clean(outcome.message), severity=outcome.severity)  # type: ignore[arg-type]
        return outcome.sent

    def request_attach(self, proc: ProcessSnapshot | None) -> None:
        if proc is None:
            self.notify("no process selected", severity="warning")
            return
        if not proc.hooked:
            self.notify(
                f"pid {proc.pid} has no gputui hook (start it with 'gputui run -- ...')",
                severity="warning",
            )
            return
        if self.attach_factory is None and self.source.is_recording:
            # A recording's pids are not this machine's. The demo's hooked job was
            # recorded by its attach screen too: play that session.
            if self.source.label.startswith("DEMO"):
                from gputui.tui.attach import AttachScreen, ReplayFeed

                self.push_screen(AttachScreen(ReplayFeed.demo()))
                return
            self.notify(
                f"pid {proc.pid} is a recorded process, not one on this machine; a session "
                "saved with 'gputui attach PID --record FILE' plays with "
                "'gputui attach --replay FILE'",
                severity="warning",
            )
            return
        if self.attach_factory is None:
            self.notify("attach screen not available", severity="warning")
            return
        screen = self.attach_factory(proc.pid)
        if screen is None:
            self.notify(f"cannot attach to pid {proc.pid}", severity="warning")
            return
        self.push_screen(screen)

    # -- command palette -----------------------------------------------------------

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Pause / resume", "Stop or restart sampling", self.action_toggle_pause)
        yield SystemCommand(
            "Sample slower", "Longer interval", lambda: self.action_change_interval(1)
        )
        yield SystemCommand(
            "Sample faster", "Shorter interval", lambda: self.action_change_interval(-1)
        )
        yield SystemCommand("Findings", "All findings with evidence and fix", self.action_findings)
        yield SystemCommand("Help", "Every key", self.action_help)
        monitor = getattr(screen, "palette_commands", None)
        if monitor is not None:
            yield from monitor()


def make_app(
    source: SnapshotSource,
    interval_s: float = 1.0,
    readonly: bool = False,
    ascii_only: bool = False,
    banner: str | None = None,
    attach_factory: AttachFactory | None = None,
    *,
    autostart: bool = True,
) -> GputuiApp:
    """The monitor app over ``source`` (live, replay or a test's).

    ``attach_factory(pid)`` builds the attach screen for a hooked process; by default
    the live attach screen, and none for a recording (its pids are not this machine's).
    ``autostart=False`` leaves the poller thread off: data then comes only from
    :meth:`GputuiApp.advance` (deterministic tests and screenshots).
    """
    if attach_factory is None and not source.is_recording:
        attach_factory = _live_attach_screen
    return GputuiApp(source, interval_s, readonly, ascii_only, banner, attach_factory, autostart)


def _live_attach_screen(pid: int) -> Screen[object] | None:
    # Imported on first use: the attach screen's modules (~120 ms of imports) are not
    # on the path to the monitor's first frame.
    from gputui.tui.attach import attach_screen_factory

    return attach_screen_factory(pid)
