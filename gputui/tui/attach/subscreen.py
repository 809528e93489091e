"""What the attach screen's sub-screens (memory snapshot, roofline) share: one text
panel redrawn from the session's state when it changes, a request to the hook
that is refused in a replay or without a connection, and the request itself sent
off the UI thread."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer

from gputui.errors import GputuiError
from gputui.session.attach import AttachState, StateSnapshot, capture_busy
from gputui.session.feeds import CAPTURE_STEPS, AttachFeed
from gputui.tui.widgets.panels import BannerPanel
from gputui.tui.widgets.text_panel import TextPanel

REFRESH_S = 0.25


def cpu_job(snap: StateSnapshot) -> bool:
    """The job said in its hello that it runs on no CUDA device."""
    return snap.hello is not None and snap.hello.device is None


def request_refusal(
    feed: AttachFeed,
    snap: StateSnapshot,
    what: str,
    busy: Callable[[StateSnapshot], bool],
    not_connected: str = "not connected",
) -> str | None:
    """Why a request for ``what`` ("captures", "memory snapshots") cannot be sent
    now, or None."""
    if feed.is_replay:
        return f"this is a recording: {what} need a live job"
    if snap.hello is None or snap.disconnected is not None:
        return not_connected
    if busy(snap):
        return f"a {what.rstrip('s')} is already under way"
    return None


def send_request(
    screen: Screen[object], send: Callable[[], str], done: Callable[[str], None]
) -> None:
    """Run ``send`` (a socket write; call this from a worker thread) and hand its
    id to ``done``, or show its error."""
    try:
        ident = send()
    except GputuiError as exc:
        screen.app.call_from_thread(screen.notify, str(exc), severity="error")
        return
    done(ident)


def ask_capture(
    screen: Screen[object],
    feed: AttachFeed,
    state: AttachState,
    flops: bool = True,
    not_connected: str = "not connected",
) -> None:
    """Ask the hook for a capture of the next :data:`CAPTURE_STEPS` steps (with
    FLOPs and shapes, as every capture: docs/hook.md) unless one is under way."""
    ask_hook(
        screen,
        feed,
        state.snapshot(),
        "captures",
        capture_busy,
        lambda: feed.request_capture(CAPTURE_STEPS, flops=flops),
        state.set_capture_wanted,
        not_connected,
    )


def ask_hook(
    screen: Screen[object],
    feed: AttachFeed,
    snap: StateSnapshot,
    what: str,
    busy: Callable[[StateSnapshot], bool],
    send: Callable[[], str],
    done: Callable[[str], None],
    not_connected: str = "not connected",
) -> None:
    """Ask the hook for one of ``what`` ("captures", "memory snapshots") unless
    it is refused now (said in a warning): ``send`` runs on a worker thread (one
    at a time of each kind) and hands its id to ``done``."""
    refusal = request_refusal(feed, snap, what, busy, not_connected)
    if refusal is not None:
        screen.notify(refusal, severity="warning")
        return
    screen.run_worker(
        partial(send_request, screen, send, done),
        group=f"attach-{what}",
        exclusive=True,
        thread=True,
    )


class StatePanel(TextPanel):
    """A text panel drawn from the session's state as it is at each redraw."""

    def __init__(
        self, state: AttachState, *, id: str | None = None, classes: str | None = None
    ) -> None:
        super().__init__(id=id, classes=classes)
        self.state = state
        self.live = True
        self.ascii_only = False


class StateScreen(Screen[object]):
    """A sub-screen of the attach screen, redrawn from ``state`` (checked every
    REFRESH_S) when it changed: subclasses draw in ``redraw_view``."""

    def __init__(self, state: AttachState, feed: AttachFeed) -> None:
        super().__init__()
        self.state = state
        self.feed = feed
        self._version = -1
        self._timer: Timer | None = None

    def on_mount(self) -> None:
        self._timer = self.set_interval(REFRESH_S, self.refresh_view)

    def on_unmount(self) -> None:
        if self._timer is not None:
            self._timer.stop()

    def refresh_view(self, force: bool = False) -> None:
        if not self.is_mounted:
            return
        version = self.state.version
        if not force and version == self._version:
            return
        self._version = version
        self.redraw_view(force)

    def redraw_view(self, force: bool) -> None:
        raise NotImplementedError


class PanelScreen(StateScreen):
    """A screen of one :class:`TextPanel` drawn from ``state``, under the banner
    (a replay says so on every screen) and scrolled; subclasses name the panel's
    class, its ids' prefix, the key that opened it and the request key.  Its keys:
    the request, and the one that opened it, escape or q to close it."""

    PANEL: type[StatePanel]
    #: the ids' prefix: ``#{ID}-banner``, ``#{ID}-scroll``, ``#{ID}-panel``
    ID = ""
    #: the attach screen's key that opens this one (it closes it too)
    KEY = ""
    #: the key that asks the hook for something: refused (hidden) in a replay
    REQUEST: ClassVar[Binding]
    #: the request's action
    REQUEST_ACTION = ""
    DEFAULT_CSS = """
    PanelScreen .panel-scroll { height: 1fr; }
    PanelScreen .panel-body { padding: 0 1; }
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        if hasattr(cls, "REQUEST"):  # before textual reads the bindings
            cls.REQUEST_ACTION = cls.REQUEST.action
            close = Binding(f"escape,{cls.KEY},q", "close", "Back")
            cls.BINDINGS = [cls.REQUEST, close]
        super().__init_subclass__(**kwargs)

    def __init__(self, state: AttachState, feed: AttachFeed, *, autostart: bool = True) -> None:
        super().__init__(state, feed)
        self.autostart = autostart

    def compose(self) -> ComposeResult:
        yield BannerPanel(id=f"{self.ID}-banner")
        with VerticalScroll(id=f"{self.ID}-scroll", classes="panel-scroll"):
            yield self.PANEL(self.state, id=f"{self.ID}-panel", classes="panel-body")
        yield Footer()

    def on_mount(self) -> None:
        panel = self.query_one(self.PANEL)
        panel.live = not self.feed.is_replay
        panel.ascii_only = bool(getattr(self.app, "ascii_only", False))
        super().on_mount()
        if self.autostart and not self.feed.is_replay and self.wants_request(self.state.snapshot()):
            getattr(self, f"action_{self.REQUEST_ACTION}")()
        self.refresh_view(force=True)

    def wants_request(self, snap: StateSnapshot) -> bool:
        """Whether opening the screen on a live job asks the hook at once."""
        return False

    def redraw_view(self, force: bool) -> None:
        self.query_one(self.PANEL).redraw()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == self.REQUEST_ACTION and self.feed.is_replay:
            return None
        return True

    def action_close(self) -> None:
        self.app.pop_screen()
