"""``gputui exporter``: serve this node's GPU and training series to Prometheus."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gputui.commands import args as types

if TYPE_CHECKING:
    from gputui.recording.replay import ReplaySource
    from gputui.snapshot.model import Snapshot

#: Clear of the neighbours on a GPU node: Prometheus 9090, node_exporter 9100,
#: dcgm-exporter 9400, nvidia_gpu_exporter 9835, nvitop-exporter and most model
#: servers 8000, OpenTelemetry's Prometheus exporter 9464 (docs/exporter.md).
DEFAULT_PORT = 9445
#: every interface: the exporter is there to be scraped by a Prometheus on another
#: machine, and what it serves by default is not sensitive (docs/exporter.md)
DEFAULT_LISTEN = "0.0.0.0"


SUMMARY = "serve GPU and training metrics to Prometheus"
DESCRIPTION = (
    "Serve this node's GPU series (NVML, GPM, clock events) "
    "and the training series of every hooked job (steps, phase seconds, memory) "
    "in the Prometheus text format on http://LISTEN:PORT/metrics.  "
    "docs/exporter.md lists every series."
)


def register(sub: Any) -> None:
    parser = types.command(sub, "exporter", SUMMARY, DESCRIPTION)
    parser.add_argument(
        "--port",
        type=types.integer(0, 65535, "a port number", "port must be 0-65535, got {text}"),
        default=DEFAULT_PORT,
        metavar="N",
        help=f"TCP port, 0-65535 (default {DEFAULT_PORT}; 0: any free one)",
    )
    parser.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="ADDR",
        help=f"address to bind (default {DEFAULT_LISTEN}: every interface; "
        "127.0.0.1 for this machine only)",
    )
    parser.add_argument(
        "--hostname",
        default=None,
        metavar="NAME",
        help="the hostname label (default: this machine's name; set it in containers)",
    )
    types.add_interval(parser)
    types.add_switches(
        parser,
        ("--processes", "add per-process series (at most 64 processes, most GPU memory first)"),
        ("--cmdline", "add user and command line labels to process and job series (sensitive)"),
    )
    source = parser.add_mutually_exclusive_group()
    types.add_demo(source, types.MONITOR_DEMOS, verb="serve")
    source.add_argument(
        "--replay", metavar="FILE", help="serve a recording made by 'gputui record'"
    )
    parser.set_defaults(func=main)


def _both(
    first: Callable[[Snapshot], None], then: Callable[[Snapshot], None] | None
) -> Callable[[Snapshot], None]:
    """``first``, then ``then`` (when there is one), for each snapshot."""
    if then is None:
        return first

    def both(snapshot: Snapshot) -> None:
        first(snapshot)
        then(snapshot)

    return both


def _saying_ends_early(replay: ReplaySource) -> Callable[[Snapshot], None]:
    """Called after each snapshot served: says once on stderr that the recording
    ends early (cut off, or still being written), when it does."""
    said = threading.Event()

    def check(_snapshot: Snapshot) -> None:
        replay.progress()  # counts the snapshots, once: that finds a cut-off end
        note = replay.ends_early_note()
        if note is not None and not said.is_set():
            said.set()
            print(f"gputui exporter: {note}", file=sys.stderr, flush=True)

    return check


def main(args: argparse.Namespace) -> int:
    from gputui.errors import NvmlUnavailable
    from gputui.exporter.collector import ExporterCollector, ExporterOptions
    from gputui.exporter.jobs import JobWatcher, current_hostname
    from gputui.exporter.server import make_server
    from gputui.sources.base import SnapshotSource
    from gputui.sources.live import LiveSource
    from gputui.sources.poller import Poller

    source: SnapshotSource | None
    recorded_host: str | None = None
    on_snapshot: Callable[[Snapshot], None] | None = None
    if args.demo or args.replay:
        from gputui.recording.replay import ReplaySource

        replay = (
            ReplaySource.demo(name=args.demo) if args.demo else ReplaySource.from_file(args.replay)
        )
        recorded_host = replay.header.hostname
        source = replay
        on_snapshot = _saying_ends_early(replay)
    else:
        try:
            source = LiveSource()
        except NvmlUnavailable as exc:
            print(
                f"gputui exporter: GPU series are off "
                f"({types.try_demo(str(exc), 'gputui exporter --demo')}); "
                "serving training-job series only",
                file=sys.stderr,
                flush=True,
            )
            source = None
    hostname = args.hostname or recorded_host or current_hostname()
    interval = args.interval or (source.natural_interval_s if source is not None else None) or 1.0
    # A recording stands for another machine: this node's jobs are not part of it.
    jobs = None if (args.demo or args.replay) else JobWatcher(hostname)
    collector = ExporterCollector(
        ExporterOptions(
            hostname=hostname, interval_s=interval, processes=args.processes, cmdline=args.cmdline
        ),
        gpu_enabled=source is not None,
        jobs=jobs,
    )
    what = source.label if source is not None else "GPU series off"
    server = make_server(
        args.listen,
        args.port,
        collector.render,
        f"{hostname}: {what}; hooked jobs "
        f"{'followed' if jobs is not None else 'not followed (recording)'}",
    )
    poller = None
    if source is not None:
        poller = Poller(
            source, interval, _both(collector.on_snapshot, on_snapshot), collector.on_error
        )
        poller.start()
    if jobs is not None:
        jobs.start()
    stop = threading.Event()

    def _stop(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    thread = threading.Thread(target=server.serve_forever, name="gputui-http", daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    print(
        f"gputui exporter: serving http://{_url_host(str(host))}:{port}/metrics "
        f"as hostname {hostname!r} ({what})",
        file=sys.stderr,
        flush=True,
    )
    if args.cmdline and args.listen not in ("127.0.0.1", "::1", "localhost"):
        print(
            "gputui exporter: --cmdline puts command lines in the series, readable by anyone "
            "who can reach this port",
            file=sys.stderr,
            flush=True,
        )
    try:
        while not stop.wait(1.0):
            pass
    finally:
        server.shutdown()
        server.server_close()
        if poller is not None:
            poller.stop()
            poller.source.close()
        if jobs is not None:
            jobs.stop()
    return 0


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
