"""``gputui serve --stdio``: write a hello line, then one snapshot of this node
(GPUs, processes, host, hooked jobs) per interval, as JSON lines on standard
output, until standard input ends or the reader goes away.  Opens no socket:
'gputui cluster --ssh' runs it over ssh.  On a node without an NVIDIA driver it
serves the host and the reason there is no GPU (docs/json.md)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any

from gputui.commands import args as types
from gputui.errors import GputuiError

SUMMARY = "stream this node's snapshots as JSON lines (for gputui cluster --ssh)"
#: the help's description is the module's docstring, on one line
DESCRIPTION = " ".join((__doc__ or "").replace("``", "").split())


def register(sub: Any) -> None:
    parser = types.command(sub, "serve", SUMMARY, DESCRIPTION)
    parser.add_argument(
        "--stdio", action="store_true", required=True, help="serve on standard input and output"
    )
    played = parser.add_mutually_exclusive_group()
    types.add_demo(played, types.MONITOR_DEMOS, verb="serve")
    played.add_argument("--replay", metavar="FILE", help="serve this recording")
    types.add_interval(parser)
    parser.set_defaults(func=main)


def _hooked_jobs() -> list[dict[str, Any]]:
    """``gputui ls --json``'s entries, each with the job id the exporter gives it
    (so ranks of one job on several nodes group together)."""
    from gputui.client.job_group import list_jobs
    from gputui.commands.ls import job_entry
    from gputui.exporter.jobs import current_hostname, job_id_of
    from gputui.host.processes import read_environ

    host = current_hostname()
    entries = []
    for job in list_jobs()[0]:
        entry = job_entry(job)
        entry["job_id"] = job_id_of(job.first, host, job.first.pid, read_environ)
        entries.append(entry)
    return entries


def main(args: argparse.Namespace) -> int:
    from gputui import __version__
    from gputui.cluster.serve import HostOnlySource, JobsCache, serve
    from gputui.errors import NvmlUnavailable
    from gputui.exporter.jobs import current_hostname
    from gputui.protocol.paths import hooked_pids
    from gputui.sources.base import SnapshotSource

    source: SnapshotSource
    reason: str | None = None
    if args.demo or args.replay:
        from gputui.recording.replay import RecordingError, ReplaySource

        try:
            source = (
                ReplaySource.demo(name=args.demo)
                if args.demo
                else ReplaySource.from_file(args.replay)
            )
        except RecordingError as exc:
            raise GputuiError(f"gputui serve: {exc}") from None
        host = source.header.hostname or current_hostname()
    else:
        from gputui.sources.live import LiveSource

        try:
            source = LiveSource()
        except NvmlUnavailable as exc:
            reason = str(exc).split(";")[0].strip() or "no NVIDIA driver"
            source = HostOnlySource(reason)
        host = current_hostname()
    jobs = JobsCache(hooked_pids, _hooked_jobs) if not source.is_recording else None
    interval = args.interval or source.natural_interval_s or 1.0
    try:
        return serve(
            source,
            sys.stdout.buffer,
            sys.stdin.buffer,
            interval,
            host,
            __version__,
            jobs=jobs,
            gpu_unavailable=reason,
        )
    finally:
        source.close()
        # the reader is gone: nothing more can be written, and the interpreter's
        # final flush must not complain about it
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
