"""``gputui cluster``: every node, GPU and training job of a cluster, read from
Prometheus or over SSH (one ``gputui serve --stdio`` per node)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from gputui.commands import args as types
from gputui.errors import GputuiError

SUMMARY = "every node of a cluster, from Prometheus or over SSH"
DESCRIPTION = (
    "Show the nodes, GPUs and training jobs of a cluster: what 'gputui exporter' "
    "(or NVIDIA's dcgm-exporter) report to a Prometheus server (--prometheus), or "
    "what each node says over SSH (--ssh): utilization, SM/tensor/DRAM activity, "
    "power, memory, throttling, processes, and the ranks of hooked jobs."
)


def register(sub: Any) -> None:
    parser = types.command(sub, "cluster", SUMMARY, DESCRIPTION, SSH_EPILOG)
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--prometheus",
        metavar="URL",
        help="the Prometheus server, e.g. http://prometheus:9090 (user:password@ for basic auth)",
    )
    where.add_argument(
        "--ssh",
        nargs="+",
        metavar="HOST",
        help="read these nodes over ssh (names, user@name or ssh config aliases)",
    )
    parser.add_argument(
        "--hosts-file",
        metavar="FILE",
        help="read over ssh the nodes listed in FILE too (one per line, # comments)",
    )
    parser.add_argument(
        "--ssh-config",
        metavar="FILE",
        help="with --ssh: the ssh client configuration to use (ssh -F FILE)",
    )
    parser.add_argument(
        "--remote-gputui",
        default="gputui",
        metavar="CMD",
        help="with --ssh: the gputui command on the nodes (default: gputui on their PATH)",
    )
    parser.add_argument(
        "--selector",
        default="",
        metavar="S",
        help="label matchers added to every query, e.g. 'cluster=\"a\"'",
    )
    types.add_switches(
        parser,
        ("--once", "print one snapshot and exit"),
        ("--json", "with --once: print JSON"),
    )
    types.add_seconds(
        parser,
        "--interval",
        0.5,
        3600.0,
        "seconds between refreshes, 0.5-3600 (default 5; with --ssh 1, each node's too)",
    )
    types.add_seconds(
        parser,
        "--timeout",
        0.1,
        120.0,
        "seconds to wait for each answer from Prometheus, or (--ssh) for each node's "
        "ssh connection, 0.1-120 (default 5)",
        default=5.0,
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


SSH_EPILOG = """\
over SSH:
  gputui cluster --ssh node1 node2 node3
  gputui cluster --hosts-file nodes.txt --ssh-config ~/.ssh/cluster.conf --once
  Each node runs 'gputui serve --stdio' through 'ssh -T -o BatchMode=yes' (keys or an
  agent: never a password prompt); a node without gputui is read with nvidia-smi and
  marked "nvidia-smi only". Unreachable, slow and misbehaving nodes are marked with the
  reason and called again, the delay doubling up to a minute. --once prints every node
  (and one line on stderr per node that did not answer) and exits 0 when at least one
  node answered, 2 when none did.
"""


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


def read_hosts_file(path: str) -> list[str]:
    """The hosts of a hosts file: the first word of each line, ``#`` comments left out."""
    from gputui.cluster.ssh import HostError, check_host

    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(1 << 20)
    except OSError as exc:
        raise GputuiError(f"gputui cluster: cannot read {path}: {exc.strerror or exc}") from None
    hosts = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        try:
            hosts.append(check_host(words[0]))
        except HostError as exc:
            raise GputuiError(f"gputui cluster: {path}, line {number}: {exc}") from None
    if not hosts:
        raise GputuiError(f"gputui cluster: {path} names no host")
    return hosts


def main_ssh(args: argparse.Namespace) -> int:
    from gputui.cluster.ssh import FIRST_DATA_S, HostError, SshOptions, check_host
    from gputui.cluster.ssh_source import SshClusterSource
    from gputui.commands.tty import has_terminal, need_terminal

    if args.at is not None or args.selector:
        raise GputuiError("gputui cluster: --at and --selector read Prometheus (not --ssh)")
    try:
        hosts = list(args.ssh or ()) + (read_hosts_file(args.hosts_file) if args.hosts_file else [])
        for host in hosts:
            check_host(host)
    except HostError as exc:
        raise GputuiError(f"gputui cluster: {exc}") from None
    if args.ssh_config not in (None, "none") and not os.path.isfile(args.ssh_config):
        raise GputuiError(f"gputui cluster: no such ssh config file: {args.ssh_config}")
    interval = args.interval or 1.0
    printed = "gputui cluster --ssh HOST... --once"
    if not args.once and not has_terminal():
        need_terminal("gputui cluster", printed)
    options = SshOptions(
        interval_s=interval,
        connect_timeout_s=args.timeout,
        ssh_config=args.ssh_config,
        remote_gputui=args.remote_gputui,
    )
    source = SshClusterSource(hosts, options)
    try:
        if args.once:
            return _once_ssh(source, args, args.timeout + FIRST_DATA_S)
        from gputui.tui.cluster.screen import make_cluster_app

        app = make_cluster_app(source, interval_s=interval, ascii_only=args.ascii)
        app.run()
        return int(app.return_code or 0)
    finally:
        source.close()


def _once_ssh(source: Any, args: argparse.Namespace, wait_s: float) -> int:
    from gputui import fmt
    from gputui.reports import cluster as report

    source.wait_settled(wait_s)
    snapshot = source.fetch()
    if args.json:
        report.print_json(snapshot)
    else:
        report.print_text(snapshot, ascii_only=args.ascii)
    answered = [n for n in snapshot.nodes if n.up]
    for node in snapshot.nodes:
        if not node.up:
            why = node.note or ("no answer yet" if node.state == "connecting" else node.state)
            print(f"gputui cluster: {fmt.clean(node.hostname)}: {fmt.clean(why)}", file=sys.stderr)
    if not answered:
        print("gputui cluster: no node answered", file=sys.stderr)
        return 2
    return 0


def main(args: argparse.Namespace) -> int:
    if args.json and not args.once:
        raise GputuiError("gputui cluster: --json needs --once")
    if args.ssh or args.hosts_file:
        if args.prometheus:
            raise GputuiError("gputui cluster: --prometheus or --ssh/--hosts-file, not both")
        return main_ssh(args)
    if not args.prometheus:
        raise GputuiError(
            "gputui cluster: say where to read: --prometheus URL, --ssh HOST... "
            "or --hosts-file FILE"
        )
    if args.ssh_config is not None:
        raise GputuiError("gputui cluster: --ssh-config goes with --ssh or --hosts-file")
    from gputui.cluster.client import PrometheusClient
    from gputui.cluster.source import ClusterSource
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

        app = make_cluster_app(source, interval_s=args.interval or 5.0, ascii_only=args.ascii)
        app.run()
        return int(app.return_code or 0)
    finally:
        source.close()
