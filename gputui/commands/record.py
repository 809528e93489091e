"""``gputui record``: write snapshots to a compressed recording.

Live, it samples this machine every ``--interval`` seconds.  With ``--replay
FILE`` (or ``--demo``) it re-records a recording instead, as fast as it reads:
a slice of it (``--start``, ``--duration``, in the recording's own time) and
at most one snapshot per ``--interval`` seconds of it.  The new file keeps the
recorded machine's hostname and the recording's note.
"""

from __future__ import annotations

import argparse
import os
import signal
import stat
import sys
import threading
import time
from typing import Any

from gputui import fmt
from gputui.commands import args as types
from gputui.errors import GputuiError

PROG = "gputui record"
#: the interval a live recording samples at unless told
LIVE_INTERVAL_S = 1.0
#: a re-recording says how far it got at most this often
PROGRESS_EVERY_S = 0.2


SUMMARY = "write snapshots to a recording"
DESCRIPTION = (
    "Sample this machine and write the snapshots to FILE as gzip-compressed JSON "
    "lines; play it back with 'gputui --replay FILE'.  With --replay FILE (or "
    "--demo) it re-records that recording instead, at full speed: a slice of it "
    "(--start, --duration) or fewer snapshots (--interval), in the recording's "
    "own time."
)
EXAMPLES = (
    "examples:\n"
    "  gputui record -o s.jsonl.gz --interval 1 --duration 600   this machine, 10 min\n"
    "  gputui record -o part.jsonl.gz --replay s.jsonl.gz --start 60 --duration 30\n"
    "  gputui record -o demo.jsonl.gz --demo --interval 5        the demo, 1 in 5 s"
)


def register(sub: Any) -> None:
    parser = types.command(sub, "record", SUMMARY, DESCRIPTION, EXAMPLES)
    parser.add_argument("-o", "--output", required=True, metavar="FILE", help="recording to write")
    types.add_seconds(
        parser,
        "--interval",
        0.1,
        3600.0,
        "seconds between snapshots, 0.1-3600 (default 1; of a recording: all of them)",
    )
    types.add_seconds(
        parser,
        "--duration",
        0.1,
        366 * 86400.0,
        "stop after S seconds, 0.1-31622400 (default: until Ctrl-C, or a recording's end)",
    )
    played = parser.add_mutually_exclusive_group()
    played.add_argument(
        "--replay", metavar="FILE", help="re-record this recording instead of the machine"
    )
    types.add_demo(played, types.MONITOR_DEMOS, verb="re-record")
    types.add_seconds(
        parser,
        "--start",
        0.0,
        366 * 86400.0,
        "with --replay or --demo: skip its first S seconds, 0-31622400 (default 0)",
    )
    parser.add_argument(
        "--note", default=None, help="a description stored in the recording (default: its own)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    playing = bool(args.replay is not None or args.demo)
    if args.start is not None and not playing:
        raise GputuiError(f"{PROG}: --start skips into a recording: add --replay FILE (or --demo)")
    types.check_writable(PROG, args.output)
    if playing:
        return rerecord(args)
    return record_live(args)


def _on_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def _progress(args: argparse.Namespace, count: int) -> None:
    """How far it got, redrawn in place: on a terminal only (a log gets the last
    line, :func:`_done`), within one line of it (the file's name elided in the
    middle where it does not fit)."""
    if not args.quiet and _on_terminal():
        from gputui.reports.text import cells, elide, output_width, plural

        head = f"recorded {plural(count, 'snapshot')} to "
        # one cell short of the width: a line that fills it would wrap on some terminals
        room = max(8, output_width(sys.stderr) - 1 - cells(head))
        print(
            f"\r{head}{elide(fmt.clean(args.output), room)}",
            end="",
            file=sys.stderr,
            flush=True,
        )


def _done(args: argparse.Namespace, count: int) -> None:
    """The last word on stderr: the progress line ended, or (not a terminal) the
    one line of what was written."""
    if args.quiet:
        return
    if _on_terminal():
        _progress(args, count)
        print(file=sys.stderr)
        return
    from gputui.reports.text import plural, say

    say(f"recorded {plural(count, 'snapshot')} to {fmt.clean(args.output)}")


def record_live(args: argparse.Namespace) -> int:
    from gputui.errors import NvmlUnavailable
    from gputui.recording.replay import RecordingWriter
    from gputui.sources.live import LiveSource

    interval = LIVE_INTERVAL_S if args.interval is None else args.interval
    try:
        source = LiveSource()
    except NvmlUnavailable as exc:
        raise GputuiError(
            f"{PROG}: {types.try_demo(str(exc), f'{PROG} -o {fmt.clean(args.output)} --demo')}"
        ) from None
    stop = threading.Event()

    def _stop(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    writer = RecordingWriter(args.output, interval_s=interval, note=args.note)
    start = time.monotonic()
    try:
        while not stop.is_set():
            tick = time.monotonic()
            writer.write(source.sample())
            _progress(args, writer.count)
            if args.duration is not None and tick - start + interval >= args.duration:
                break
            stop.wait(max(0.0, interval - (time.monotonic() - tick)))
    except KeyboardInterrupt:
        pass
    finally:
        writer.close()
        source.close()
        _done(args, writer.count)
    return 0


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def rerecord(args: argparse.Namespace) -> int:
    """One pass over a recording, as fast as it reads: the snapshots from
    ``--start`` on, for ``--duration``, at most one per ``--interval`` (all times
    the recording's own, from its first snapshot)."""
    from gputui.recording.replay import RecordingError, RecordingWriter, ReplaySource

    if args.replay is not None and _same_file(args.replay, args.output):
        raise GputuiError(f"{PROG}: -o would overwrite the recording it reads; name another file")
    try:
        source = (
            ReplaySource.demo(name=args.demo) if args.demo else ReplaySource.from_file(args.replay)
        )
    except RecordingError as exc:
        raise GputuiError(f"{PROG}: {exc}") from None
    header = source.header
    try:
        writer = RecordingWriter(
            args.output,
            interval_s=args.interval or header.interval_s or source.natural_interval_s or 1.0,
            note=header.note if args.note is None else args.note,
            hostname=header.hostname,
        )
    except BaseException:
        source.close()
        raise
    start_s = args.start or 0.0
    end_s = None if args.duration is None else start_s + args.duration
    # A recording's cadence jitters (1.003 s, 1.999 s): a snapshot within half
    # of it counts as on time, for --start, --duration and --interval alike.
    cadence = header.interval_s or source.natural_interval_s or 1.0
    slack = 0.5 * min(cadence, args.interval or cadence)
    due_s = start_s
    first_s: float | None = None
    last_s = 0.0
    damaged = 0
    shown = 0.0
    try:
        while True:
            try:
                snapshot = source.sample()
            except RecordingError:
                damaged += 1  # a line that is not a snapshot: left out
                continue
            if source.loops:  # back at its start: the pass is over
                break
            if first_s is None:
                first_s = snapshot.timestamp_s
            since = last_s = snapshot.timestamp_s - first_s
            if end_s is not None and since >= end_s - slack:
                break
            if since < due_s - slack:
                continue
            writer.write(snapshot)
            if args.interval:
                while due_s <= since + slack:
                    due_s += args.interval
            if time.monotonic() - shown > PROGRESS_EVERY_S:
                _progress(args, writer.count)
                shown = time.monotonic()
    except KeyboardInterrupt:
        pass
    finally:
        writer.close()
        source.close()
        if writer.count:
            _done(args, writer.count)
    note = source.ends_early_note()
    if note is not None or damaged:
        from gputui.reports.text import plural, say

        if note is not None:
            say(f"{PROG}: {note}")
        if damaged:
            say(f"{PROG}: left out {plural(damaged, 'damaged line')} of the recording")
    if writer.count == 0:
        _remove_if_regular(args.output)
        raise GputuiError(
            f"{PROG}: the recording holds no snapshots from {start_s:g} s on "
            f"(its last is at {last_s:.0f} s); nothing written"
        )
    return 0


def _remove_if_regular(path: str) -> None:
    """Remove the file this command created empty (never a device such as /dev/null)."""
    try:
        if stat.S_ISREG(os.stat(path).st_mode):
            os.unlink(path)
    except OSError:
        pass
