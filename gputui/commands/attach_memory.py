"""``gputui attach PID --memory-snapshot N [--json]``: record a hooked job's CUDA
allocation history for N steps and print the hook's summary.

The job does the work (``gputui.hook._memsnap``); this waits for its result with
a timeout and prints it.  Every string in it comes from the job (file names,
function names): the text report cleans them; the JSON keeps them exact.
"""

from __future__ import annotations

import sys
import time

from gputui import fmt
from gputui.analysis.engine import analyze
from gputui.analysis.evidence import job_evidence
from gputui.analysis.finding import Finding
from gputui.client.hook import Disconnected, HookClient
from gputui.errors import GputuiError
from gputui.protocol import memsnap as ms
from gputui.protocol.memsnap import MemorySnapshotResult, MemorySnapshotStatus
from gputui.protocol.schema import HookError
from gputui.reports.jsondoc import print_json
from gputui.reports.memory import json_doc, print_result
from gputui.session.oneshot import JobFailed


def snapshot_live(
    client: HookClient, steps: int, max_entries: int, timeout: float, quiet: bool
) -> MemorySnapshotResult:
    """Ask for a memory snapshot and wait for its result.  A job that cannot take
    one (no CUDA, an old torch) is a usage error (exit 2); a busy, refused or
    failed one, a job that exits or stops stepping, exit 1."""
    client.start()
    sid = client.request_memory_snapshot(steps, max_entries)
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        event = client.get(timeout=remaining) if remaining > 0 else None
        if event is None:
            raise JobFailed(
                f"gputui attach: the memory snapshot did not finish within {timeout:g} s "
                "(is the job still stepping?)"
            )
        if isinstance(event, Disconnected):
            raise JobFailed(
                f"gputui attach: job {client.pid} exited before the memory snapshot finished "
                f"({fmt.clean(event.reason)})"
            )
        if isinstance(event, HookError):
            if "unknown request type" in event.error:
                raise JobFailed(
                    f"gputui attach: the gputui hook in job {client.pid} does not take memory "
                    "snapshots (an older version): restart the job with this gputui"
                )
            raise JobFailed(f"gputui attach: hook: {fmt.clean(event.error)}")
        if isinstance(event, MemorySnapshotStatus) and event.id == sid:
            if event.ended:
                reason = fmt.clean(event.reason or "no reason given")
                if event.state == ms.UNSUPPORTED:
                    raise GputuiError(f"gputui attach: {reason}")
                raise JobFailed(f"gputui attach: memory snapshot {event.state}: {reason}")
            if not quiet:
                where = "" if event.step is None else f" from step {event.step}"
                print(f"memory snapshot: {event.state}{where}", file=sys.stderr)
        if isinstance(event, MemorySnapshotResult) and event.id == sid:
            if event.error:
                raise JobFailed(f"gputui attach: memory snapshot failed: {fmt.clean(event.error)}")
            return event


def findings(result: MemorySnapshotResult) -> list[Finding]:
    """What the analyzer makes of the snapshot alone (its growing sites)."""
    return analyze(job_evidence((), cuda=True, memory_snapshot=result))


def main(
    client: HookClient,
    steps: int,
    max_entries: int,
    timeout: float,
    as_json: bool,
    ascii_only: bool = False,
) -> int:
    result = snapshot_live(client, steps, max_entries, timeout, quiet=as_json)
    found = findings(result)
    if as_json:
        print_json(json_doc(client.pid, result, found))
    else:
        print_result(result, found, ascii_only=ascii_only)
    return 0


# -- the text report -------------------------------------------------------------------------
