"""``gputui record``: write snapshots to a compressed recording."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from typing import Any

from gputui.commands import args as types


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "record",
        help="write snapshots to a recording",
        description=(
            "Sample this machine (or replay a recording) and write the snapshots to FILE "
            "as gzip-compressed JSON lines; play it back with 'gputui --replay FILE'."
        ),
    )
    parser.add_argument("-o", "--output", required=True, metavar="FILE", help="recording to write")
    parser.add_argument(
        "--interval",
        type=types.seconds(0.1, 3600.0),
        default=1.0,
        metavar="S",
        help="sampling interval in seconds, 0.1-3600 (default 1)",
    )
    parser.add_argument(
        "--duration",
        type=types.seconds(0.1, 366 * 86400.0),
        default=None,
        metavar="S",
        help="stop after S seconds (default: until Ctrl-C)",
    )
    parser.add_argument("--note", default=None, help="a description stored in the recording")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from gputui.collectors.replay import RecordingWriter
    from gputui.collectors.source import LiveSource

    types.check_writable("gputui record", args.output)
    source = LiveSource()
    stop = threading.Event()

    def _stop(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    writer = RecordingWriter(args.output, interval_s=args.interval, note=args.note)
    start = time.monotonic()
    try:
        while not stop.is_set():
            tick = time.monotonic()
            writer.write(source.sample())
            if not args.quiet:
                print(
                    f"\rrecorded {writer.count} snapshots to {args.output}",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
            if args.duration is not None and tick - start + args.interval >= args.duration:
                break
            stop.wait(max(0.0, args.interval - (time.monotonic() - tick)))
    except KeyboardInterrupt:
        pass
    finally:
        writer.close()
        source.close()
        if not args.quiet:
            print(file=sys.stderr)
    return 0
