"""The monitor app and its factory, shared by the CLI and the tests.

Data flow: the session's poller thread calls ``source.sample()``, and the
session makes a :class:`~gputui.session.monitor.Reading` of each snapshot, which
reaches the app's loop through an :class:`~gputui.tui.inbox.Inbox` (not Textual's
message queue: a tenth of a millisecond a sample less); a newer reading
replaces one still waiting, so a slow terminal always draws the newest
snapshot, never a backlog.  The app hands each reading back to the
:class:`~gputui.session.monitor.MonitorSession` (history, findings) and redraws
the visible screen.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable

from textual.app import SystemCommand
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.screen import Screen

from gputui import fmt
from gputui.host import processes
from gputui.session.monitor import MonitorSession, Reading
from gputui.snapshot.model import ProcessSnapshot
from gputui.sources.base import SnapshotSource
from gputui.tui import footprint
from gputui.tui.base import BaseApp
from gputui.tui.inbox import Inbox
from gputui.tui.messages import PollFailed, SnapshotReady
from gputui.tui.widgets.repaint import draw_now, held_prompts

AttachFactory = Callable[[int], "Screen[object] | None"]


#: the banner keeps room for a replay's position up to this many snapshots before
#: they are counted (and up to the count after)
REPLAY_COUNT_ROOM = 9_999

#: seconds after start-up when the objects made so far leave the cyclic collector
GC_FREEZE_AFTER_S = 5.0


class GputuiApp(BaseApp):
    """The monitor app over ``source`` (live, replay or a test's).

    ``attach_factory(pid)`` builds the attach screen for a hooked process; by default
    the live attach screen, and none for a recording (its pids are not this machine's).
    ``autostart=False`` leaves the poller off: data then comes only from
    :meth:`GputuiApp.advance` (deterministic tests and screenshots).
    """

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
        *,
        autostart: bool = True,
    ) -> None:
        super().__init__(ascii_only=ascii_only, autostart=autostart)
        self.readonly = readonly
        self.banner = banner
        if attach_factory is None and not source.is_recording:
            attach_factory = _live_attach_screen
        self.attach_factory = attach_factory
        self._said_ends_early = False
        #: the collector's housekeeping for thousands of processes (a real screen)
        self._freezer: footprint.SampleFreezer | None = None
        #: what the poller's thread hands the loop: readings and failures, in order
        self._inbox: Inbox[Reading | str] = Inbox(
            self._take, self._inbox_failed, lambda new, waiting: type(new) is type(waiting)
        )
        #: what the monitor knows: source, poller, history, findings, the newest data
        self.session = MonitorSession(source, interval_s, self._on_reading, self._on_failure)

    def replay_status(self) -> str | None:
        """Where a replay is, for the banner: '1,234/86,400', then '... pass 2'."""
        replay = self.session.current.replay
        if replay is None:
            return None
        total = "?" if replay.total is None else f"{replay.total:,}"
        text = f"{replay.position:,}/{total}"
        return f"{text}  pass {replay.loops + 1}" if replay.loops else text

    def replay_status_width(self) -> int:
        """The most cells :meth:`replay_status` takes in this replay (its position
        up to the total, a few passes; before the count, a total of thousands):
        the banner keeps that room from the start."""
        replay = self.session.current.replay
        if replay is None:
            return 0
        total = f"{max(replay.total or 0, REPLAY_COUNT_ROOM):,}"
        return len(f"{total}/{total}  pass {max(9, replay.loops + 1)}")

    def recording_banner(self) -> str | None:
        """The line every screen shows while the data is not this machine now."""
        source = self.session.source
        if not (self.banner or source.is_recording):
            return None
        label = source.label
        note = getattr(getattr(source, "header", None), "note", None)
        if isinstance(note, str) and note and label.startswith("recording: "):
            label = f"recording of {fmt.clean(note, 120)}"  # what it is, as its maker said
        text = self.banner or f"RECORDING, not this machine: {label}"
        named = label.removeprefix("recording: ")
        if self.banner and label not in self.banner and named not in self.banner:
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
            self.session.start()
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
        if self.session.source.is_recording:  # the live monitor never loads its decoder
            self._freezer.engage()

    def _freeze_startup_objects(self) -> None:
        # Modules, styles, widgets (and a short recording, decoded by then) live as
        # long as the monitor: taken out of the cyclic collector, they are no longer
        # walked by every full collection (a tenth of the monitor's CPU time with
        # 8 GPUs and 40 processes).  Reference counting still frees them.
        gc.freeze()

    def on_unmount(self) -> None:
        self._inbox.close()
        self.session.close()

    # -- data in -----------------------------------------------------------------

    def _on_reading(self, reading: Reading) -> None:
        # on the poller's thread, right after the session made the reading
        if not self._inbox.put(reading):
            # an app not mounted yet, or one taken down: as a message
            self.post_message(SnapshotReady(reading))
        freezer = self._freezer
        if freezer is not None:
            freezer.after_sample(len(reading.snapshot.processes))

    def _on_failure(self, error: str) -> None:
        if not self._inbox.put(error):
            self.post_message(PollFailed(error))

    def _take(self, item: Reading | str) -> None:
        """A reading or a failure from the poller, on the loop: into the session,
        then onto the visible screen."""
        if isinstance(item, str):
            self.session.take_failure(item)
        elif self.session.take(item):
            # The history graphs break here too (time went back: History.add).
            self.notify("replay restarted from the beginning", timeout=3)
        self._say_ends_early()
        self._refresh_screens()

    def _say_ends_early(self) -> None:
        """A recording that ends early (cut off, or still being written): said once."""
        replay = self.session.current.replay
        if self._said_ends_early or replay is None or replay.ends_early is None:
            return
        self._said_ends_early = True
        from gputui.recording.io import ends_early

        self.notify(ends_early("the recording", replay.ends_early), severity="warning", timeout=8)

    def _inbox_failed(self, error: Exception) -> None:
        # as an exception in a message handler: Textual shows it and ends the app
        handle = getattr(self, "_handle_exception", None)
        if not callable(handle):
            raise error
        handle(error)

    def on_snapshot_ready(self, message: SnapshotReady) -> None:
        self._take(message.reading)

    def on_poll_failed(self, message: PollFailed) -> None:
        self._take(message.error)

    def advance(self, count: int = 1) -> None:
        """Sample the source ``count`` times now, on this thread, and draw each
        (screenshots, tests).

        Use with ``autostart=False`` (or a long interval) so that the poller
        does not sample the same source meanwhile.
        """
        for _ in range(count):
            self._take(self.session.sample_now())

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
        paused = self.session.toggle_pause()
        self.notify("paused" if paused else "resumed", timeout=1.5)
        self._refresh_screens()

    def action_change_interval(self, step: int) -> None:
        new = self.session.change_interval(step)
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
        if self.session.source.is_recording:
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
        source = self.session.source
        if self.attach_factory is None and source.is_recording:
            # A recording's pids are not this machine's. The demo's hooked job was
            # recorded by its attach screen too: play that session.
            if source.label.startswith("DEMO"):
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


#: the monitor app's factory, shared by the CLI and the tests
make_app = GputuiApp


def _live_attach_screen(pid: int) -> Screen[object] | None:
    # Imported on first use: the attach screen's modules (~120 ms of imports) are not
    # on the path to the monitor's first frame.
    from gputui.tui.attach import attach_screen_factory

    return attach_screen_factory(pid)
