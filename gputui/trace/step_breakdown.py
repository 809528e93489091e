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

from operator import itemgetter

from gputui.protocol.trace_metrics import STEP_CATEGORIES, StepBreakdown
from gputui.trace.scan import (
    ANNOTATION_OTHER,
    COLLECTIVE,
    COLLECTIVE_OPS,
    COMM_OTHER,
    DATA,
    DISPATCH_OP,
    GPU_COLLECTIVE,
    GPU_COMM,
    GPU_COMPUTE,
    GPU_MEMCPY,
    GPU_MEMSET,
    OFF_STREAM,
    PHASE,
    RT_LAUNCH,
    RT_OTHER,
    RT_SYNC,
    STEP_WINDOWS,
    STEPS_SPAN,
    TAIL_KEEP,
    Scan,
    bits,
    device_steps,
    host_steps,
    is_dataloader,
    merge_sorted,
)
from gputui.trace.timeline import Timeline, intersect, length

_START = itemgetter(0)
_END = itemgetter(1)

__all__ = [
    "COLLECTIVE_OPS",
    "TAIL_KEEP",
    "device_steps",
    "host_steps",
    "is_dataloader",
    "step_breakdown",
]


def _both(layer: int) -> int:
    """A GPU class on a stream and off it."""
    return bits(layer, layer + OFF_STREAM)


#: each category's layers in the scan's sweep, in the categories' order of
#: precedence (what none of them claims is other)
_CATEGORY_BITS = (
    ("kernel", _both(GPU_COMPUTE)),
    ("memcpy", _both(GPU_MEMCPY)),
    ("memset", _both(GPU_MEMSET)),
    ("communication", _both(GPU_COMM) | _both(GPU_COLLECTIVE) | bits(COLLECTIVE)),
    ("runtime", bits(RT_SYNC, RT_LAUNCH, RT_OTHER)),
    ("dataloader", bits(DATA)),
    ("cpu_op", bits(PHASE, COMM_OTHER, DISPATCH_OP, ANNOTATION_OTHER)),
)
_STEPS = bits(STEP_WINDOWS)
_SPAN = bits(STEPS_SPAN)


_KERNELS = _both(GPU_COMPUTE) | _both(GPU_COMM) | _both(GPU_COLLECTIVE)


def _gpu_utilization(scan: Scan, lo: int, hi: int) -> float | None:
    """Union of kernel time within [lo, hi] over that span, on the device with
    the most kernel time."""
    per_device = scan.gpu.per_device
    if hi <= lo or not per_device:
        return None
    steps = scan.steps
    if len(per_device) == 1 and (lo, hi) == (steps[0][0], steps[-1][1]):
        # one device: the sweep measured it already
        covered = sum(us for mask, us in scan.swept.items() if mask & _SPAN and mask & _KERNELS)
        return round(100.0 * covered / (hi - lo), 2)

    def kernel_us(items: list[tuple[int, int]]) -> int:
        return sum(map(_END, items)) - sum(map(_START, items))

    busiest = max(per_device.values(), key=kernel_us)
    busy = length(intersect(merge_sorted(busiest), [(lo, hi)]))
    return round(100.0 * busy / (hi - lo), 2)


def step_breakdown(timeline: Timeline, scan: Scan | None = None) -> StepBreakdown | None:
    """The plugin's overview breakdown; None for a trace without host activity.
    ``scan``: the timeline's scan, where one is made."""
    scan = Scan(timeline) if scan is None else scan
    steps = scan.steps
    if not steps:
        return None
    totals = dict.fromkeys(STEP_CATEGORIES, 0)
    for mask, us in scan.swept.items():
        if mask & _STEPS:
            category = next((c for c, m in _CATEGORY_BITS if mask & m), "other")
            totals[category] += us
    steps_us = sum(e - s for s, e, _ in steps)
    return StepBreakdown(
        steps=len(steps),
        steps_us=float(steps_us),
        **{f"{c}_us": float(totals[c]) for c in STEP_CATEGORIES},
        gpu_utilization_pct=_gpu_utilization(scan, steps[0][0], steps[-1][1]),
        first_step=steps[0][2],
        step_us=tuple(float(e - s) for s, e, _ in steps),
    )
