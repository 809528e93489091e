"""Whether several trace files are the ranks of one job.

``gputui analyze`` reads several files as several ranks.  That holds for the
files of one distributed job, each with its own ``distributedInfo.rank`` of
one world size; it does not for files of unrelated processes (a directory of
captures of different jobs), several captures of one process (different
times, not ranks), copies of one trace, or two files that say the same rank.
:func:`job_warnings` says which of these it sees, one line each, so the report
is read for what it is (the files are still analyzed, each on its own).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from gputui import fmt
from gputui.protocol.value import ValueBase, value_class
from gputui.reports.text import plural

#: the most pids, ranks or files named in one warning
MAX_NAMED = 5


@value_class
class TraceOrigin(ValueBase):
    """What a trace file says about where it comes from."""

    path: str
    rank: int | None  # distributedInfo.rank
    world_size: int | None
    host_pid: int | None
    trace_id: str | None = None


def _names(items: Sequence[object]) -> str:
    shown = ", ".join(fmt.clean(str(item), 80) for item in items[:MAX_NAMED])
    return shown + (f" and {len(items) - MAX_NAMED} more" if len(items) > MAX_NAMED else "")


def copies(origins: Sequence[TraceOrigin]) -> dict[int, int]:
    """Index of a file -> index of the earlier file it copies (the same trace_id)."""
    first: dict[str, int] = {}
    out: dict[int, int] = {}
    for k, origin in enumerate(origins):
        if origin.trace_id is None:
            continue
        if origin.trace_id in first:
            out[k] = first[origin.trace_id]
        else:
            first[origin.trace_id] = k
    return out


def job_warnings(origins: Sequence[TraceOrigin]) -> list[str]:
    """One line per reason the files are not (or not known to be) the ranks of
    one job; [] for one file, or for the ranks of one job."""
    if len(origins) < 2:
        return []
    ranked = [o for o in origins if o.rank is not None]
    unranked = [o for o in origins if o.rank is None]
    out: list[str] = []
    if unranked and ranked:
        out.append(
            f"{plural(len(unranked), 'trace')} without distributedInfo beside "
            f"{plural(len(ranked), 'trace')} with it ({_names([o.path for o in unranked])}): "
            "not ranks of one job; those are numbered by file order"
        )
    elif unranked:
        pids = list(dict.fromkeys(o.host_pid for o in unranked if o.host_pid is not None))
        if len(pids) > 1:
            out.append(
                f"{plural(len(unranked), 'trace')} without distributedInfo, of "
                f"{plural(len(pids), 'process', 'processes')} (pids {_names(pids)}): "
                "not ranks of one job; numbered by file order"
            )
        elif len(pids) == 1 and len(unranked) == len(origins):
            out.append(
                f"{plural(len(unranked), 'trace')} of one process (pid {pids[0]}), without "
                "distributedInfo: captures at different times, not ranks; numbered by file order"
            )
        else:
            out.append(
                f"{plural(len(unranked), 'trace')} without distributedInfo: not known to be "
                "ranks of one job; numbered by file order"
            )
    sizes = sorted({o.world_size for o in ranked if o.world_size is not None})
    if len(sizes) > 1:
        out.append(f"the traces say different world sizes ({_names(sizes)}): not ranks of one job")
    by_rank: dict[int, list[str]] = defaultdict(list)
    for o in ranked:
        if o.rank is not None:
            by_rank[o.rank].append(o.path)
    for rank, paths in sorted(by_rank.items()):
        if len(paths) > 1:
            out.append(
                f"rank {rank} is in {plural(len(paths), 'trace')} ({_names(paths)}): "
                f"two runs, or copies; each is shown as rank {rank}"
            )
    if len(sizes) == 1:
        beyond = sorted({o.rank for o in ranked if o.rank is not None and o.rank >= sizes[0]})
        if beyond:
            which = f"rank {beyond[0]} is" if len(beyond) == 1 else f"ranks {_names(beyond)} are"
            out.append(f"{which} outside the world size of {sizes[0]}")
    return out
