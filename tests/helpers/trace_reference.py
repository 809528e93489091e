"""The trace metrics as they were computed before the shared passes of
:mod:`gputui.trace.scan`: one function per metric, each reading the whole
timeline (the step account, the TensorBoard plugin's step breakdown, HTA's
metrics, the markers, the kernel and CPU-op tables).  The tests hold the scan's
results to these on every kept trace and on generated timelines."""

from __future__ import annotations

import bisect
import functools
from collections import Counter
from collections.abc import Sequence
from typing import Any

from gputui.protocol.trace_metrics import STEP_CATEGORIES, StepAccount, StepBreakdown, TraceMetrics
from gputui.trace import tables
from gputui.trace import timeline as tl
from gputui.trace.markers import markers_of
from gputui.trace.scan import (
    COLLECTIVE_OPS,
    KERNEL_LAUNCHES,
    LAUNCH_CALLS,
    PHASE_PREFIX,
    SYNC_CALLS,
    device_steps,
    host_steps,
    is_dataloader,
)
from gputui.trace.timeline import (
    ANNOTATION,
    DRIVER,
    GPU_ANNOTATION,
    HTA_COMMUNICATION,
    KERNEL,
    MEMCPY,
    OP,
    RUNTIME,
    SYNC,
    GpuActivity,
    Interval,
    KernelTypes,
    RuntimeCall,
    Timeline,
    hta_window,
    intersect,
    length,
    merge,
    self_times,
    subtract,
)
from gputui.trace.trace_metrics import (
    comm_compute_overlap_pct,
    idle_breakdown,
    launch_stats,
    temporal_breakdown,
)

_COMM_PREFIXES = ("c10d::", "nccl:", "gloo:", "record_param_comms")


def _is_comm(name: str) -> bool:
    return name in COLLECTIVE_OPS or name.startswith(_COMM_PREFIXES)


def _role(name: str, kind: str) -> str | None:
    """The bucket a host range claims for (None: none, a step mark)."""
    if kind not in (OP, ANNOTATION):
        return None
    if is_dataloader(name):
        return "data"
    if name.startswith(PHASE_PREFIX):
        return "phase"
    if _is_comm(name):
        return "comm"
    if kind == OP and not name.startswith("ProfilerStep#"):
        return "dispatch"
    return None


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


def _count_within(starts: Sequence[int], lo: int, hi: int) -> int:
    return bisect.bisect_left(starts, hi) - bisect.bisect_left(starts, lo)


def step_windows(timeline: Timeline) -> tuple[list[Interval], list[Interval]]:
    """The steps of a timeline, as host windows and as the steps' own windows.

    A host window is a ``ProfilerStep`` range; the step's own window is that range
    stretched to the end of the GPU work launched in it, the trailing steps the
    profiler cut short left out (the TensorBoard plugin's steps,
    :func:`~gputui.trace.step_breakdown.device_steps`).  A timeline without step
    marks is one step: the span of its GPU activity (what comes before the first
    GPU activity is set-up, what comes after it tear-down), else of its host
    activity."""
    host = host_steps(timeline)
    if not host:
        return [], []
    steps = device_steps(timeline, host)
    host = host[: len(steps)]
    return [(s, e) for s, e, _ in host], [(s, e) for s, e, _ in steps]


def _raw_buckets(
    timeline: Timeline,
) -> tuple[dict[str, list[Interval]], list[Interval], list[int], list[int]]:
    """Each host bucket's intervals (not yet exclusive), the synchronizing calls'
    intervals, and the start times of the synchronizing and launching calls."""
    raw: dict[str, list[Interval]] = {b: [] for b in _HOST_ORDER}
    roles: dict[tuple[str, str], str | None] = {}  # a trace repeats few names
    for r in timeline.ranges:
        start, end = r.start_us, r.end_us
        if end <= start:
            continue
        key = (r.name, r.kind)
        role = roles.get(key, "")
        if role == "":
            role = roles[key] = _role(r.name, r.kind)
        if role is not None:
            raw[role].append((start, end))
    # An "async" copy from pageable host memory blocks the CPU until it is done
    # (it runs synchronously): host sync wait, not launch.
    blocking = {
        a.correlation
        for a in timeline.gpu
        if a.kind == MEMCPY and a.correlation >= 0 and "Pageable" in a.name
    }
    sync_calls: list[Interval] = []
    sync_starts: list[int] = []
    launch_starts: list[int] = []
    for c in timeline.runtime:
        if c.kind not in (RUNTIME, DRIVER):
            continue
        if c.name in SYNC_CALLS or (c.correlation in blocking and c.correlation >= 0):
            sync_starts.append(c.start_us)
            if c.end_us > c.start_us:
                raw["sync"].append((c.start_us, c.end_us))
                sync_calls.append((c.start_us, c.end_us))
        elif c.name in LAUNCH_CALLS:
            launch_starts.append(c.start_us)
            if c.end_us > c.start_us:
                raw["launch"].append((c.start_us, c.end_us))
        elif c.end_us > c.start_us:  # other runtime calls are torch's own overhead
            raw["dispatch"].append((c.start_us, c.end_us))
    sync_starts.sort()
    launch_starts.sort()
    sync_calls.sort()
    raw["dispatch"] += _torch_code(timeline)
    return raw, sync_calls, sync_starts, launch_starts


_ENGINE = "autograd::engine::evaluate_function"


def _torch_code(timeline: Timeline) -> list[Interval]:
    """torch's own host code between its ops, counted as torch dispatch: each
    optimizer's step or zero_grad range that no backward function starts in,
    and the time between two backward functions of a thread, 1 ms or less,
    that no op of any thread starts in."""
    ranges = sorted(timeline.ranges, key=lambda r: r.start_us)
    funcs = [r for r in ranges if r.kind == OP and r.name.startswith(_ENGINE)]
    op_starts = [r.start_us for r in ranges if _role(r.name, r.kind) == "dispatch"]
    out: list[Interval] = []
    optimizer = [
        r
        for r in ranges
        if r.kind == ANNOTATION
        and r.name.startswith(("Optimizer.step#", "Optimizer.zero_grad#"))
        and r.end_us > r.start_us
    ]
    for r in optimizer:
        if not any(r.start_us <= f.start_us < r.end_us for f in funcs):
            out.append((r.start_us, r.end_us))
    ends: dict[object, int] = {}
    for f in funcs:
        prev = ends.get(f.thread)
        ends[f.thread] = f.end_us if prev is None else max(prev, f.end_us)
        if prev is None or not 0 < f.start_us - prev <= 1000:
            continue
        if not any(prev < t < f.start_us for t in op_starts):
            out.append((prev, f.start_us))
    return out


#: the host buckets that claim time, in their order of precedence (Python outside
#: torch is what none of them claimed)
_HOST_ORDER = ("data", "phase", "comm", "sync", "launch", "dispatch")


def _after_sync(idle: list[Interval], sync_calls: list[Interval]) -> list[Interval]:
    """The idle time the GPU sat in because the CPU waited for it: each gap that
    a synchronizing call was waiting at when it began and returned in, from its
    start for as long as the call waited while the GPU was busy (not past the
    gap's end)."""
    out: list[Interval] = []
    for lo, hi in idle:
        waiting = [(s, e) for s, e in sync_calls if s <= lo <= e <= hi]
        if waiting:
            s, e = max(waiting)  # the latest call to begin
            busy_wait = (lo - s) - sum(
                max(0, min(g_hi, lo) - max(g_lo, s)) for g_lo, g_hi in idle if g_hi <= lo
            )
            out.append((lo, min(hi, lo + busy_wait + (e - lo))))
    return out


def _module_frame(name: str) -> bool:
    if name.startswith("nn.Module: "):
        return True
    return "torch/nn/modules/module.py(" in name and name.endswith(
        ("): _call_impl", "): _wrapped_call_impl")
    )


_LIBRARIES = ("numpy", "PIL", "scipy", "pandas", "cv2", "sklearn", "skimage")


def _library_frame(name: str) -> bool:
    if name.split("/", 1)[0] in _LIBRARIES and "/" in name:
        return True
    if not name.startswith("<built-in "):
        return False
    words = name.split()
    return len(words) >= 5 and words[3] == "of" and words[4].split(".")[0] in _LIBRARIES[:3]


def _model_python(
    timeline: Timeline,
    claimed: list[Interval],
    host: list[Interval],
    step_wall: int,
    python: float,
    n: int,
) -> float | None:
    """Host time in the steps inside a module call of the Python stack that no
    bucket claimed, less a numeric library's frames; None without a module call."""
    frames = [r for r in timeline.ranges if r.kind == tl.PYTHON]
    module = merge([(r.start_us, r.end_us) for r in frames if _module_frame(r.name)])
    if not any(_module_frame(r.name) for r in frames):
        return None
    library = merge([(r.start_us, r.end_us) for r in frames if _library_frame(r.name)])
    inside = subtract(subtract(module, claimed), library)
    model = sum(length(intersect(inside, [(lo, hi)])) for lo, hi in host)
    host_wall = sum(hi - lo for lo, hi in host)
    if host_wall > step_wall > 0:
        model = model * step_wall / host_wall
    return round(min(model, python) / n, 3)


def step_account(timeline: Timeline) -> StepAccount | None:
    """The mean account of the timeline's steps (:func:`step_windows`); None
    without host events."""
    host, windows = step_windows(timeline)
    if not windows:
        return None
    raw, sync_calls, sync_starts, launch_starts = _raw_buckets(timeline)
    # each bucket keeps only what the earlier ones left
    claimed: list[Interval] = []
    mine: dict[str, list[Interval]] = {}
    for bucket in _HOST_ORDER:
        mine[bucket] = subtract(merge(raw[bucket]), claimed)
        claimed = merge([*claimed, *mine[bucket]])
    exclusive = {b: _Clipped(iv) for b, iv in mine.items()}
    totals = dict.fromkeys(exclusive, 0)
    host_wall = 0
    for lo, hi in host:
        host_wall += hi - lo
        for bucket, clipped in exclusive.items():
            totals[bucket] += clipped.within(lo, hi)
    step_wall = sum(hi - lo for lo, hi in windows)
    n = len(windows)
    # the GPU side, over the steps' own windows: compute kernels; communication
    # kernels and copies where no compute runs (exposed); the rest idle
    parts = _gpu_parts(timeline)
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
        bubbles = merge(_after_sync(idle, sync_calls))
        rest = subtract(idle, bubbles)
        split = {b: length(intersect(rest, mine[b])) for b in _HOST_ORDER}
        split["sync"] += length(bubbles)
        split["python"] = max(0, length(rest) - sum(split[b] for b in _HOST_ORDER))
        idle_by = {b: round(v / n, 3) for b, v in split.items() if v > 0}
    kept: dict[str, float] = dict(totals)
    if host_wall > step_wall:
        # the host's steps outlast their windows: its buckets, in proportion
        scale = step_wall / host_wall
        kept = {b: v * scale for b, v in totals.items()}
        host_wall = step_wall
    claimed_total = sum(kept.values())
    python = max(0, host_wall - claimed_total)
    return StepAccount(
        steps=n,
        step_us=round(step_wall / n, 3),
        **{f"{b}_us": round(v / n, 3) for b, v in kept.items()},
        python_us=round(python / n, 3),
        model_python_us=_model_python(timeline, claimed, host, step_wall, python, n),
        ahead_us=round(max(0, step_wall - host_wall) / n, 3),
        gpu_busy_us=None if gpu_busy is None else round(gpu_busy / n, 3),
        sync_calls_per_step=round(
            sum(_count_within(sync_starts, lo, hi) for lo, hi in host) / n, 3
        ),
        launch_calls_per_step=round(
            sum(_count_within(launch_starts, lo, hi) for lo, hi in host) / n, 3
        ),
        gpu_idle_us=idle_by,
        gpu_compute_us=None if parts is None else round(exposed["compute"] / n, 3),
        gpu_comm_us=None if parts is None else round(exposed["comm"] / n, 3),
        gpu_copy_us=None if parts is None else round(exposed["copy"] / n, 3),
        **_sync_detail(timeline, host, n),
    )


def _sync_detail(timeline: Timeline, host: list[Interval], n: int) -> dict[str, Any]:
    """Of the synchronizing calls per step: the blocking copies by direction (the
    calls of copies from or to pageable memory; None without GPU activity), and
    the others by the op whose id they carry ("" for none), or where no call
    carries one, the op open around them; the eight most."""
    way = {
        a.correlation: "HtoD" in a.name
        for a in timeline.gpu
        if a.kind == MEMCPY and a.correlation >= 0 and "Pageable" in a.name
    }

    h2d = d2h = h2d_us = d2h_us = 0
    others: list[RuntimeCall] = []
    # each call once per step window it starts in, as the calls per step count
    for c in (c for lo, hi in host for c in timeline.runtime if lo <= c.start_us < hi):
        if c.kind not in (RUNTIME, DRIVER):
            continue
        if c.correlation >= 0 and c.correlation in way:
            if way[c.correlation]:
                h2d += 1
                h2d_us += c.end_us - c.start_us
            else:
                d2h += 1
                d2h_us += c.end_us - c.start_us
        elif c.name in SYNC_CALLS:
            others.append(c)
    ops: dict[int, list[tuple[int, str]]] = {}
    for r in sorted(timeline.ranges, key=lambda r: r.start_us):
        if r.kind == OP and r.external_id >= 0:
            ops.setdefault(r.external_id, []).append((r.start_us, r.name))

    def op_of(c: RuntimeCall) -> str:
        # of the ops with the call's id, the last to start at or before it
        before = [name for start, name in ops.get(c.external_id, ()) if start <= c.start_us]
        return before[-1] if before else ""

    ordered = sorted(timeline.ranges, key=lambda r: r.start_us)

    def open_op(c: RuntimeCall) -> str:
        # the calls carry no ids: of the ops open on the call's thread when it
        # starts, the last to start, of two that start together the shorter
        # (of two alike, the later)
        around = [
            (r.start_us, -r.end_us, i, r.name)
            for i, r in enumerate(ordered)
            if r.kind == OP
            and r.thread == c.thread
            and not r.name.startswith("ProfilerStep#")
            and r.start_us <= c.start_us <= r.end_us
        ]
        return max(around)[3] if around else ""

    by_op: dict[str, float] = {}
    by_op_us: dict[str, float] = {}
    if others:
        linked = any(c.external_id >= 0 for c in timeline.runtime)
        names = [op_of(c) if linked else open_op(c) for c in others]
        tally = Counter(names)
        by_op = {name: round(k / n, 3) for name, k in tally.most_common(8)}
        # the union of each op's calls: calls at once (two threads) count once
        spans: dict[str, list[tuple[int, int]]] = {}
        for c, m in zip(others, names, strict=True):
            spans.setdefault(m, []).append((c.start_us, c.end_us))
        by_op_us = {name: round(_union_us(spans[name]) / n, 3) for name in by_op}
    seen = bool(timeline.gpu)
    return {
        "blocking_h2d_per_step": round(h2d / n, 3) if seen else None,
        "blocking_d2h_per_step": round(d2h / n, 3) if seen else None,
        "blocking_h2d_us_per_step": round(h2d_us / n, 3) if seen else None,
        "blocking_d2h_us_per_step": round(d2h_us / n, 3) if seen else None,
        "sync_ops_per_step": by_op,
        "sync_ops_us_per_step": by_op_us,
    }


def _union_us(spans: list[tuple[int, int]]) -> int:
    """The length of the union of ``spans``."""
    total, reach = 0, None
    for lo, hi in sorted(spans):
        if reach is not None and lo < reach:
            lo = reach
        if hi > lo:
            total += hi - lo
            reach = hi
    return total


def _gpu_parts(
    timeline: Timeline,
) -> tuple[list[Interval], list[Interval], list[Interval]] | None:
    """The merged intervals of compute kernels, communication kernels and copies
    (memcpy, memset); None without GPU activity."""
    types = KernelTypes()
    compute: list[Interval] = []
    comm: list[Interval] = []
    copy: list[Interval] = []
    for a in timeline.gpu:
        if a.kind == SYNC or a.stream == -1 or a.end_us <= a.start_us:
            continue
        iv = (a.start_us, a.end_us)
        if a.kind == KERNEL:
            (comm if types(a.name) == HTA_COMMUNICATION else compute).append(iv)
        else:
            copy.append(iv)
    if not (compute or comm or copy):
        return None
    return merge(compute), merge(comm), merge(copy)


@functools.lru_cache(maxsize=1 << 16)
def _host_role(name: str) -> str | None:
    """The category of a host op or annotation by its name (None: a step mark).
    Remembered: a trace repeats few names many times."""
    if is_dataloader(name):
        return "dataloader"
    if name.startswith("ProfilerStep#"):
        return None
    if name in COLLECTIVE_OPS:
        return "communication"
    return "cpu_op"


def _role_ranges(timeline: Timeline) -> dict[str, list[Interval]]:
    roles: dict[str, list[Interval]] = {c: [] for c in STEP_CATEGORIES if c != "other"}
    collective_ids = {
        r.external_id for r in timeline.ranges if r.name in COLLECTIVE_OPS and r.external_id >= 0
    }
    types = KernelTypes()
    for a in timeline.gpu:
        iv = (a.start_us, a.end_us)
        if a.kind == tl.KERNEL:
            comm = a.external_id in collective_ids or types(a.name) == tl.HTA_COMMUNICATION
            roles["communication" if comm else "kernel"].append(iv)
        elif a.kind == tl.MEMCPY:
            roles["memcpy"].append(iv)
        elif a.kind == tl.MEMSET:
            roles["memset"].append(iv)
    for r in timeline.runtime:
        if r.kind == tl.RUNTIME:
            roles["runtime"].append((r.start_us, r.end_us))
    for start, end, name, _thread, kind, _ext in timeline.ranges:
        if kind in (tl.OP, tl.ANNOTATION):
            role = _host_role(name)
            if role is not None:
                roles[role].append((start, end))
    return {k: merge(v) for k, v in roles.items()}


def _gpu_utilization(gpu: Sequence[GpuActivity], lo: int, hi: int) -> float | None:
    if hi <= lo:
        return None
    per_device: dict[int, list[Interval]] = {}
    for a in gpu:
        if a.kind == tl.KERNEL:
            per_device.setdefault(a.device, []).append((a.start_us, a.end_us))
    if not per_device:
        return None
    busiest = max(per_device.values(), key=lambda iv: sum(e - s for s, e in iv))
    busy = length(intersect(merge(busiest), [(lo, hi)]))
    return round(100.0 * busy / (hi - lo), 2)


def step_breakdown(timeline: Timeline) -> StepBreakdown | None:
    """The plugin's overview breakdown; None for a trace without host activity."""
    host = host_steps(timeline)
    if not host:
        return None
    steps = device_steps(timeline, host)
    slots = merge((s, e) for s, e, _ in steps)
    totals: dict[str, int] = {}
    roles = _role_ranges(timeline)
    for category in STEP_CATEGORIES[:-1]:
        claimed = intersect(slots, roles[category])
        totals[category] = length(claimed)
        slots = subtract(slots, claimed)
    totals["other"] = length(slots)
    steps_us = sum(e - s for s, e, _ in steps)
    return StepBreakdown(
        steps=len(steps),
        steps_us=float(steps_us),
        **{f"{c}_us": float(totals[c]) for c in STEP_CATEGORIES},
        gpu_utilization_pct=_gpu_utilization(timeline.gpu, steps[0][0], steps[-1][1]),
        first_step=steps[0][2],
        step_us=tuple(float(e - s) for s, e, _ in steps),
    )


def compute(timeline: Timeline, include_last_step: bool = False) -> TraceMetrics:
    """Every metric, one function each (the code before the shared passes)."""
    window = hta_window(timeline, include_last_step)
    part = window.timeline
    types = KernelTypes()
    return TraceMetrics(
        steps_total=window.steps_total,
        last_step_dropped=window.last_step_dropped,
        temporal=temporal_breakdown(part.gpu, types),
        idle_breakdown=idle_breakdown(part.gpu, part.runtime),
        comm_compute_overlap_pct=comm_compute_overlap_pct(part.gpu, types),
        launch=launch_stats(part.gpu, part.runtime),
        step_breakdown=step_breakdown(timeline),
        account=step_account(timeline),
        markers=markers_of(
            {r.name for r in timeline.ranges},
            {r.name for r in timeline.runtime},
            {a.name for a in timeline.gpu if a.kind == tl.KERNEL},
            timeline.ranges,
            compiled_share=compiled_launch_share(timeline),
        ),
    )


def compiled_launch_share(timeline: Timeline) -> float | None:
    """Of the window's kernel launch calls, the share that starts inside one of
    torch.compile's ranges on its thread (every call against every range)."""
    prefixes = ("Torch-Compiled Region", "CompiledFunction", "## Call CompiledFxGraph")
    regions = [
        r for r in timeline.ranges if r.name.startswith(prefixes) and r.kind != tl.GPU_ANNOTATION
    ]
    w = window(timeline)
    if not regions or w is None:
        return None
    launches = [
        c for c in timeline.runtime if c.name in KERNEL_LAUNCHES and w[0] <= c.start_us < w[1]
    ]
    if not launches:
        return None
    inside = sum(
        1
        for c in launches
        if any(r.thread == c.thread and r.start_us <= c.start_us < r.end_us for r in regions)
    )
    return inside / len(launches)


def window(timeline: Timeline) -> tuple[int, int] | None:
    """The analyzer's window: the steps' span, each step stretched over its GPU work."""
    host = host_steps(timeline)
    if not host:
        return None
    steps = device_steps(timeline, host)
    host = host[: len(steps)]
    return (
        min(min(s for s, _, _ in steps), min(s for s, _, _ in host)),
        max(max(e for _, e, _ in steps), max(e for _, e, _ in host)),
    )


def kernel_tally(timeline: Timeline) -> dict[str, list[int]]:
    """The kernel table's tally over the window (by start), in first-start order."""
    w = window(timeline)
    acts = sorted(
        (a for a in timeline.gpu if a.kind in (tl.KERNEL, tl.MEMCPY, tl.MEMSET)),
        key=lambda a: a.start_us,
    )
    return tables.tally((a.name, a.dur_ns) for a in acts if w is None or w[0] <= a.start_us < w[1])


def op_table(timeline: Timeline, part: int = 1) -> dict[str, list[int]]:
    """``name -> [calls, self, total]`` of the host's ops and runtime calls that
    start in one part of the trace (0 before the window, 1 in it, 2 after it),
    nested over the whole trace (timeline.self_times)."""
    w = window(timeline)

    def part_of(start: int) -> int:
        if w is None:
            return 1
        return 0 if start < w[0] else 1 if start < w[1] else 2

    by_thread: dict[int, list[tuple[int, int, str, bool]]] = {}
    wanted: dict[int, list[tuple[int, int, str, bool]]] = {}
    for r in timeline.ranges:
        if r.kind != GPU_ANNOTATION:
            by_thread.setdefault(r.thread, []).append((r.start_us, r.end_us, r.name, r.kind == OP))
    for c in timeline.runtime:
        if c.kind in (RUNTIME, DRIVER):
            by_thread.setdefault(c.thread, []).append((c.start_us, c.end_us, c.name, True))
    # self_times over all, keeping only the part's ops as rows
    for tid, items in by_thread.items():
        wanted[tid] = [(s, e, n, op and part_of(s) == part) for s, e, n, op in items]
    return self_times(wanted)
