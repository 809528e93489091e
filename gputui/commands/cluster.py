"""``gputui cluster``: every node, GPU and training job of a cluster, read from
Prometheus."""

from __future__ import annotations

import argparse
from typing import Any

from gputui.commands import args as types

SUMMARY = "every node of a cluster, read from Prometheus"
DESCRIPTION = (
    "Show the nodes, GPUs and training jobs that 'gputui exporter' (or NVIDIA's "
    "dcgm-exporter) report to a Prometheus server: utilization, SM/tensor/DRAM "
    "activity, power, memory, throttling, and per-rank step phases with stragglers."
)


def register(sub: Any) -> None:
    parser = types.command(sub, "cluster", SUMMARY, DESCRIPTION)
    parser.add_argument(
        "--prometheus",
        required=True,
        metavar="URL",
        help="the Prometheus server, e.g. http://prometheus:9090 (user:password@ for basic auth)",
    )
    parser.add_argument(
        "--selector",
        default="",
        metavar="S",
        help="label matchers added to every query, e.g. 'cluster=\"a\"'",
    )
    parser.add_argument("--once", action="store_true", help="print one snapshot and exit")
    parser.add_argument("--json", action="store_true", help="with --once: print JSON")
    parser.add_argument(
        "--interval",
        type=types.seconds(0.5, 3600.0),
        default=5.0,
        metavar="S",
        help="seconds between refreshes, 0.5-3600 (default 5)",
    )
    parser.add_argument(
        "--timeout",
        type=types.seconds(0.1, 120.0),
        default=5.0,
        metavar="S",
        help="seconds to wait for each answer from Prometheus, 0.1-120 (default 5)",
    )
    parser.add_argument(
        "--at",
        type=_unix_time,
        default=None,
        metavar="TIME",
        help="show the cluster as it was at TIME (Unix seconds, or YYYY-MM-DDTHH:MM[:SS] local)",
    )
    types.add_ascii(parser)
    parser.set_defaults(func=main)


def _unix_time(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    import datetime

    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a time: {text!r} (Unix seconds, or e.g. 2026-05-01T14:30)"
        ) from None


def main(args: argparse.Namespace) -> int:
    from gputui.cluster.client import PrometheusClient
    from gputui.cluster.source import ClusterSource
    from gputui.errors import GputuiError

    if args.json and not args.once:
        raise GputuiError("gputui cluster: --json needs --once")
    from gputui.commands.tty import has_terminal, need_terminal

    clock = (lambda: args.at) if args.at is not None else None
    source = ClusterSource(
        PrometheusClient(args.prometheus, timeout_s=args.timeout), args.selector, clock=clock
    )
    try:
        if not args.once and not has_terminal():
            # Refused, but last: first what would stop the printed form this names
            # too (Prometheus unreachable, no series).
            source.fetch(())
            need_terminal("gputui cluster", f"gputui cluster --prometheus {args.prometheus} --once")
        if args.once:
            from gputui.reports import cluster as report

            snapshot = source.fetch(None if args.json else ())
            if args.json:
                report.print_json(snapshot)
            else:
                report.print_text(snapshot, ascii_only=args.ascii)
            return 0
        from gputui.tui.cluster.screen import make_cluster_app

        app = make_cluster_app(source, interval_s=args.interval, ascii_only=args.ascii)
        app.run()
        return int(app.return_code or 0)
    finally:
        source.close()
