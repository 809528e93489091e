"""``gputui attach PID --memory-snapshot N [--json]``: record a hooked job's CUDA
allocation history for N steps and print the hook's summary.

The job does the work (``gputui.hook._memsnap``); the session waits for its
result with a timeout (:meth:`gputui.session.oneshot.OneShot.memory_snapshot`)
and the report prints it (:mod:`gputui.reports.memory`).  Every string in it
comes from the job (file names, function names): the text report cleans them;
the JSON keeps them exact.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gputui.session.oneshot import OnceOptions


def once(
    pid: int, steps: int, max_entries: int, options: OnceOptions, as_json: bool, ascii_only: bool
) -> int:
    from gputui.reports import memory as memory_report
    from gputui.session.oneshot import OneShot

    report = OneShot(options).memory_snapshot(pid, steps, max_entries)
    memory_report.output(report, as_json, ascii_only)
    return 0
