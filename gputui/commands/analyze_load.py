"""The traces of ``gputui analyze`` read and summarized, rank by rank.

One file is read in this process; the batches of a large one are decoded by
up to one forked worker per CPU beside it (:mod:`gputui.tracefile.farm`).
Several files (the ranks of a job) are read
by up to one worker process per CPU, never more than there are files; each
worker reads its file and hands back the rank's summary (the analysis' input,
some kilobytes), never its events.  The workers are forked from a fork server
(``multiprocessing``'s ``forkserver`` start method) that imported the reader
and the analysis once: they start without the parent's memory or threads (a
plain ``fork`` would copy the parent as it is, threads' locks included) and
without importing everything again (``spawn`` would start an interpreter and
import the reader per worker).  A bad file gives the same one line, and the
same exit status, from a worker as from this process: the first bad file in
the order the files are given.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from gputui import fmt
from gputui.commands.analyze_progress import REDRAW_S, LoadProgress
from gputui.commands.analyze_ranks import TraceOrigin, job_warnings

if TYPE_CHECKING:
    from gputui.analysis.trace_summary import TraceSummary
    from gputui.tracefile.reader import DeviceProps, TraceFile


class RankRead:
    """What one file gives the analysis: where it comes from and its summary
    (ranked by ``distributedInfo``, else -1 until the files' order places it).
    A plain class: a dataclass costs a millisecond to define, on every run."""

    __slots__ = ("origin", "summary")

    def __init__(self, origin: TraceOrigin, summary: TraceSummary) -> None:
        self.origin = origin
        self.summary = summary


def cpus() -> int:
    """The CPUs this process may run on (its affinity; at most ``os.cpu_count()``)."""
    count = os.cpu_count() or 1
    try:
        return max(1, min(len(os.sched_getaffinity(0)), count))
    except (AttributeError, OSError):
        return count


def workers_for(files: int, jobs: int | None = None) -> int:
    """How many files are read at once: ``jobs`` (default: one per CPU), never
    more than the files; 1 reads in this process."""
    return max(1, min(cpus() if jobs is None else jobs, files))


@contextlib.contextmanager
def without_cyclic_gc() -> Iterator[None]:
    """A trace becomes millions of small records without cycles: reference
    counting frees them, and the cyclic collector would only walk them again
    and again (about a fifth of the run time on a 50 MB trace)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _device(tf: TraceFile) -> DeviceProps | None:
    """The GPU the trace's activity ran on, as its header describes it."""
    if not tf.devices:
        return None
    used = Counter(a.device for a in tf.timeline.gpu)
    index = used.most_common(1)[0][0] if used else tf.devices[0].index
    return next((d for d in tf.devices if d.index == index), tf.devices[0])


def _origin(tf: TraceFile) -> TraceOrigin:
    return TraceOrigin(tf.path, tf.rank, tf.world_size, tf.host_pid, tf.trace_id)


def _summary(
    tf: TraceFile, rank: int, rank_from: str, include_last_step: bool, top: int
) -> TraceSummary:
    from gputui.analysis.trace_summary import summarize

    dev = _device(tf)
    return summarize(
        tf.timeline,
        rank,
        rank_from,
        tf.path,
        world_size=tf.world_size,
        device_name=None if dev is None else dev.name,
        device_memory_bytes=None if dev is None else dev.total_memory_bytes,
        compute_capability=None if dev is None else dev.compute_capability,
        rocm=dev is not None and dev.rocm,
        include_last_step=include_last_step,
        top=top,
        op_rows=tf.op_rows,
        step_flops=tf.step_flops,
    )


def _copy_of(path: str, trace_id: str | None, ids: dict[str, str], warnings: list[str]) -> bool:
    """Whether the file at ``path`` is a copy of one read before (the same
    trace_id); ``warnings`` gets a line when it is."""
    if trace_id is not None and trace_id in ids:
        warnings.append(
            f"{fmt.clean(path)}: a copy of {fmt.clean(ids[trace_id])} (the same "
            "trace_id); read once"
        )
        return True
    if trace_id is not None:
        ids[trace_id] = path
    return False


def load(
    paths: Sequence[str],
    include_last_step: bool = False,
    top: int = 30,
    warnings: list[str] | None = None,
    *,
    jobs: int | None = None,
    progress: TextIO | None = None,
    leaving: bool = False,
) -> list[TraceSummary]:
    """Every trace file named by ``paths``, summarized, by rank.  A file named
    twice, or a copy of another (the same trace_id), is read once; ``warnings``
    gets a line for each, and for each reason the files are not the ranks of one
    job (``analyze_ranks``).  ``jobs``: files read at once (default: one per
    CPU).  ``progress``: the stream for the progress bar (a terminal's).
    ``leaving``: the process ends right after (``gputui analyze``): the last
    trace read in this process is not freed (:data:`LEFT_TO_EXIT`)."""
    from gputui.tracefile.reader import find_traces

    said: list[str] = [] if warnings is None else warnings
    files = find_traces(paths, said)
    sizes = [_size(p) for p in files]
    bar = LoadProgress(sum(sizes), len(files), progress if progress is not None else sys.stderr)
    try:
        with without_cyclic_gc():
            n = workers_for(len(files), jobs)
            # the processes the command may use: a large file's batches are
            # decoded by those its files leave (one file, or fewer than CPUs)
            budget = cpus() if jobs is None else jobs
            if n == 1:
                return _serial(files, sizes, include_last_step, top, said, bar, leaving, budget)
            farm = budget // n if len(files) <= n else 0
            return _parallel(files, n, include_last_step, top, said, bar, farm)
    finally:
        bar.close()


#: the last trace ``gputui analyze`` read, held until the process ends: freeing
#: its millions of records costs a quarter of a second a gigabyte of JSON, and
#: the command leaves without the interpreter's teardown (``cli.entry``)
LEFT_TO_EXIT: list[Any] = []


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # said when it is read
        return 0


def _serial(
    files: Sequence[Path],
    sizes: Sequence[int],
    include_last_step: bool,
    top: int,
    warnings: list[str],
    bar: LoadProgress,
    leaving: bool = False,
    workers: int = 0,
) -> list[TraceSummary]:
    from gputui.tracefile.reader import read_trace

    out: list[TraceSummary] = []
    origins: list[TraceOrigin] = []
    ids: dict[str, str] = {}
    before_bytes = before_events = 0
    for done, (path, size) in enumerate(zip(files, sizes, strict=True)):

        def said(
            bytes_read: int,
            events: int,
            base: tuple[int, int, int] = (before_bytes, before_events, done),
        ) -> None:
            bar.update(base[0] + bytes_read, base[1] + events, base[2])

        tf = read_trace(path, said if bar.enabled else None, workers=workers)
        before_bytes += size
        before_events += tf.timeline.events
        if _copy_of(tf.path, tf.trace_id, ids, warnings):
            continue
        bar.summarizing(before_bytes, before_events, done)
        position = len(origins)
        origins.append(_origin(tf))
        if tf.rank is not None:
            out.append(_summary(tf, tf.rank, "distributedInfo", include_last_step, top))
        else:
            out.append(_summary(tf, position, "order", include_last_step, top))
        if leaving and done == len(files) - 1:
            LEFT_TO_EXIT[:] = [tf]
        del tf  # one file's events at a time
        bar.update(before_bytes, before_events, done + 1)
    warnings.extend(job_warnings(origins))
    out.sort(key=lambda s: s.rank)
    return out


# -- worker processes ------------------------------------------------------------------------
#: (in a worker) bytes read and events decoded per file, two slots a file
_SLOTS: Any = None


def _worker_init(slots: Any) -> None:
    global _SLOTS
    _SLOTS = slots
    gc.disable()  # as in the parent: reference counting frees the records


def read_rank(index: int, path: str, include_last_step: bool, top: int, farm: int = 0) -> RankRead:
    """(in a worker) One file read and summarized; its events stay here (a
    large file's batches decoded by up to ``farm`` processes of its own)."""
    from gputui.tracefile.reader import read_trace

    slots = _SLOTS

    def said(bytes_read: int, events: int) -> None:
        if slots is not None:
            slots[2 * index] = bytes_read
            slots[2 * index + 1] = events

    tf = read_trace(path, said, workers=farm)
    said(tf.file_bytes, tf.timeline.events)
    if tf.rank is not None:
        summary = _summary(tf, tf.rank, "distributedInfo", include_last_step, top)
    else:
        summary = _summary(tf, -1, "order", include_last_step, top)
    return RankRead(_origin(tf), summary)


def _context() -> Any:
    import multiprocessing  # only for several files: one file is read without it

    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if ctx.get_start_method() == "forkserver":
        ctx.set_forkserver_preload([__name__])
    return ctx


def _said(bar: LoadProgress, bytes_read: int, events: int, done: int) -> None:
    """The ranks' progress: the bar while files are read; once every byte is
    read, the summaries are what is left (each worker makes its file's)."""
    if bytes_read >= bar.total_bytes and done < bar.ranks:
        bar.summarizing(bytes_read, events, done)
    else:
        bar.update(bytes_read, events, done)


def _parallel(
    files: Sequence[Path],
    workers: int,
    include_last_step: bool,
    top: int,
    warnings: list[str],
    bar: LoadProgress,
    farm: int = 0,
) -> list[TraceSummary]:
    ctx = _context()
    slots = ctx.Array("q", 2 * len(files), lock=False)
    # the pool's exit terminates its workers: a bad file ends the command at once
    with ctx.Pool(workers, initializer=_worker_init, initargs=(slots,)) as pool:
        results = [
            pool.apply_async(read_rank, (i, str(path), include_last_step, top, farm))
            for i, path in enumerate(files)
        ]
        while True:
            waiting = next((r for r in results if not r.ready()), None)
            if waiting is not None:
                waiting.wait(REDRAW_S)
            done = sum(r.ready() for r in results)
            _said(bar, sum(slots[0::2]), sum(slots[1::2]), done)
            for r in results:  # the first bad file in order, once those before it are read
                if not r.ready():
                    break
                if not r.successful():
                    r.get()  # raises the worker's error
            if done == len(results):
                break
        reads: list[RankRead] = [r.get() for r in results]
    out: list[TraceSummary] = []
    origins: list[TraceOrigin] = []
    ids: dict[str, str] = {}
    for read in reads:
        origin = read.origin
        if _copy_of(origin.path, origin.trace_id, ids, warnings):
            continue
        position = len(origins)
        origins.append(origin)
        summary = read.summary
        if origin.rank is None:
            summary = replace(summary, rank=position, rank_from="order")
        out.append(summary)
    warnings.extend(job_warnings(origins))
    out.sort(key=lambda s: s.rank)
    return out
