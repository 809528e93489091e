"""The default command: the live monitor, or one snapshot with ``--once``."""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from gputui.errors import GputuiError, NvmlUnavailable
from gputui.sources.base import SnapshotSource
from gputui.sources.live import SampleAhead, open_live

if TYPE_CHECKING:
    from gputui.snapshot.model import Snapshot

DEMO_BANNER = "DEMO: a recording of a real GPU session, not this machine"


def open_recording(args: argparse.Namespace) -> tuple[SnapshotSource, str]:
    """The recording the flags ask for (``--demo`` or ``--replay``), and its banner."""
    # imported here: the live path (and `--once`'s start-up time) never pays for it
    from gputui.recording.replay import ReplaySource

    if args.demo:
        return ReplaySource.demo(speed=args.speed, name=args.demo), DEMO_BANNER
    source = ReplaySource.from_file(args.replay, speed=args.speed)
    return source, f"REPLAY: {args.replay}, not this machine"


def settle_live(source: SampleAhead, args: argparse.Namespace) -> tuple[SnapshotSource, str | None]:
    """The live source once open, or with ``--demo-if-no-gpu`` the demo when there
    is no driver."""
    try:
        source.opened()
    except NvmlUnavailable as exc:
        if not args.demo_if_no_gpu:
            raise
        from gputui.recording.replay import ReplaySource

        reason = str(exc).split(";")[0]
        if args.window is not None:
            # refused with --demo; here the fallback chose the recording: said, not ignored
            print(
                f"gputui: {reason}: playing the demo recording; --window does not apply "
                "to a recording (its rates are the ones it recorded)",
                file=sys.stderr,
            )
        return ReplaySource.demo(speed=args.speed), f"{DEMO_BANNER} ({reason})"
    return source, None


def main(args: argparse.Namespace, leaving: bool = False) -> int:
    """``leaving``: the process exits right after (``gputui --once``): the live
    source's NVML session is left to the kernel to end, not shut down."""
    from gputui.commands.tty import has_terminal

    # The screen needs a terminal; without one it is refused last, once the
    # recording has been read or the driver opened (their errors come first).
    screen = not args.once and has_terminal()
    if screen:
        # before any thread starts (gputui.tui.footprint): one malloc arena for all of
        # them, and the event loop and Textual without OpenSSL or archive libraries
        from gputui.tui.footprint import lean_imports, one_arena

        one_arena()
        lean_imports()
    live: SampleAhead | None = None
    if args.demo or args.replay:
        source, banner = open_recording(args)
    else:
        # NVML opens and the first live sample is taken on a thread while the
        # report or the UI imports (NVML and /proc reads release the GIL).
        window = (args.window or 0.0) if args.once else FIRST_FRAME_WINDOW_S
        # the text report of one instant reading: only the queries it shows
        text_one_shot = args.once and not args.json and not args.window
        starting = threading.Event()
        live = SampleAhead(lambda: open_live(text_one_shot, starting, screen=screen), window)
        source, banner = live, None
        if args.once:
            # The report's imports hold the GIL: they wait until the sample thread
            # has imported pynvml and NVML is opening (waiting in the driver
            # without the GIL), so that they fill that wait instead of delaying it.
            starting.wait(OPEN_WAIT_S)
    try:
        if args.once:
            write = _once_writer(args)
        elif screen:
            try:
                from gputui.tui.app import make_app
            except ImportError as exc:  # pragma: no cover - textual is a dependency
                raise GputuiError(f"the monitor needs textual: {exc}") from None
        if live is not None:
            source, banner = settle_live(live, args)
        if args.once:
            instant = live is not None and source is live and not args.window
            write(source.sample(), source, banner, instant)
            return 0
        if not screen:
            from gputui.commands.tty import need_terminal

            need_terminal("gputui", _printed_form(args))
        app = make_app(
            source=source,
            interval_s=_interval(source, args),
            readonly=args.readonly,
            ascii_only=args.ascii,
            banner=banner,
        )
        try:
            app.run()
        finally:
            _say_ends_early(source, args)
        return int(app.return_code or 0)
    finally:
        if not (leaving and args.once):
            source.close()
            if live is not None and live is not source:
                live.close()


def _say_ends_early(source: SnapshotSource, args: argparse.Namespace) -> None:
    """A recording that ends early (cut off, or still being written), said on
    stderr once the screen is gone (the screen said it too)."""
    progress = source.progress() if source.is_recording else None
    if progress is None or progress.ends_early is None:
        return
    from gputui.fmt import clean
    from gputui.recording.io import ends_early

    name = "the demo recording" if args.demo or not args.replay else clean(args.replay)
    from gputui.reports.text import say

    say(f"gputui: {ends_early(name, progress.ends_early)}")


def _printed_form(args: argparse.Namespace) -> str:
    """The ``--once`` command line that prints what the screen would show."""
    if args.demo:
        return "gputui --once --demo"
    if args.replay:
        from gputui.fmt import clean

        return f"gputui --once --replay {clean(args.replay)}"
    return "gputui --once" + (" --demo-if-no-gpu" if args.demo_if_no_gpu else "")


def _interval(source: SnapshotSource, args: argparse.Namespace) -> float:
    # A recording plays at its own cadence unless --interval was given explicitly.
    if args.interval is not None:
        return float(args.interval)
    return source.natural_interval_s or 1.0


#: the longest the one-shot's report waits for NVML to start opening before it
#: loads (pynvml's import: milliseconds; a bound, never reached in practice)
OPEN_WAIT_S = 1.0

#: rates (GPM, PCIe, NVLink, CPU %) are differences between two readings, and GPM
#: needs them 0.1 s apart: the monitor's first frame has rates over this window
#: (its start-up hides it); ``--once`` reads instant values unless given --window
FIRST_FRAME_WINDOW_S = 0.1


@contextlib.contextmanager
def without_attrs() -> Iterator[None]:
    """Imports inside make ``import attr`` fail, unless attrs is already loaded.

    Rich before 15 imports ``rich.pretty`` with its console, and that imports
    attrs, when installed, only to pretty-print attrs classes, which the report
    never does; on the H100 machine that import alone took 17 ms of ``--once``.
    """
    skip = "attr" not in sys.modules
    if skip:
        sys.modules["attr"] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if skip and "attr" in sys.modules and sys.modules["attr"] is None:
            del sys.modules["attr"]


def _once_writer(
    args: argparse.Namespace,
) -> Callable[[Snapshot, SnapshotSource, str | None, bool], None]:
    """What prints the ``--once`` output: the codec for ``--json`` (no Rich), the
    Rich report otherwise.  Its last argument says the snapshot has no rates."""
    if args.json:
        from gputui.analysis.monitor_findings import findings
        from gputui.snapshot.codec import print_document

        window = args.window

        return lambda snapshot, source, _banner, instant: print_document(
            snapshot,
            source.label,
            source.is_recording,
            rate_window_s=None if source.is_recording else window,
            findings=[f.to_json() for f in findings(snapshot)],
        )
    with without_attrs():
        from gputui.reports import monitor as report

    return lambda snapshot, source, banner, instant: report.print_snapshot(
        snapshot,
        source,
        banner,
        ascii_only=args.ascii,
        instant=instant,
        rows=args.rows,
        every_row=args.all,
    )
