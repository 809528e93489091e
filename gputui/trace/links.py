"""Which host op launched each runtime call, where a trace's ids do not say.

torch.profiler links a CUDA runtime call (a kernel launch, a copy) to the op
that made it by the call's ``External id``: the id of the innermost op open
on the calling thread (a ``record_function`` range is passed over).  Many traces in the wild
(torch 1.x and 2.x builds alike, the public DLRM, ResNet and SwitchTransformers
traces among them) instead write each call's correlation id there, and the same
on its GPU work: the ids then name no op, or a wrong one whose own id happens
to be equal.  Such a trace is recognised by its calls' two ids being equal, and
its links are rebuilt the way the profiler makes them: by which op encloses
the call on its thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter

from gputui.trace.timeline import OP, STEP_MARK, GpuActivity, HostRange, RuntimeCall, Timeline

#: runtime calls looked at to tell whether a trace's ids link ops
SAMPLE = 2000


def ids_are_correlations(runtime: Sequence[RuntimeCall]) -> bool:
    """True where most runtime calls that carry both ids give the same number
    for both (an even sample of them): the ids do not link ops.  A trace whose
    ids link ops has them from two counters, equal only by chance."""
    step = max(1, len(runtime) // SAMPLE)
    both = same = 0
    for call in runtime[::step]:
        if call.external_id >= 0 and call.correlation >= 0:
            both += 1
            same += call.external_id == call.correlation
    return both > 0 and 2 * same > both


def enclosing_ops(ranges: Sequence[HostRange], runtime: Sequence[RuntimeCall]) -> list[int]:
    """For each runtime call, the External id of the innermost op (a ``cpu_op``
    with an id) open on the call's thread when the call starts; -1 where none
    is.  A ``record_function`` range is passed over: the profiler links a call
    inside one to the op around it (as the NCCL ranges inside
    ``record_param_comms`` show on every recorded trace)."""
    return [-1 if op is None else op[5] for op in open_ops(ranges, runtime)]


def open_ops(
    ranges: Sequence[HostRange], calls: Sequence[RuntimeCall], *, with_ids: bool = True
) -> list[HostRange | None]:
    """For each call, the innermost op open on its thread when it starts (None
    where none is): of the ops (``cpu_op`` ranges; with ``with_ids``, those with
    an id; without, any but the step marks) that started by then and have not
    ended, the last to start, of two that start together the shorter."""
    ops: dict[int, list[HostRange]] = {}
    op = OP
    for r in ranges:
        if r[4] == op and (r[5] >= 0 if with_ids else not r[2].startswith(STEP_MARK)):
            got = ops.get(r[3])
            if got is None:
                ops[r[3]] = [r]
            else:
                got.append(r)
    by_thread: dict[int, list[int]] = {}
    for i, call in enumerate(calls):
        thread = call[3]
        if thread in ops:
            got_calls = by_thread.get(thread)
            if got_calls is None:
                by_thread[thread] = [i]
            else:
                got_calls.append(i)
    out: list[HostRange | None] = [None] * len(calls)
    starts = [call[0] for call in calls]
    by_start, by_end = itemgetter(0), itemgetter(1)
    for thread, indexes in by_thread.items():
        opened = ops[thread]
        opened.sort(key=by_end, reverse=True)  # (stable: of two that start
        opened.sort(key=by_start)  # together, the longer, outer one first)
        indexes.sort(key=starts.__getitem__)
        stack: list[HostRange] = []
        j, n = 0, len(opened)
        for i in indexes:
            t = starts[i]
            while j < n and opened[j][0] <= t:
                r = opened[j]
                while stack and stack[-1][1] < r[0]:
                    stack.pop()
                stack.append(r)
                j += 1
            while stack and stack[-1][1] < t:
                stack.pop()
            if stack:
                out[i] = stack[-1]
    return out


def relink(timeline: Timeline) -> dict[int, int] | None:
    """Where the trace's ids are correlations (:func:`ids_are_correlations`),
    give each runtime call the External id of the op enclosing it and each GPU
    activity that of its call (-1 where there is none), in place, and return
    the calls' links (correlation -> External id); None, with nothing changed,
    for a trace whose ids link ops."""
    runtime = timeline.runtime
    if not ids_are_correlations(runtime):
        return None
    new = tuple.__new__  # a NamedTuple without its Python-level __new__
    links: dict[int, int] = {}
    for i, ext in enumerate(enclosing_ops(timeline.ranges, runtime)):
        c = runtime[i]
        if c[5] != ext:
            runtime[i] = new(RuntimeCall, (c[0], c[1], c[2], c[3], c[4], ext, c[6]))
        if c[4] >= 0:
            links[c[4]] = ext
    gpu = timeline.gpu
    get = links.get
    for i, a in enumerate(gpu):
        ext = get(a[7], -1) if a[7] >= 0 else -1
        if a[8] != ext:
            gpu[i] = new(GpuActivity, (a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], ext))
    return links
