"""The default command: the live monitor, or one snapshot with ``--once``."""

from __future__ import annotations

import argparse

from gputui.collectors.source import SnapshotSource
from gputui.errors import GputuiError, NvmlUnavailable

DEMO_BANNER = "DEMO: a recording of a real GPU session, not this machine"


def open_source(args: argparse.Namespace) -> tuple[SnapshotSource, str | None]:
    """The source the flags ask for, and a banner when it is not this machine now."""
    if args.demo or args.replay:
        # imported here: the live path (and `--once`'s start-up time) never pays for it
        from gputui.collectors.replay import ReplaySource

        if args.demo:
            return ReplaySource.demo(speed=args.speed), DEMO_BANNER
        source = ReplaySource.from_file(args.replay, speed=args.speed)
        return source, f"REPLAY: {args.replay}, not this machine"
    from gputui.collectors.source import LiveSource

    try:
        return LiveSource(), None
    except NvmlUnavailable as exc:
        if not args.demo_if_no_gpu:
            raise
        from gputui.collectors.replay import ReplaySource

        reason = str(exc).split(";")[0]
        return (
            ReplaySource.demo(speed=args.speed),
            f"{DEMO_BANNER} ({reason})",
        )


def main(args: argparse.Namespace) -> int:
    source, banner = open_source(args)
    try:
        if not source.is_recording:
            # The first live sample is taken on a thread while the report or the UI
            # imports (NVML and /proc reads release the GIL).
            from gputui.collectors.source import SampleAhead

            source = SampleAhead(source, ONCE_RATE_WINDOW_S)
        if args.once:
            return _once(source, args, banner)
        try:
            from gputui.tui.app import make_app
        except ImportError as exc:  # pragma: no cover - textual is a dependency
            raise GputuiError(f"the monitor needs textual: {exc}") from None
        app = make_app(
            source=source,
            interval_s=_interval(source, args),
            readonly=args.readonly,
            ascii_only=args.ascii,
            banner=banner,
        )
        app.run()
        return int(app.return_code or 0)
    finally:
        source.close()


def _interval(source: SnapshotSource, args: argparse.Namespace) -> float:
    # A recording plays at its own cadence unless --interval was given explicitly.
    if args.interval is not None:
        return float(args.interval)
    return source.natural_interval_s or 1.0


#: rates (GPM, PCIe, NVLink) are differences between two readings: the live source
#: takes the first when it opens, ``--once`` the second this long after
ONCE_RATE_WINDOW_S = 0.05


def _once(source: SnapshotSource, args: argparse.Namespace, banner: str | None) -> int:
    from gputui import report  # imported while the first sample is taken

    snapshot = source.sample()
    if args.json:
        report.print_json(snapshot, source)
    else:
        report.print_snapshot(snapshot, source, banner, ascii_only=args.ascii)
    return 0
