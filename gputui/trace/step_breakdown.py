"""The TensorBoard profiler plugin's step breakdown (pure, standard library only).

Definitions after ``torch_tb_profiler/profiler/event_parser.py`` and
``overall_parser.py`` (kineto's tb_plugin):

- Steps are the host ``ProfilerStep#N`` ranges, each stretched to the end of
  the GPU work launched from inside it (a launch call wholly inside the step),
  and starting no earlier than the previous step's end.  Trailing steps that
  launched no GPU work, or much less than the step before (< 80%), are left
  out: the profiler stopped before their kernels ran.  Without step marks the
  span of GPU activity is one step (the plugin takes the whole host activity:
  set-up before the first kernel would count as the step), and without GPU
  activity the host's.
- Every moment of the steps goes to the first category active then: GPU kernel
  > memcpy > memset > communication (NCCL/Gloo collectives on the host, and
  kernels they launched or named ``nccl…Kernel``) > CUDA runtime call >
  DataLoader (``enumerate(DataLoader)#…__next__``) > CPU op > other.
- GPU utilization = union of kernel time within [first step's start, last
  step's end] / that span, on the device with the most kernel time.

Where the plugin also counts GPU-side annotation ranges as CPU ops, they are
left out here: they are not host work.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from gputui.protocol.trace_metrics import STEP_CATEGORIES, StepBreakdown
from gputui.trace import timeline as tl
from gputui.trace.timeline import (
    GpuActivity,
    Interval,
    KernelTypes,
    Timeline,
    intersect,
    length,
    merge,
    step_id,
    subtract,
)

#: host ops the plugin treats as collectives
COLLECTIVE_OPS = frozenset(
    f"{lib}:{op}"
    for lib in ("nccl", "gloo")
    for op in ("broadcast", "reduce", "all_reduce", "all_gather", "reduce_scatter")
)
#: a trailing step with fewer GPU activities than this share of the step before
#: it is taken as cut short by the profiler
TAIL_KEEP = 0.8


def is_dataloader(name: str) -> bool:
    return (
        name.startswith("enumerate(DataLoader)#") and name.endswith(".__next__")
    ) or name.startswith("enumerate(DataPipe)#")


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


def host_steps(timeline: Timeline) -> list[tuple[int, int, int | None]]:
    """The host's ``ProfilerStep`` ranges with their step numbers; without them one
    step over the span of GPU activity, else over the host's activity."""
    steps = [
        (r.start_us, r.end_us, step_id(r.name))
        for r in timeline.step_ranges()
        if r.end_us > r.start_us
    ]
    if steps:
        return steps
    gpu = [(a.start_us, a.end_us) for a in timeline.gpu if a.stream != -1 and a.end_us > a.start_us]
    if gpu:
        return [(min(s for s, _ in gpu), max(e for _, e in gpu), None)]
    host = [(r.start_us, r.end_us) for r in timeline.ranges if r.kind in (tl.OP, tl.ANNOTATION)]
    host += [(c.start_us, c.end_us) for c in timeline.runtime]
    if not host:
        return []
    return [(min(s for s, _ in host), max(e for _, e in host), None)]


def device_steps(
    timeline: Timeline, host: list[tuple[int, int, int | None]]
) -> list[tuple[int, int, int | None]]:
    """Host steps stretched over the GPU work they launched, tail trimmed."""
    by_corr: dict[int, list[GpuActivity]] = {}
    for a in timeline.gpu:
        if a.kind in (tl.KERNEL, tl.MEMCPY, tl.MEMSET) and a.correlation >= 0:
            by_corr.setdefault(a.correlation, []).append(a)
    calls = sorted((r for r in timeline.runtime if r.kind == tl.RUNTIME), key=lambda r: r.start_us)
    n = len(host)
    dev_lo: list[int | None] = [None] * n
    dev_hi: list[int | None] = [None] * n
    matched = [0] * n
    seen: set[int] = set()
    i = 0
    for call in calls:
        while i < n and call.start_us >= host[i][1]:
            i += 1
        if i >= n:
            break
        start, end, _ = host[i]
        if call.start_us < start or call.end_us > end:
            continue  # before this step, or reaching past its end
        for a in by_corr.get(call.correlation, ()):
            lo, hi = dev_lo[i], dev_hi[i]
            dev_lo[i] = a.start_us if lo is None else min(lo, a.start_us)
            dev_hi[i] = a.end_us if hi is None else max(hi, a.end_us)
            matched[i] += 1
            seen.add(id(a))
    if not seen:
        return host
    prev_end = host[0][0]
    first_lo = dev_lo[0]
    if first_lo is not None:
        # GPU work launched before the first step (and still running) delays it
        for a in timeline.gpu:
            if (
                a.kind in (tl.KERNEL, tl.MEMCPY, tl.MEMSET)
                and id(a) not in seen
                and a.end_us < first_lo
            ):
                prev_end = max(prev_end, a.end_us)
    out: list[tuple[int, int, int | None]] = []
    for k, (start, end, sid) in enumerate(host):
        start = max(prev_end, start)
        hi = dev_hi[k]
        end = max(end, start) if hi is None else max(end, hi, start)
        out.append((start, end, sid))
        prev_end = end
    if len(out) > 1:
        last = max((k for k in range(n) if matched[k] > 0), default=-1)
        if last >= 0:
            keep = last + 1
            if last > 0 and matched[last - 1] * TAIL_KEEP > matched[last]:
                keep = last
            out = out[:keep]
    return out


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
