"""The attach screen, and the small app that runs it alone (``gputui attach PID``).

Data flow: a feed (live hook client or recording) pushes events into an
:class:`AttachState` from its own thread.  A 4 Hz timer on the UI thread takes a
snapshot, builds an :class:`AttachView` of plain values only when the state
changed, and hands it to the panels.  So the UI cost does not grow with the
job's step rate, and a burst of messages never queues up in Textual.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar

from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import DataTable, Footer

from gputui.client.hook import HookClient
from gputui.errors import GputuiError
from gputui.session.attach import AttachState, AttachView, StateSnapshot, build_view
from gputui.session.autocapture import KEY as AUTO_KEY
from gputui.session.autocapture import AutoCapture
from gputui.session.feeds import CAPTURE_STEPS, AttachFeed, LiveFeed, ReplayFeed
from gputui.tui import ascii
from gputui.tui.attach.capture_panels import CapturePanel, ClassPanel, NameLine
from gputui.tui.attach.findings import JobFindingsPanel, JobFindingsScreen
from gputui.tui.attach.header import AttachHeader
from gputui.tui.attach.memory_panel import MemoryPanel
from gputui.tui.attach.memory_snapshot import MemorySnapshotScreen
from gputui.tui.attach.phase_table import PhaseTable
from gputui.tui.attach.python_view import PythonScreen
from gputui.tui.attach.roofline_view import RooflineScreen
from gputui.tui.attach.step_bars import StepBars
from gputui.tui.attach.subscreen import ask_capture
from gputui.tui.attach.table import CPU_OPS, KERNELS, CaptureTable
from gputui.tui.base import BaseApp
from gputui.tui.messages import CaptureArrived
from gputui.tui.widgets.panels import BannerPanel

REFRESH_HZ = 4.0
STATS_PERIOD_S = 1.0
#: below this height: short bars, one history line, one memory line
SHORT_HEIGHT = 34
#: from this width the class rollup and CPU ops get their own column
WIDE_WIDTH = 110
#: from this width the footer shows every key (g, o and r too): they fit
ALL_KEYS_WIDTH = 120


class AttachScreen(Screen[object]):
    CSS_PATH = "attach.tcss"
    HELP_TOPIC = "attach"
    BINDINGS: ClassVar[list[BindingType]] = [
        # Every key shown fits in 80 columns: g, o and r show from ALL_KEYS_WIDTH
        # (the first binding of a key that is enabled is the footer's), and the ?
        # help names them all.
        Binding("p", "capture", "Capture"),
        Binding(AUTO_KEY, "when_wide('auto_capture')", "Auto capture"),
        Binding(AUTO_KEY, "auto_capture", "Auto capture", show=False),
        Binding("g", "when_wide('toggle_gpu')", "Wall/GPU"),
        Binding("g", "toggle_gpu", "Wall/GPU", show=False),
        Binding("o", "when_wide('toggle_table')", "Kernels/ops"),
        Binding("o", "toggle_table", "Kernels/ops", show=False),
        Binding("r", "when_wide('reconnect')", "Reconnect"),
        Binding("r", "reconnect", "Reconnect", show=False),
        Binding("f", "findings", "Findings"),
        Binding("m", "memory", "Memory"),
        Binding("l", "roofline", "Roofline"),
        Binding("y", "python", "Python"),
        # Pushed over the monitor or the rank view, q (and esc) go back to it, and
        # the footer says "q Back"; alone, this binding is off and q quits.
        Binding("q,escape", "back", "Back"),
    ]

    def __init__(
        self,
        feed: AttachFeed,
        *,
        autostart: bool = True,
        state: AttachState | None = None,
        auto: AutoCapture | None = None,
        drive_auto: bool = True,
    ) -> None:
        super().__init__()
        self.feed = feed
        self.autostart = autostart
        # A rank of the rank view brings the state its connection already fills.
        self.state = state if state is not None else AttachState()
        #: the automatic capture (None: a recording, or turned off for good); a
        #: rank of the rank view shows the rank view's, which asks every rank
        #: (``drive_auto`` False: this screen only shows it and queues p)
        self.auto = None if feed.is_replay else auto
        self.drive_auto = drive_auto
        self.gpu_mode = False
        self.view: AttachView | None = None
        self.refreshes = 0
        self._built_version = -1
        self._built_key: tuple[Any, ...] | None = None
        self._timer: Timer | None = None
        self._stats_at = 0.0
        #: the footer has room for every key
        self.all_keys = False

    # -- composition -------------------------------------------------------------------
    @property
    def ascii_only(self) -> bool:
        return bool(getattr(self.app, "ascii_only", False))

    def compose(self) -> ComposeResult:
        ascii_only = self.ascii_only
        yield AttachHeader(id="att-header")
        yield BannerPanel(id="att-banner")
        with Horizontal(id="att-top"):
            yield StepBars(id="att-steps", ascii_only=ascii_only)
            with Vertical(id="att-side"):
                yield PhaseTable(id="att-phases", ascii_only=ascii_only)
                yield MemoryPanel(id="att-memory", ascii_only=ascii_only)
        yield CapturePanel(id="att-capture", ascii_only=ascii_only)
        with Horizontal(id="att-bottom"):
            yield CaptureTable(id="att-table")
            yield ClassPanel(id="att-classes", ascii_only=ascii_only)
        yield NameLine(id="att-name")
        yield JobFindingsPanel(id="att-findings")
        yield Footer()

    def on_mount(self) -> None:
        if self.ascii_only:
            self.add_class("-ascii")
        header = self.query_one(AttachHeader)
        header.pid = self.feed.pid
        header.label = self.feed.label
        header.can_go_back = len(self.app.screen_stack) > 1
        header.is_replay = self.feed.is_replay
        self.query_one(CapturePanel).is_replay = self.feed.is_replay
        self.query_one(CaptureTable).focus()
        self._apply_layout()
        self._timer = self.set_interval(1.0 / REFRESH_HZ, self.refresh_view)
        # post_message is thread-safe: the kernel table and the findings show the
        # capture at once, not at the next tick
        self.state.on_capture = self._wake
        if self.autostart:
            self._start_feed()
        self.refresh_view()

    def _wake(self) -> None:
        self.post_message(CaptureArrived())

    def on_capture_arrived(self, _message: CaptureArrived) -> None:
        self.refresh_view()

    def on_unmount(self) -> None:
        self.state.on_capture = None
        if self.auto is not None:
            self.auto.forget_user(self.USER)  # a capture waiting to be sent from here
        # Leaving the screen (escape back to the monitor, or quitting) ends the session.
        if self._timer is not None:
            self._timer.stop()
        self.feed.close()

    def on_resize(self, _event: events.Resize) -> None:
        self._apply_layout()
        self.refresh_view(force=True)

    def _apply_layout(self) -> None:
        width, height = (
            self.size.width or self.app.size.width,
            (self.size.height or self.app.size.height),
        )
        short = height < SHORT_HEIGHT
        wide = width >= WIDE_WIDTH
        self.set_class(short, "-short")
        self.set_class(not wide, "-narrow")
        all_keys = width >= ALL_KEYS_WIDTH
        if all_keys != self.all_keys:
            self.all_keys = all_keys
            self.refresh_bindings()
        bars = self.query_one(StepBars)
        bars.bar_rows = 4 if short else 9
        bars.history_rows = 1 if short else 2
        self.query_one(MemoryPanel).compact = short
        self.query_one(PhaseTable).compact = short
        self.query_one(JobFindingsPanel).rows = 1 if short else 3
        self.query_one(CapturePanel).show_classes = not wide
        classes = self.query_one(ClassPanel)
        classes.display = wide
        classes.op_rows = max(3, height - 32)

    # -- data ---------------------------------------------------------------------------
    def _start_feed(self) -> None:
        self.state.set_connecting(True)
        self._connect_worker()

    @work(thread=True, exclusive=True, group="attach-connect")
    def _connect_worker(self) -> None:
        # HookClient.connect blocks on the socket and the hello: never on the UI thread.
        before = self.feed.pid
        try:
            self.feed.connect(self.state)
        except GputuiError as exc:
            self.state.set_connecting(False, str(exc))
            return
        except OSError as exc:
            self.state.set_connecting(False, f"cannot connect: {exc}")
            return
        if before is not None and self.feed.pid != before:
            self.app.call_from_thread(
                self.notify,
                f"process {before} has exited; the same command runs as pid "
                f"{self.feed.pid}: attached to it",
            )

    def replay_to(self, seconds: float = math.inf) -> None:
        """Play a recording up to ``seconds`` on this thread and draw it (tests,
        screenshots: the screen then shows exactly that moment of the recording)."""
        feed = self.feed
        if not isinstance(feed, ReplayFeed):
            raise TypeError("replay_to needs a ReplayFeed")
        if feed._state is not self.state:
            feed.connect(self.state, autoplay=False)
        feed.advance_to(seconds)
        self.refresh_view(force=True)

    def bar_width(self) -> int:
        bars = self.query_one(StepBars)
        return max(8, bars.content_region.width or self.app.size.width // 2)

    def refresh_view(self, force: bool = False) -> None:
        """The 4 Hz tick: rebuild the view only when something changed."""
        if not self.is_mounted:
            return
        now = self.feed.now()
        key = (self.gpu_mode, self.bar_width(), int(now))
        version = self.state.version
        if not force and version == self._built_version and key == self._built_key:
            return
        self._built_version = version
        self._built_key = key
        # Percentiles over 1,000 steps cost ~1 ms: once a second is enough for them.
        tick = time.monotonic()
        reuse = not force and tick - self._stats_at < STATS_PERIOD_S
        if not reuse:
            self._stats_at = tick
        before = self.view
        snap = self.state.snapshot()
        self._auto_step(snap, now)
        self.view = build_view(
            snap,
            now,
            self.gpu_mode,
            self.bar_width(),
            previous=before,
            reuse_stats=reuse,
        )
        self.refreshes += 1
        self._show(self.view, None if force else before)

    def _show(self, view: AttachView, before: AttachView | None = None) -> None:
        header = self.query_one(AttachHeader)
        feed = self.feed
        if isinstance(feed, ReplayFeed):
            header.replay_note = (
                f"replay {feed.played_s:.0f}/{feed.duration_s:.0f}s"
                + (f" x{feed.speed:g}" if feed.speed != 1 else "")
                + (" ended (r: again)" if feed.finished else "")
            )
        capture_panel = self.query_one(CapturePanel)
        capture_panel.auto = None if self.auto is None else self.auto.line([view.snap])
        panels: list[Any] = [header, self.query_one(StepBars), capture_panel]
        # Panels whose inputs are the very same objects as last time are not rebuilt:
        # statistics change once a second, memory at 2 Hz, captures rarely.
        if before is None or view.stats is not before.stats or view.gpu_mode != before.gpu_mode:
            panels.append(self.query_one(PhaseTable))
        # The memory panel also says why there are no samples (a CPU job), which
        # depends on the hello: rebuild it when a (re)connect brings a new one.
        if (
            before is None
            or view.memory is not before.memory
            or view.snap.hello is not before.snap.hello
        ):
            panels.append(self.query_one(MemoryPanel))
        new_capture = before is None or view.capture is not before.capture
        if new_capture:
            panels.append(self.query_one(ClassPanel))
        if before is None or view.findings != before.findings:
            panels.append(self.query_one(JobFindingsPanel))
        for panel in panels:
            panel.view = view
            panel.redraw()
        if new_capture:
            self.query_one(CaptureTable).show(view.capture)
            self._update_name()

    def _update_name(self) -> None:
        line = self.query_one(NameLine)
        selected = self.query_one(CaptureTable).selected_name
        kind, name = selected if selected else ("", "")
        if (line.kind, line.full_name) != (kind, name):
            line.kind, line.full_name = kind, name
            line.redraw()

    @on(DataTable.RowHighlighted)
    def _row_highlighted(self, _event: DataTable.RowHighlighted) -> None:
        self._update_name()

    # -- actions ------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "when_wide":
            if parameters == ("auto_capture",) and self.auto is None:
                return False  # a recording: nothing to capture
            return self.all_keys
        if action == "back":
            # Only when pushed over another screen (the monitor, the rank view):
            # alone, the app's q quits.
            return self.pushed
        return True

    @property
    def pushed(self) -> bool:
        """Over another screen (the monitor's, the rank view's): q goes back to it."""
        stack = self.app.screen_stack
        return len(stack) > 1 and self in stack[1:]

    def action_when_wide(self, action: str) -> None:
        """A key the footer shows only when every key fits: the same action."""
        getattr(self, f"action_{action}")()

    def action_back(self) -> None:
        if self.pushed and self.app.screen is self:
            self.app.pop_screen()

    # -- the automatic capture -----------------------------------------------------------
    def _auto_step(self, snap: StateSnapshot, now: float) -> None:
        """Ask for the automatic capture when it is due; send a capture the
        user asked for while it ran once it has ended."""
        auto = self.auto
        if auto is None:
            return
        if self.drive_auto:
            cid = auto.due([snap], now)
            if cid is not None:
                self.run_worker(
                    partial(self._send_auto, cid), group="attach-auto", exclusive=True, thread=True
                )
        if auto.take_user_turn(self.USER):
            self._ask_capture()

    def _send_auto(self, cid: str) -> None:
        """Worker thread: the socket write."""
        auto = self.auto
        assert auto is not None
        try:
            self.feed.request_capture(CAPTURE_STEPS, flops=True, capture_id=cid, auto=True)
        except GputuiError as exc:
            auto.failed(str(exc))
            return
        self.state.set_capture_wanted(cid)

    def action_auto_capture(self) -> None:
        if self.auto is None:
            self.notify("this is a recording: captures need a live job", severity="warning")
            return
        self.notify(self.auto.toggle())
        self.refresh_view(force=True)

    #: who queues a capture behind the automatic one (the rank view queues its own)
    USER = "attach"

    def action_capture(self) -> None:
        auto = self.auto
        if auto is not None and auto.user_capture(self.USER):
            self.notify("your capture waits for the automatic one, then profiles the next 5 steps")
            self.refresh_view(force=True)
            return
        self._ask_capture()

    def _ask_capture(self) -> None:
        # Every capture carries FLOPs and shapes (docs/hook.md, "Captures").
        ask_capture(self, self.feed, self.state, not_connected="not connected: r reconnects")

    def action_memory(self) -> None:
        self.app.push_screen(MemorySnapshotScreen(self.state, self.feed))

    def action_roofline(self) -> None:
        self.app.push_screen(RooflineScreen(self.state, self.feed))

    def action_python(self) -> None:
        self.app.push_screen(PythonScreen(self.state, self.feed))

    def action_findings(self) -> None:
        findings = self.view.findings if self.view is not None else ()
        self.app.push_screen(JobFindingsScreen(findings))

    def action_toggle_gpu(self) -> None:
        if not self.gpu_mode and (self.view is None or not self.view.has_gpu_times):
            self.notify("no GPU times: the job does not time steps on a CUDA device")
            return
        self.gpu_mode = not self.gpu_mode
        self.refresh_view(force=True)

    def action_toggle_table(self) -> None:
        table = self.query_one(CaptureTable)
        table.set_mode(CPU_OPS if table.mode == KERNELS else KERNELS)
        self._update_name()

    def action_reconnect(self) -> None:
        if isinstance(self.feed, ReplayFeed):
            self.feed.connect(self.state)  # plays the recording again from its start
            self.refresh_view(force=True)
            return
        snap = self.state.snapshot()
        if snap.hello is not None and snap.disconnected is None:
            self.notify("still connected")
            return
        self._start_feed()


class AttachAppBase(BaseApp):
    """What the attach apps share (one job, or every rank of one): the CSS,
    ``--ascii``, the banner of a replay and whether the automatic capture starts
    on; the keys are BaseApp's."""

    TITLE = "gputui attach"
    # Textual loads a screen's CSS_PATH when the screen is pushed, not for the
    # default screen: the app names the same file.
    CSS_PATH = "attach.tcss"
    HELP_TOPIC = "attach"

    def __init__(
        self,
        feed: Any,
        *,
        ascii_only: bool = False,
        banner: str | None = None,
        autostart: bool = True,
        notice: str | None = None,
        auto_capture: bool = True,
    ) -> None:
        super().__init__()
        self.feed = feed
        self.ascii_only = ascii_only
        self.banner = banner
        self.autostart = autostart
        #: said once the screen is up (a recording that ends early)
        self.notice = notice
        #: False: the automatic capture starts off (``--no-capture``; the key turns it on)
        self.auto_capture = auto_capture
        if ascii_only:
            ascii.use_ascii(self)

    def on_mount(self) -> None:
        if self.notice:
            self.notify(self.notice, severity="warning", timeout=8)

    def recording_banner(self) -> str | None:
        """Read by BannerPanel: a replay is never this machine now."""
        if self.banner:
            return " " + self.banner
        if self.feed.is_replay:
            return f" RECORDING, not this machine: {self.feed.label}"
        return None


class AttachApp(AttachAppBase):
    """``gputui attach`` on its own: the attach screen is the only screen."""

    feed: AttachFeed

    def get_default_screen(self) -> Screen[object]:
        return AttachScreen(
            self.feed, autostart=self.autostart, auto=AutoCapture(enabled=self.auto_capture)
        )

    @property
    def attach_screen(self) -> AttachScreen:
        screen = self.screen
        assert isinstance(screen, AttachScreen)
        return screen


def make_attach_app(
    source: HookClient | AttachFeed,
    *,
    ascii_only: bool = False,
    banner: str | None = None,
    autostart: bool = True,
    notice: str | None = None,
    auto_capture: bool = True,
) -> AttachApp:
    """The attach app over a connected client, a live feed or a replay.

    ``autostart=False`` leaves the feed alone: a test or the screenshot script then
    plays a recording with :meth:`AttachScreen.replay_to`.  ``auto_capture=False``
    starts with the automatic capture off (``--no-capture``).
    """
    feed: AttachFeed = (
        LiveFeed(source.pid, client=source) if isinstance(source, HookClient) else source
    )
    return AttachApp(
        feed,
        ascii_only=ascii_only,
        banner=banner,
        autostart=autostart,
        notice=notice,
        auto_capture=auto_capture,
    )


def attach_screen_factory(pid: int) -> AttachScreen:
    """The monitor's ``a`` key: a screen that connects to ``pid`` in a worker
    (and takes the automatic capture once the job is steady)."""
    return AttachScreen(LiveFeed(pid), auto=AutoCapture())


AttachScreenFactory = Callable[[int], AttachScreen]
