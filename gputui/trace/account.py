"""The step's time account (DESIGN §10): every profiled step's wall time split
into exclusive buckets that sum to the step, the same from a live capture (the
hook's raw events) and from a trace file.

Each bucket is the union of its intervals over every host thread of the
process (backward runs its ops on the autograd engine's thread while the
training thread waits in ``backward()``), and claims only the time no earlier
bucket claimed, in the order data > user phase > communication > host sync >
kernel launch > torch dispatch; torch dispatch also holds torch's own host code
between its ops (torch.optim's step and zero_grad, the autograd engine between
its functions: ``Scan.torch_code``); what is left of the host's step is Python
outside torch.  The step itself is the host's ``ProfilerStep`` stretched to the
end of the GPU work launched in it (the TensorBoard plugin's step): the part past
the host's own range is the time the CPU ran ahead and the step waited for the
GPU.  On the GPU side: compute kernels, then communication kernels and copies
where no compute runs (exposed); the time no compute runs is split by what the
host did meanwhile.
Standard library only: the hook computes it inside the job.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Sequence
from itertools import pairwise
from operator import itemgetter
from typing import Any

from gputui.protocol.trace_metrics import StepAccount
from gputui.trace.links import open_ops
from gputui.trace.scan import (
    COLLECTIVE,
    COMM_OTHER,
    COPY_D2H,
    COPY_H2D,
    DATA,
    DISPATCH_OP,
    GPU_COLLECTIVE,
    GPU_COMM,
    GPU_COMPUTE,
    GPU_MEMCPY,
    GPU_MEMSET,
    GPU_OTHER,
    HOST_WINDOWS,
    LAUNCH_CALLS,
    LIBRARY_CODE,
    MODULE_CALLS,
    PHASE,
    PHASE_PREFIX,
    RT_DRIVER,
    RT_LAUNCH,
    RT_OTHER,
    RT_SYNC,
    STEP_WINDOWS,
    SYNC_CALLS,
    SYNC_GAPS,
    TORCH_CODE,
    Scan,
    after_sync,
    bits,
    merge_sorted,
    union,
)
from gputui.trace.timeline import (
    OP,
    Interval,
    Timeline,
    intersect,
    length,
    merge,
    subtract,
)

__all__ = ["LAUNCH_CALLS", "PHASE_PREFIX", "SYNC_CALLS", "step_account", "step_windows"]

#: each host bucket's layers in the scan's sweep, in the buckets' order of precedence
_BUCKET_BITS = (
    ("data", bits(DATA)),
    ("phase", bits(PHASE)),
    ("comm", bits(COLLECTIVE, COMM_OTHER)),
    ("sync", bits(RT_SYNC, RT_SYNC + RT_DRIVER)),
    ("launch", bits(RT_LAUNCH, RT_LAUNCH + RT_DRIVER)),
    ("dispatch", bits(DISPATCH_OP, RT_OTHER, RT_OTHER + RT_DRIVER, TORCH_CODE)),
)
#: the GPU's compute kernels, communication kernels and copies on a stream
_COMPUTE = bits(GPU_COMPUTE, GPU_COLLECTIVE)
_COMM = bits(GPU_COMM)
_COPY = bits(GPU_MEMCPY, GPU_MEMSET, GPU_OTHER)
_HOST, _STEPS, _BUBBLES = bits(HOST_WINDOWS), bits(STEP_WINDOWS), bits(SYNC_GAPS)
#: a trace's Python frames that call a module, and a numeric library's
_MODULE, _LIBRARY = bits(MODULE_CALLS), bits(LIBRARY_CODE)


class _Clipped:
    """A merged interval list, measured inside any window in O(log n)."""

    def __init__(self, merged: list[Interval]) -> None:
        self.starts = [s for s, _ in merged]
        self.ends = [e for _, e in merged]
        self.prefix = [0]
        for s, e in merged:
            self.prefix.append(self.prefix[-1] + e - s)

    def within(self, lo: int, hi: int) -> int:
        if hi <= lo or not self.starts:
            return 0
        i = bisect.bisect_right(self.ends, lo)  # first interval ending after lo
        j = bisect.bisect_left(self.starts, hi)  # first interval starting at/after hi
        if j <= i:
            return 0
        total = self.prefix[j] - self.prefix[i]
        if self.starts[i] < lo:
            total -= lo - self.starts[i]
        if self.ends[j - 1] > hi:
            total -= self.ends[j - 1] - hi
        return max(0, total)


def _fitted(totals: dict[str, int], host_wall: int, step_wall: int) -> tuple[dict[str, float], int]:
    """The host's buckets fitted to the steps' windows.  A host step can begin
    while the GPU still runs work launched before it (the first profiled step
    after warm-up, a step after one whose kernels outlast its host side): its
    window then starts later than its host range, and the host's time can exceed
    the windows'.  The buckets then shrink in proportion, so that the account
    adds up to the step (the shares stay the host's own)."""
    if host_wall <= step_wall or host_wall <= 0:
        return dict(totals), host_wall
    f = step_wall / host_wall
    return {b: v * f for b, v in totals.items()}, step_wall


def _count_within(starts: Sequence[int], lo: int, hi: int) -> int:
    return bisect.bisect_left(starts, hi) - bisect.bisect_left(starts, lo)


def step_windows(timeline: Timeline) -> tuple[list[Interval], list[Interval]]:
    """The steps of a timeline, as host windows and as the steps' own windows.

    A host window is a ``ProfilerStep`` range; the step's own window is that range
    stretched to the end of the GPU work launched in it, the trailing steps the
    profiler cut short left out (the TensorBoard plugin's steps,
    :func:`~gputui.trace.scan.device_steps`).  A timeline without step marks is
    one step: the span of its GPU activity (what comes before the first GPU
    activity is set-up, what comes after it tear-down), else of its host
    activity."""
    return _windows(Scan(timeline))


def _windows(scan: Scan) -> tuple[list[Interval], list[Interval]]:
    steps = scan.steps
    host = scan.host[: len(steps)]
    return [(s, e) for s, e, _ in host], [(s, e) for s, e, _ in steps]


#: the host buckets that claim time, in their order of precedence (Python outside
#: torch is what none of them claimed)
_HOST_ORDER = ("data", "phase", "comm", "sync", "launch", "dispatch")


def step_account(timeline: Timeline, scan: Scan | None = None) -> StepAccount | None:
    """The mean account of the timeline's steps (:func:`step_windows`); None
    without host events.  ``scan``: the timeline's scan, where one is made."""
    scan = Scan(timeline) if scan is None else scan
    host, windows = _windows(scan)
    if not windows:
        return None
    calls = scan.runtime
    if all(a[1] <= b[0] for a, b in pairwise(host)):
        return _swept(scan, host, windows)
    # overlapping steps: each step's own measure (the general arithmetic)
    ranges, rt, gpu = scan.ranges.lists, calls.lists, scan.gpu.lists

    def merged(*layers: list[object]) -> list[Interval]:
        return union(*(merge_sorted(layer) for layer in layers if layer))

    def rt_layer(bucket: int) -> list[Interval]:
        return merged(rt[bucket - RT_SYNC], rt[bucket - RT_SYNC + RT_DRIVER])

    raw = {
        "data": merged(ranges[DATA]),
        "phase": merged(ranges[PHASE]),
        "comm": merged(ranges[COLLECTIVE], ranges[COMM_OTHER]),
        "sync": rt_layer(RT_SYNC),
        "launch": rt_layer(RT_LAUNCH),
        "dispatch": union(
            merged(ranges[DISPATCH_OP]), rt_layer(RT_OTHER), merge_sorted(scan.torch_code)
        ),
    }
    parts = None
    if scan.gpu.has_parts:
        parts = (
            merged(gpu[GPU_COMPUTE - GPU_COMPUTE], gpu[GPU_COLLECTIVE - GPU_COMPUTE]),
            merged(gpu[GPU_COMM - GPU_COMPUTE]),
            merged(*(gpu[i - GPU_COMPUTE] for i in (GPU_MEMCPY, GPU_MEMSET, GPU_OTHER))),
        )
    return _account(scan, host, windows, raw, parts)


def _means(fitted: dict[str, float], n: int) -> dict[str, Any]:
    """Each host bucket's mean per step, as the account's ``{bucket}_us``."""
    return {f"{b}_us": round(v / n, 3) for b, v in fitted.items()}


def _call_counts(scan: Scan, host: list[Interval], n: int) -> dict[str, Any]:
    """The account's calls per step over the host steps: the synchronizing
    calls, the launching calls, and of the first the blocking copies by
    direction (None where the trace recorded no GPU activity to tell them by)
    and the others by the op they ran in (:func:`_sync_ops`)."""
    calls = scan.runtime

    def per_step(starts: list[int]) -> float:
        return round(sum(_count_within(starts, lo, hi) for lo, hi in host) / n, 3)

    def waited(starts: list[int], waits: list[int]) -> float:
        """The calls' time per step (those that start in a step)."""
        total = 0
        for lo, hi in host:
            total += sum(waits[bisect.bisect_left(starts, lo) : bisect.bisect_left(starts, hi)])
        return round(total / n, 3)

    copies, waits = calls.copy_starts, calls.copy_waits
    has_copies = calls.copies_seen
    counts, us = _sync_ops(scan, host, n)
    return {
        "sync_ops_per_step": counts,
        "sync_ops_us_per_step": us,
        "sync_calls_per_step": per_step(calls.sync_starts),
        "launch_calls_per_step": per_step(calls.launch_starts),
        "blocking_h2d_per_step": per_step(copies[COPY_H2D]) if has_copies else None,
        "blocking_d2h_per_step": per_step(copies[COPY_D2H]) if has_copies else None,
        "blocking_h2d_us_per_step": (
            waited(copies[COPY_H2D], waits[COPY_H2D]) if has_copies else None
        ),
        "blocking_d2h_us_per_step": (
            waited(copies[COPY_D2H], waits[COPY_D2H]) if has_copies else None
        ),
    }


_START = itemgetter(0)
#: the most ops :attr:`StepAccount.sync_ops_per_step` names
SYNC_OPS = 8
#: how many ranges before a call (by start) its op is looked for among, before
#: the whole list is read for the ops not found there
_NEAR = 64


def _sync_ops(
    scan: Scan, host: list[Interval], n: int
) -> tuple[dict[str, float], dict[str, float]]:
    """The synchronizing calls per step that are no blocking copy
    (cudaStreamSynchronize, cudaDeviceSynchronize, ...) by the op they ran in,
    the most first (:data:`SYNC_OPS` of them), and the same ops' calls' time
    per step (us): the op whose ``External id`` the call carries (of several,
    the last to start at or before the call), "" for a call in no op.  Where no
    call carries an op's id (a hook's capture), the innermost op open on the
    call's thread when it starts (:func:`~gputui.trace.links.open_ops`)."""
    syncs = scan.runtime.explicit_syncs
    starts = [r[0] for r in syncs]  # (the calls are sorted by start)
    inside = [
        r
        for lo, hi in host
        for r in syncs[bisect.bisect_left(starts, lo) : bisect.bisect_left(starts, hi)]
    ]
    if not inside:
        return {}, {}
    ranges = scan.timeline.ranges  # sorted by start
    if not any(r[5] >= 0 for r in scan.timeline.runtime):
        # calls that carry no op's id (a hook's capture): the op open around each
        opened = open_ops(ranges, inside, with_ids=False)
        return _per_op(["" if op is None else op[2] for op in opened], inside, n)
    got: list[str] = []
    far: list[int] = []  # the calls whose op is not among the ranges just before them
    for k, r in enumerate(inside):
        ext = r[5]
        got.append("")
        if ext < 0:
            continue
        # the op starts at or before its call, most often a few ranges before
        i = bisect.bisect_right(ranges, r[0], key=_START)
        for j in range(i - 1, max(-1, i - 1 - _NEAR), -1):
            h = ranges[j]
            if h[5] == ext and h[4] == OP:
                got[k] = h[2]
                break
        else:
            far.append(k)
    if far:
        wanted = {inside[k][5] for k in far}
        by_id: dict[int, list[Any]] = {}
        for h in ranges:
            if h[5] in wanted and h[4] == OP:
                by_id.setdefault(h[5], []).append(h)
        for k in far:
            r = inside[k]
            ops = by_id.get(r[5])
            if ops:
                i = bisect.bisect_right(ops, r[0], key=_START)
                if i:
                    got[k] = ops[i - 1][2]
    return _per_op(got, inside, n)


def _per_op(
    names: list[str], calls: list[Any], n: int
) -> tuple[dict[str, float], dict[str, float]]:
    """The calls per step by their op's name (``names[k]`` is ``calls[k]``'s),
    the most first (:data:`SYNC_OPS` of them), and their time per step (us):
    the union of their calls (in start order), so that calls on two threads at
    once count once, as the account's sync bucket counts them (a vLLM engine's
    event waits beside a device-wide synchronization on another thread summed
    to more than the window)."""
    counts = Counter(names)
    waited: Counter[str] = Counter()
    reach: dict[str, int] = {}  # per name, the end of its calls so far
    for name, r in zip(names, calls, strict=True):
        start, end = r[0], r[1]
        last = reach.get(name)
        if last is not None and start < last:
            start = last  # (the part before is counted already)
        if end > start:
            waited[name] += end - start
            reach[name] = end
    top = counts.most_common(SYNC_OPS)
    return (
        {name: round(c / n, 3) for name, c in top},
        {name: round(waited[name] / n, 3) for name, _c in top},
    )


def _swept(scan: Scan, host: list[Interval], windows: list[Interval]) -> StepAccount:
    """The account from the scan's sweep (steps that do not overlap)."""
    lens = scan.swept
    n = len(windows)
    totals = dict.fromkeys((b for b, _ in _BUCKET_BITS), 0)
    split = dict.fromkeys(totals, 0)
    compute = comm = copy = rest = model = 0
    for mask, us in lens.items():
        top = next((b for b, m in _BUCKET_BITS if mask & m), None)
        if mask & _HOST:
            if top is not None:
                totals[top] += us
            elif mask & _MODULE and not mask & _LIBRARY:
                model += us
        if mask & _STEPS:
            if mask & _COMPUTE:
                compute += us
            else:
                if mask & _COMM:
                    comm += us
                elif mask & _COPY:
                    copy += us
                if not mask & _BUBBLES:
                    rest += us
                    if top is not None:
                        split[top] += us
    has_gpu = scan.gpu.has_parts
    idle_by: dict[str, float] | None = None
    if has_gpu:
        split["sync"] += length(scan.sync_gaps)
        split["python"] = max(0, rest - sum(split[b] for b, _ in _BUCKET_BITS))
        idle_by = {b: round(v / n, 3) for b, v in split.items() if v > 0}
    step_wall = sum(hi - lo for lo, hi in windows)
    fitted, host_wall = _fitted(totals, sum(hi - lo for lo, hi in host), step_wall)
    python = max(0, host_wall - sum(fitted.values()))
    return StepAccount(
        steps=n,
        step_us=round(step_wall / n, 3),
        **_means(fitted, n),
        python_us=round(python / n, 3),
        model_python_us=_model_python(scan, model, python, host, step_wall, n),
        ahead_us=round(max(0, step_wall - host_wall) / n, 3),
        gpu_busy_us=round((compute + comm + copy) / n, 3) if has_gpu else None,
        **_call_counts(scan, host, n),
        gpu_idle_us=idle_by,
        gpu_compute_us=round(compute / n, 3) if has_gpu else None,
        gpu_comm_us=round(comm / n, 3) if has_gpu else None,
        gpu_copy_us=round(copy / n, 3) if has_gpu else None,
    )


def _model_python(
    scan: Scan, model: float, python: float, host: list[Interval], step_wall: int, n: int
) -> float | None:
    """The account's ``model_python_us``: of the host's time outside every
    bucket, ``model`` µs fell inside a module call of the trace's Python stack,
    fitted to the steps as the buckets are (:func:`_fitted`) and at most the
    Python bucket; None for a trace without a module call in its stack."""
    if not scan.ranges.module_calls:
        return None
    host_wall = sum(hi - lo for lo, hi in host)
    if host_wall > step_wall > 0:
        model = model * step_wall / host_wall
    return round(min(model, python) / n, 3)


def _account(
    scan: Scan,
    host: list[Interval],
    windows: list[Interval],
    raw: dict[str, list[Interval]],
    parts: tuple[list[Interval], list[Interval], list[Interval]] | None,
) -> StepAccount:
    """The account from the steps' windows, each host bucket's merged intervals
    (not yet exclusive), the scan (its runtime calls' pass: the synchronizing
    calls, the starts of the synchronizing and launching calls), and the GPU's merged
    compute kernels, communication kernels and copies (None without GPU
    activity)."""
    # each bucket keeps only what the earlier ones left
    claimed: list[Interval] = []
    mine: dict[str, list[Interval]] = {}
    for bucket in _HOST_ORDER:
        mine[bucket] = subtract(raw[bucket], claimed)
        claimed = merge([*claimed, *mine[bucket]])
    exclusive = {b: _Clipped(iv) for b, iv in mine.items()}
    totals = dict.fromkeys(exclusive, 0)
    host_wall = 0
    # the module calls' time that no bucket claimed, less a numeric library's
    module_calls = scan.ranges.module_calls
    in_model = _Clipped(
        subtract(
            subtract(merge_sorted(module_calls), claimed),
            merge_sorted(scan.ranges.library_code),
        )
        if module_calls
        else []
    )
    model = 0
    for lo, hi in host:
        host_wall += hi - lo
        model += in_model.within(lo, hi)
        for bucket, clipped in exclusive.items():
            totals[bucket] += clipped.within(lo, hi)
    step_wall = sum(hi - lo for lo, hi in windows)
    n = len(windows)
    # the GPU side, over the steps' own windows: compute kernels; communication
    # kernels and copies where no compute runs (exposed); the rest idle
    span = merge(windows)
    gpu_busy: float | None = None
    idle_by: dict[str, float] | None = None
    exposed: dict[str, float] = {}
    if parts is not None:
        compute, comm, copy = (intersect(span, p) for p in parts)
        comm = subtract(comm, compute)
        copy = subtract(subtract(copy, compute), comm)
        gpu_busy = length(merge([*compute, *comm, *copy]))
        exposed = {"compute": length(compute), "comm": length(comm), "copy": length(copy)}
        # the time no compute runs, split by what the host did meanwhile
        idle = subtract(span, compute)
        bubbles = merge(after_sync(idle, scan.runtime.sync_calls))
        rest = subtract(idle, bubbles)
        split = {b: length(intersect(rest, mine[b])) for b in _HOST_ORDER}
        split["sync"] += length(bubbles)
        split["python"] = max(0, length(rest) - sum(split[b] for b in _HOST_ORDER))
        idle_by = {b: round(v / n, 3) for b, v in split.items() if v > 0}
    fitted, fitted_wall = _fitted(totals, host_wall, step_wall)
    python = max(0, fitted_wall - sum(fitted.values()))
    return StepAccount(
        steps=n,
        step_us=round(step_wall / n, 3),
        **_means(fitted, n),
        python_us=round(python / n, 3),
        model_python_us=_model_python(scan, model, python, host, step_wall, n),
        ahead_us=round(max(0, step_wall - fitted_wall) / n, 3),
        gpu_busy_us=None if gpu_busy is None else round(gpu_busy / n, 3),
        **_call_counts(scan, host, n),
        gpu_idle_us=idle_by,
        gpu_compute_us=None if parts is None else round(exposed["compute"] / n, 3),
        gpu_comm_us=None if parts is None else round(exposed["comm"] / n, 3),
        gpu_copy_us=None if parts is None else round(exposed["copy"] / n, 3),
    )
