"""Trace events, as the standard JSON decoder gives them (dicts), turned into
:mod:`gputui.trace.timeline` records: HTA's reading of a Chrome trace.

The typed reader (:mod:`gputui.tracefile.typed`) gives the same records from its
Structs and hands this module every batch it cannot type (an odd value anywhere
in it), so the two agree by construction on those."""

from __future__ import annotations

from math import ceil, floor
from typing import Any, cast

from gputui.trace.timeline import (
    ANNOTATION,
    DRIVER,
    GPU_ANNOTATION,
    GPU_OTHER,
    HOST_OTHER,
    KERNEL,
    MEMCPY,
    MEMSET,
    OP,
    PYTHON,
    RUNTIME,
    SYNC,
    SYNC_NAMES,
    GpuActivity,
    HostRange,
    RuntimeCall,
    Timeline,
    as_int,
    collective_of,
)

#: categories, lower-cased (older traces say "Kernel", "Memcpy", "Runtime")
GPU_KINDS = {
    "kernel": KERNEL,
    "concurrent_kernel": KERNEL,
    "mtia_ccp_events": KERNEL,
    "gpu_memcpy": MEMCPY,
    "memcpy": MEMCPY,
    "gpu_memset": MEMSET,
    "memset": MEMSET,
    "cuda_sync": SYNC,
}
HOST_KINDS = {
    "cpu_op": OP,
    "operator": OP,
    "python": OP,
    "user_annotation": ANNOTATION,
    "gpu_user_annotation": GPU_ANNOTATION,
    "python_function": PYTHON,
}
RUNTIME_CATS = frozenset({"cuda_runtime", "runtime"})
#: host-side categories: never GPU activity, even with a stream in their args
#: (Triton's host-side launcher ops carry ``args.stream``; HTA counts them as
#: GPU work, which they are not)
HOST_CATS = frozenset(
    {
        "cpu_op",
        "operator",
        "python",
        "user_annotation",
        "python_function",
        "cuda_runtime",
        "runtime",
        "cuda_driver",
    }
)
#: a time beyond this (µs) is no time: infinities and overflowing values are skipped
HUGE_US = 1e300


class Builder:
    """Turns trace events into timeline records (HTA's reading of them)."""

    def __init__(self) -> None:
        self.timeline = Timeline()
        self.names: dict[str, str] = {}
        self.threads: dict[Any, int] = {}
        #: each thread id's one int, which every record of the thread shares (a
        #: decoder makes an int per event: 32 bytes a record, 70 MB a gigabyte)
        self.tids: dict[int, int] = {}
        self.host_pid: int | None = None

    def thread(self, tid: Any) -> int:
        """A thread id as an int (some writers use strings), one object per id."""
        if type(tid) is int:
            return self.tids.setdefault(tid, tid)
        try:
            got = self.threads.get(tid)
        except TypeError:  # a list or an object: not hashable, named by its text
            tid = ("unhashable", repr(tid))
            got = self.threads.get(tid)
        if got is None:
            got = self.threads[tid] = -2 - len(self.threads)
        return got

    def add(self, events: list[Any]) -> None:
        """Turn a list of trace events into records.  Locals, not attributes, in
        the loop: a large trace has millions of events."""
        tl = self.timeline
        names = self.names
        thread = self.thread
        gpu_append = tl.gpu.append
        runtime_append = tl.runtime.append
        range_append = tl.ranges.append
        new = tuple.__new__  # a NamedTuple without its Python-level __new__
        gpu_kinds, host_kinds, runtime_cats = GPU_KINDS, HOST_KINDS, RUNTIME_CATS
        host_cats = HOST_CATS
        sync_names = SYNC_NAMES
        number = (float, int)
        huge = HUGE_US
        skipped = 0
        host_pid = self.host_pid
        for ev in events:
            if type(ev) is not dict:
                skipped += 1
                continue
            dur = ev.get("dur")
            cat = ev.get("cat")
            # HTA reads complete events only (flow, instant and metadata events
            # have no duration), and never the profiler's own "Trace" span.
            if dur is None or cat is None or cat == "Trace":
                continue
            if type(cat) is not str:
                cat = str(cat)
            ts: Any = ev.get("ts")
            # (NaN fails both comparisons)
            if (
                type(ts) not in number
                or type(dur) not in number
                or not -huge < ts < huge
                or not -huge < dur < huge
            ):
                skipped += 1
                continue
            name = ev.get("name")
            if type(name) is not str:
                name = "" if name is None else str(name)
            name = names.setdefault(name, name)
            args = ev.get("args")
            if type(args) is not dict:
                args = {}
            corr = args.get("correlation", -1)
            if type(corr) is not int:
                corr = as_int(corr)
            stream = args.get("stream", -1)
            if type(stream) is not int:
                stream = as_int(stream)
            ext = args.get("External id")
            if type(ext) is not int:
                ext = as_int(args.get("external id") if ext is None else ext)
            start = ceil(cast(float, ts))  # a number: checked above
            end = floor(ts + dur)
            if end < start:
                end = start
            if (stream >= 0 and cat not in host_cats and cat.lower() not in host_cats) or (
                name in sync_names
            ):
                # HTA's GPU events: on a stream (with a correlation id, normally),
                # or a device-wide sync.
                device = args.get("device")
                if type(device) is not int:
                    device = as_int(ev.get("pid"), 0)
                kind = gpu_kinds.get(cat) or gpu_kinds.get(cat.lower(), GPU_OTHER)
                gpu_append(
                    new(
                        GpuActivity,
                        (start, end, round(dur * 1000), kind, name, stream, device, corr, ext),
                    )
                )
                if "Collective name" in args:
                    _collective(tl, start, round(dur * 1000), args)
            elif corr >= 0:
                kind = RUNTIME if cat in runtime_cats or cat.lower() in runtime_cats else DRIVER
                tid = thread(ev.get("tid"))
                runtime_append(new(RuntimeCall, (start, end, name, tid, corr, ext, kind)))
            else:
                kind = host_kinds.get(cat) or host_kinds.get(cat.lower(), HOST_OTHER)
                tid = thread(ev.get("tid"))
                range_append(new(HostRange, (start, end, name, tid, kind, ext)))
                if host_pid is None and type(ev.get("pid")) is int:
                    host_pid = ev["pid"]
        self.host_pid = host_pid
        tl.events += len(events)
        tl.skipped += skipped


def _collective(tl: Timeline, start: int, dur_ns: int, args: dict[str, Any]) -> None:
    """A communication kernel's message (:func:`collective_of`), where its
    arguments name its collective."""
    c = collective_of(
        start,
        dur_ns,
        args.get("Collective name"),
        args.get("In msg nelems"),
        args.get("Out msg nelems"),
        args.get("dtype"),
        args.get("Group size"),
        args.get("In split size"),
    )
    if c is not None:
        tl.collectives.append(c)
