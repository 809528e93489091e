"""One timeline read in a few shared passes: what the step account, the
TensorBoard plugin's step breakdown, HTA's metrics, the job's markers, the
analyzer's tables and its sanity checks all read (pure, standard library only:
the hook computes the account and the markers inside the job).

A :class:`Scan` sorts the timeline's three lists by start time, in place (a
stable sort: records that start together keep their order), then reads each
list once:

- the host ranges, each filed under its role (:func:`host_role`: data wait, user
  phase, collective, op, other annotation) and the step marks picked out;
- the GPU activities, each filed under its class (compute kernel, communication
  kernel, copy, set, on a stream or not), with what HTA reads in its window (its
  busy, compute and communication time, the idle gaps per stream, the launch
  pairs), the steps' GPU work (each step stretched to the end of the work it
  launched) and the sanity counts (kernels that start before their launch call)
  gathered on the way;
- the runtime calls, each filed by what the account makes of it (sync, launch,
  other) and by API (runtime or driver).

What is filed is the record itself (a pointer).  The step breakdown's and the
account's times are then measured in one sweep over those lists
(:func:`sweep`): each list merged into disjoint intervals as the sweep reaches
it, a bit per list, and the time spent under each combination of bits summed;
every bucket, category and exposed part is a sum over combinations.  For the
analyzer's tables, the host's ranges and runtime calls are walked together in
start order and each is nested under the op it runs in on its thread (self
time).  A trace repeats few names: what follows from a name and a kind is
decided once per name.

The steps' general definitions live here too (:func:`host_steps`,
:func:`device_steps`), with the names the passes look for; the modules that
compute each metric (:mod:`gputui.trace.account`,
:mod:`gputui.trace.step_breakdown`, :mod:`gputui.trace.trace_metrics`) read a
scan.  Where a trace is odd in a way the fast joins do not cover (two runtime
calls with one correlation id, steps out of order or overlapping, ops on one
thread that overlap without nesting), that part is computed by the general code
instead.  Tests compare the two on every kept trace and on generated ones.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import accumulate, islice, pairwise
from operator import itemgetter
from typing import Any

from gputui.protocol.value import ValueBase, value_class
from gputui.trace.kernels import collective_kind
from gputui.trace.markers import launch_share_inside
from gputui.trace.tables import tally
from gputui.trace.timeline import (
    ANNOTATION,
    DRIVER,
    GPU_ANNOTATION,
    HTA_COMMUNICATION,
    HTA_COMPUTATION,
    KERNEL,
    MEMCPY,
    MEMSET,
    OP,
    PYTHON,
    RUNTIME,
    STEP_MARK,
    SYNC,
    Collective,
    GpuActivity,
    Interval,
    Timeline,
    hta_kernel_type,
    intersect,
    length,
    merge,
    step_id,
    subtract,
)

_START = itemgetter(0)
#: the communication kernels a summary keeps in order (:meth:`Scan.comm_sequence`)
COMM_SEQUENCE = 512
#: a conversion: ``aten::to`` (which runs ``aten::_to_copy`` when it converts)
CAST_OP = "aten::to"
_END = itemgetter(1)
_NAME = itemgetter(2)
#: no thread yet (a record's thread may be any value)
_NO_THREAD = object()
_CORR = itemgetter(4)

# -- names --------------------------------------------------------------------------------
#: host ops the TensorBoard plugin treats as collectives
COLLECTIVE_OPS = frozenset(
    f"{lib}:{op}"
    for lib in ("nccl", "gloo")
    for op in ("broadcast", "reduce", "all_reduce", "all_gather", "reduce_scatter")
)
#: runtime and driver calls in which the CPU waits for the GPU.  Not
#: ``cudaStreamWaitEvent``: it makes a stream wait, and returns at once.
#: a copy's direction, where it is from or to pageable host memory
COPY_H2D, COPY_D2H = 1, 2

SYNC_CALLS = frozenset(
    {
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cudaMemcpy2D",
        "cudaMemcpyFromSymbol",
        "cudaMemcpyToSymbol",
        "cudaMemset",
        "cuCtxSynchronize",
        "cuStreamSynchronize",
        "cuEventSynchronize",
        "cuMemcpyDtoH_v2",
        "cuMemcpyHtoD_v2",
        "hipDeviceSynchronize",
        "hipStreamSynchronize",
        "hipEventSynchronize",
        "hipMemcpy",
        "hipMemcpy2D",
        "hipMemset",
        # torch's copy that waits (non_blocking=False) under ROCm: one call that
        # returns once the copy is done, where CUDA's is an async copy and a
        # stream synchronization
        "hipMemcpyWithStream",
    }
)
#: runtime calls that launch a kernel, through every API (the runtime's and the
#: driver's, CUDA's and HIP's, graph launches)
KERNEL_LAUNCHES = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cudaLaunchCooperativeKernel",
        "cudaGraphLaunch",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cuGraphLaunch",
        "hipLaunchKernel",
        "hipExtLaunchKernel",
        "hipModuleLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipGraphLaunch",
    }
)
#: runtime and driver calls that queue GPU work: kernel launches and async copies
LAUNCH_CALLS = KERNEL_LAUNCHES | {
    "cudaMemcpyAsync",
    "cudaMemsetAsync",
    "hipMemcpyAsync",
    "hipMemsetAsync",
}
#: the calls Holistic Trace Analysis' launch statistics join to GPU work (its list:
#: not the driver's launches, not HIP's)
HTA_LAUNCH_CALLS = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "runFunction - job_prep_and_submit_for_execution",
        "cudaMemcpyAsync",
        "cudaMemsetAsync",
    }
)
#: HTA's ``consecutive_kernel_delay``: documented as 30 ns, compared with its
#: microsecond timestamps, so a gap shorter than 30 µs is "kernel wait"
KERNEL_WAIT_US = 30
#: HTA's ``runtime_cutoff`` and ``launch_delay_cutoff`` (µs)
RUNTIME_CUTOFF_US = 50
LAUNCH_DELAY_CUTOFF_US = 100
#: the GPU activities the tables, the steps and HTA's idle breakdown read
TABLE_KINDS = frozenset({KERNEL, MEMCPY, MEMSET})
#: the hook's own user phases (``gputui.hook.phase("ckpt")``) appear as ranges
#: named with this prefix
PHASE_PREFIX = "gputui.phase:"
_COMM_PREFIXES = ("c10d::", "nccl:", "gloo:", "record_param_comms")
#: a trailing step with fewer GPU activities than this share of the step before
#: it is taken as cut short by the profiler
TAIL_KEEP = 0.8
#: the calls that begin a CUDA graph capture on a stream (the runtime's, the
#: driver's, HIP's)
GRAPH_CAPTURES = frozenset(
    {
        "cudaStreamBeginCapture",
        "cudaStreamBeginCaptureToGraph",
        "cuStreamBeginCapture",
        "cuStreamBeginCapture_v2",
        "cuStreamBeginCaptureToGraph",
        "hipStreamBeginCapture",
        "hipStreamBeginCaptureToGraph",
    }
)
#: the calls that end one
_END_CAPTURES = frozenset({"cudaStreamEndCapture", "cuStreamEndCapture", "hipStreamEndCapture"})
#: runtime and driver calls that make or free a resource (device or pinned
#: memory, a stream, an event, a loaded module) or ask the device once for its
#: properties: set-up.  One of them that takes COLD_LAUNCH_US or longer while
#: the GPU idles is no cost of the loop but its warm-up (the caching
#: allocator's first reservations, a library making its streams and handles,
#: cuDNN's algorithm search freeing its trial workspaces); a loop that frees
#: and allocates every step has its own finding (memory.malloc_in_loop)
SETUP_CALLS = frozenset(
    {
        # the CUDA runtime's
        "cudaMalloc",
        "cudaMallocManaged",
        "cudaMallocHost",
        "cudaHostAlloc",
        "cudaFree",
        "cudaFreeHost",
        "cudaHostRegister",
        "cudaHostUnregister",
        "cudaStreamCreate",
        "cudaStreamCreateWithFlags",
        "cudaStreamCreateWithPriority",
        "cudaStreamDestroy",
        "cudaEventCreate",
        "cudaEventCreateWithFlags",
        "cudaEventDestroy",
        "cudaGetDeviceProperties",
        "cudaGetDeviceProperties_v2",
        "cudaDeviceGetStreamPriorityRange",
        "cudaSetDevice",
        "cudaFuncGetAttributes",
        "cudaFuncSetAttribute",
        "cudaMemGetInfo",
        "cudaDeviceReset",
        # HIP's
        "hipMalloc",
        "hipMallocManaged",
        "hipHostMalloc",
        "hipFree",
        "hipHostFree",
        "hipHostRegister",
        "hipHostUnregister",
        "hipStreamCreate",
        "hipStreamCreateWithFlags",
        "hipStreamCreateWithPriority",
        "hipStreamDestroy",
        "hipEventCreate",
        "hipEventCreateWithFlags",
        "hipEventDestroy",
        "hipGetDeviceProperties",
        "hipGetDevicePropertiesR0600",
        "hipDeviceGetStreamPriorityRange",
        "hipSetDevice",
        "hipFuncGetAttributes",
        "hipFuncSetAttribute",
        "hipMemGetInfo",
        "hipDeviceReset",
        "hipModuleLoad",
        "hipModuleLoadData",
        "hipModuleUnload",
        # the driver's (and their _v2 names)
        *(
            f"cu{name}{suffix}"
            for name in (
                "MemAlloc",
                "MemFree",
                "MemAllocHost",
                "MemFreeHost",
                "MemHostAlloc",
                "MemHostRegister",
                "MemHostUnregister",
                "MemCreate",
                "MemRelease",
                "MemMap",
                "MemUnmap",
                "MemSetAccess",
                "MemAddressReserve",
                "MemAddressFree",
                "StreamCreate",
                "StreamCreateWithPriority",
                "StreamDestroy",
                "EventCreate",
                "EventDestroy",
                "ModuleLoad",
                "ModuleLoadData",
                "ModuleLoadDataEx",
                "ModuleLoadFatBinary",
                "ModuleUnload",
                "LibraryLoadData",
                "LibraryLoadFromFile",
                "LibraryUnload",
                "CtxCreate",
                "CtxDestroy",
                "DevicePrimaryCtxRetain",
                "DevicePrimaryCtxRelease",
                "MemGetInfo",
            )
            for suffix in ("", "_v2")
        ),
    }
)


def is_dataloader(name: str) -> bool:
    return (
        name.startswith("enumerate(DataLoader)#") and name.endswith(".__next__")
    ) or name.startswith("enumerate(DataPipe)#")


#: a Python frame that calls an ``nn.Module`` (torch.profiler's Python stack:
#: ``with_stack=True`` records the module's ``_call_impl``, ``with_modules=True``
#: an "nn.Module: NAME" frame as well): what runs under it is the model's forward
_MODULE_FRAMES = ("nn.Module: ",)
_CALL_IMPL = re.compile(r"torch/nn/modules/module\.py\(\d+\): _(?:wrapped_)?call_impl\Z")
#: a numeric or image library's Python frames (and its C methods, which the
#: Python stack records as ``<built-in method NAME of numpy.ndarray object ...>``):
#: work the model's Python does with them is no cost of issuing torch's ops
_LIBRARY_FRAMES = ("numpy/", "PIL/", "scipy/", "pandas/", "cv2/", "sklearn/", "skimage/")
_LIBRARY_BUILTIN = re.compile(r"<built-in (?:method|function) \w+ of (?:numpy|PIL|pandas)[.\w]* ")


def is_module_call(name: str) -> bool:
    """A Python frame of the stack that calls an ``nn.Module``."""
    return name.startswith(_MODULE_FRAMES) or _CALL_IMPL.search(name) is not None


def is_library_code(name: str) -> bool:
    """A Python frame of numpy, PIL, scipy, pandas, OpenCV, scikit-learn or
    scikit-image (their own code, or one of their C methods)."""
    return name.startswith(_LIBRARY_FRAMES) or _LIBRARY_BUILTIN.match(name) is not None


def is_comm(name: str) -> bool:
    """A host range that waits for the job's peers (a collective)."""
    return name in COLLECTIVE_OPS or name.startswith(_COMM_PREFIXES)


# -- what each record is filed under (a bit each in the sweep) ---------------------------
#: host ranges: data wait, user phase, a collective the TensorBoard plugin knows,
#: another collective, an op (torch dispatch), another annotation
DATA, PHASE, COLLECTIVE, COMM_OTHER, DISPATCH_OP, ANNOTATION_OTHER = range(6)
#: runtime calls, by what the account makes of them (sync, launch, other), for
#: the runtime's API and the driver's
RT_SYNC, RT_LAUNCH, RT_OTHER = 6, 8, 10
RT_DRIVER = 1  # added to the three above
#: GPU activities: compute kernels, communication kernels (by name), kernels a
#: host collective launched (the plugin's communication, the account's compute),
#: copies, sets, other activity; on a stream, or (``+ OFF_STREAM``) not
GPU_COMPUTE, GPU_COMM, GPU_COLLECTIVE, GPU_MEMCPY, GPU_MEMSET, GPU_OTHER = 12, 14, 16, 18, 20, 22
OFF_STREAM = 1
#: the host's steps, the steps' own windows, the GPU's idle gaps a
#: synchronization left (the account's), and from the first step's start to
#: the last step's end (the plugin's GPU utilization)
HOST_WINDOWS, STEP_WINDOWS, SYNC_GAPS, STEPS_SPAN = 24, 25, 26, 27
#: a trace's Python frames (``with_stack=True``) that call an ``nn.Module``, and
#: those of a numeric library's code (:func:`is_module_call`, :func:`is_library_code`)
MODULE_CALLS, LIBRARY_CODE = 28, 29
#: torch's own host code between its ops: the optimizer's step and zero_grad
#: ranges (torch.optim's Python around its kernels) and the autograd engine's
#: runs of backward functions (:meth:`Scan.torch_code`)
TORCH_CODE = 30
LAYERS = 31
#: the range torch.optim opens around an optimizer's step (``Optimizer.step#AdamW.step``)
OPTIMIZER_STEP = "Optimizer.step#"
#: the ranges torch.optim opens around an optimizer's step and zero_grad
OPTIMIZER_RANGES = (OPTIMIZER_STEP, "Optimizer.zero_grad#")
#: the range the autograd engine records around each backward function it runs
ENGINE_FUNCTION = "autograd::engine::evaluate_function"
#: the engine's own time between two of its functions counts as torch's up to
#: this long (us): its graph walk and hand-off take microseconds a function
ENGINE_GAP_US = 1_000


def bits(*layers: int) -> int:
    return sum(1 << layer for layer in layers)


def host_role(name: str, kind: str) -> int | None:
    """What a host range is filed under: data wait (a DataLoader's ``__next__``),
    a user phase, a collective the TensorBoard plugin knows, another
    collective, an op (torch dispatch), another annotation; None for a step
    mark or a range that is neither an op nor an annotation.  The plugin's "CPU
    op" is all of them but data, its collectives and step marks; the account's
    dispatch, the ops among them."""
    if kind != OP and kind != ANNOTATION:
        return None
    if is_dataloader(name):
        return DATA
    if name.startswith(PHASE_PREFIX):
        return PHASE
    if name in COLLECTIVE_OPS:
        return COLLECTIVE
    if is_comm(name):
        return COMM_OTHER
    if name.startswith("ProfilerStep#"):
        return None
    return DISPATCH_OP if kind == OP else ANNOTATION_OTHER


# -- interval unions ----------------------------------------------------------------------
def merge_sorted(items: Iterable[Any]) -> list[Interval]:
    """The union of intervals given in start order (records or pairs whose first
    two fields are start and end): :func:`~gputui.trace.timeline.merge` without
    its sort.  Touching intervals join; an empty one is kept where it touches
    nothing, as there."""
    out: list[Interval] = []
    append = out.append
    it = iter(items)
    for r in it:
        lo = r[0]
        hi = r[1]
        break
    else:
        return out
    for r in it:
        s = r[0]
        if s <= hi:
            e = r[1]
            if e > hi:
                hi = e
        else:
            append((lo, hi))
            lo = s
            hi = r[1]
    append((lo, hi))
    return out


def union(*parts: list[Interval]) -> list[Interval]:
    """The union of merged interval lists."""
    nonempty = [p for p in parts if p]
    if len(nonempty) <= 1:
        return list(nonempty[0]) if nonempty else []
    return merge([iv for p in nonempty for iv in p])


#: about this many records a chunk of the sweep reads (its memory)
CHUNK_RECORDS = 1 << 16


def sweep(layers: Sequence[Sequence[Any]], lo: int, hi: int) -> dict[int, int]:
    """How long, within [lo, hi), each combination of layers is active: ``{mask:
    µs}``, bit ``i`` of ``mask`` set where an interval of ``layers[i]`` covers
    the time.  Each layer is a list of records or pairs in start order (they may
    overlap: a layer is active where any of them is).  Read in chunks of time
    that hold about :data:`CHUNK_RECORDS` records each, so the sweep's memory
    does not grow with the trace."""
    lens: dict[int, int] = {}
    if hi <= lo:
        return lens
    live = [(i, layer) for i, layer in enumerate(layers) if layer]
    if not live:
        lens[0] = hi - lo
        return lens
    biggest = max((layer for _, layer in live), key=len)
    cuts = [lo]
    step = max(1, len(biggest) * CHUNK_RECORDS // max(1, sum(len(layer) for _, layer in live)))
    for k in range(step, len(biggest), step):
        t = biggest[k][0]
        if cuts[-1] < t < hi:
            cuts.append(t)
    cuts.append(hi)
    # per layer: the next record to read, and the interval merged so far that
    # reaches past the chunks read (start, end), or None
    cursor = [0] * len(live)
    carry: list[tuple[int, int] | None] = [None] * len(live)
    flips = [1 << i for i in range(max(i for i, _ in live) + 1)]
    get = lens.get
    for c in range(len(cuts) - 1):
        c0, c1 = cuts[c], cuts[c + 1]
        events: list[int] = []
        add = events.append
        for k, (i, layer) in enumerate(live):
            j = cursor[k]
            end = bisect.bisect_left(layer, c1, lo=j, key=_START)
            cur = carry[k]
            if cur is None and j == end:
                continue
            s0, e0 = cur if cur is not None else (layer[j][0], layer[j][1])
            if cur is None:
                j += 1
            for r in layer[j:end]:  # (a slice: islice would step over the first j)
                s = r[0]
                if s <= e0:
                    e = r[1]
                    if e > e0:
                        e0 = e
                else:
                    if e0 > c0:  # the merged interval, clipped to the chunk
                        add((s0 if s0 > c0 else c0) << 5 | i)
                        add(e0 << 5 | i)
                    s0 = s
                    e0 = r[1]
            cursor[k] = end
            if e0 > c1:
                carry[k] = (s0, e0)
                if e0 > c0:
                    add((s0 if s0 > c0 else c0) << 5 | i)
                    add(c1 << 5 | i)
            else:
                carry[k] = None
                if e0 > c0:
                    add((s0 if s0 > c0 else c0) << 5 | i)
                    add(e0 << 5 | i)
        if not events:
            lens[0] = get(0, 0) + c1 - c0
            continue
        events.sort()
        mask = 0
        prev = c0
        for ev in events:
            t = ev >> 5
            if t != prev:
                lens[mask] = get(mask, 0) + t - prev
                prev = t
            mask ^= flips[ev & 31]
        if prev < c1:
            lens[mask] = get(mask, 0) + c1 - prev
    return lens


def after_sync(idle: list[Interval], sync_calls: list[Interval]) -> list[Interval]:
    """The idle time the GPU sat in because the CPU waited for it: in each gap
    that a synchronizing call was already waiting at when it began (the GPU
    drained) and that it returned during, from the gap's start for as long as
    the call waited on a busy GPU, at most to the gap's end.  Without the wait
    the CPU would have queued the next work that much sooner: the gap while it
    queues it is the sync's, but not host work that outlasts the wait (a step
    that computes on the CPU between two synchronizations idles the GPU as much
    without them), which stays with what the host did; nor the wait's time in
    an earlier gap (``idle`` sorted, not overlapping), the sync's already.
    ``sync_calls`` sorted."""
    if not sync_calls:
        return []
    starts = [s for s, _ in sync_calls]
    # the latest end of the calls up to each: none before it still waits past that
    reach = list(accumulate((e for _, e in sync_calls), max))
    ends = [hi for _, hi in idle]
    out: list[Interval] = []
    for n, (lo, hi) in enumerate(idle):
        # calls that began by the gap's start, the latest first, back to the
        # last that could still be waiting at it (calls on two threads overlap)
        k = bisect.bisect_right(starts, lo)
        for j in range(k - 1, -1, -1):
            if reach[j] < lo:
                break
            s, e = sync_calls[j]
            if lo <= e <= hi:
                waited = e - s
                # less the earlier gaps' time within the wait
                for g in range(bisect.bisect_right(ends, s), n):
                    g_lo, g_hi = idle[g]
                    waited -= g_hi - (g_lo if g_lo > s else s)
                out.append((lo, hi if lo + waited >= hi else lo + waited))
                break
    return out


# -- the steps (general definitions) ----------------------------------------------------
Step = tuple[int, int, int | None]


def host_steps(timeline: Timeline) -> list[Step]:
    """The host's ``ProfilerStep`` ranges with their step numbers; without them one
    step over the span of GPU activity, else of the kernel launch calls, else
    over the host's activity (:func:`_span_step`)."""
    steps = [
        (r.start_us, r.end_us, step_id(r.name))
        for r in timeline.step_ranges()
        if r.end_us > r.start_us
    ]
    if steps:
        return steps
    return _span_step(timeline)


def _span_step(timeline: Timeline) -> list[Step]:
    """The one step of a trace without step marks: the span of its GPU activity;
    where that was not recorded, the span of its kernel launch calls (what the
    host issued to the GPU: the model's construction before the first one is
    set-up, as it is before the first kernel); else the host's activity."""
    gpu = [(a.start_us, a.end_us) for a in timeline.gpu if a.stream != -1 and a.end_us > a.start_us]
    if gpu:
        return [(min(s for s, _ in gpu), max(e for _, e in gpu), None)]
    launches = [(c.start_us, c.end_us) for c in timeline.runtime if c.name in KERNEL_LAUNCHES]
    if launches:
        return [(min(s for s, _ in launches), max(e for _, e in launches), None)]
    host = [(r.start_us, r.end_us) for r in timeline.ranges if r.kind in (OP, ANNOTATION)]
    host += [(c.start_us, c.end_us) for c in timeline.runtime]
    if not host:
        return []
    return [(min(s for s, _ in host), max(e for _, e in host), None)]


def device_steps(timeline: Timeline, host: list[Step]) -> list[Step]:
    """Host steps stretched over the GPU work they launched (by any launch API:
    a launch call wholly inside the step), starting no earlier than the previous
    step's end; trailing steps that launched no GPU work, or much less than the
    step before (< :data:`TAIL_KEEP`), left out: the profiler stopped before
    their kernels ran.  (The TensorBoard plugin's steps; it knows only the CUDA
    runtime's launches, not the driver's that Triton's kernels use.)  Without
    step marks the one step, the span of GPU activity (else of the host's), is
    kept as it is: no GPU work runs past it, and work launched before its
    first kernel started does not delay it."""
    if not timeline.step_ranges():
        return host
    by_corr: dict[int, list[GpuActivity]] = {}
    for a in timeline.gpu:
        if a.kind in TABLE_KINDS and a.correlation >= 0:
            by_corr.setdefault(a.correlation, []).append(a)
    calls = sorted(
        (r for r in timeline.runtime if r.kind in (RUNTIME, DRIVER)), key=lambda r: r.start_us
    )
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
            if a.kind in TABLE_KINDS and id(a) not in seen and a.end_us < first_lo:
                prev_end = max(prev_end, a.end_us)
    return _stretched(host, dev_hi, matched, prev_end)


def _stretched(
    host: list[Step], dev_hi: list[int | None], matched: list[int], prev_end: int
) -> list[Step]:
    out: list[Step] = []
    for k, (start, end, sid) in enumerate(host):
        start = max(prev_end, start)
        hi = dev_hi[k]
        end = max(end, start) if hi is None else max(end, hi, start)
        out.append((start, end, sid))
        prev_end = end
    if len(out) > 1:
        last = max((k for k in range(len(host)) if matched[k] > 0), default=-1)
        if last >= 0:
            keep = last + 1
            if last > 0 and matched[last - 1] * TAIL_KEEP > matched[last]:
                keep = last
            out = out[:keep]
    return out


# -- what the scan gives ------------------------------------------------------------------
@value_class
class OpTally(ValueBase):
    """One name's calls, self time (its time less its direct children's, never
    below 0 per call) and inclusive time in one part of the trace, µs."""

    name: str
    calls: int
    self_us: int
    total_us: int


@value_class
class Outside(ValueBase):
    """What the trace holds outside the analyzer's window on one side: its length
    (from the first event to the window, or from the window to the last
    event's end, µs), the host's ops and runtime calls there by self time
    (largest first), and the kernels, copies and sets there."""

    us: int = 0
    ops: tuple[OpTally, ...] = ()
    gpu_activities: int = 0
    gpu_us: float = 0.0


@value_class
class CollectiveCalls(ValueBase):
    """One collective's kernels in the window, by the messages the trace records
    in their arguments (:class:`~gputui.trace.timeline.Collective`)."""

    name: str
    calls: int
    #: of the calls, those whose message size is known, and the bytes those
    #: move: each call's larger side (in or out message), summed
    sized: int = 0
    bytes: int = 0
    #: the calls' time on the GPU, µs
    us: float = 0.0
    #: ranks in the group (the largest seen; 0: unknown)
    group: int = 0
    #: of calls that split their message by destination (all_to_allv's ``In
    #: split size``): how many, and the largest part over an even one, the
    #: mean over those calls (1.0: every rank gets as much)
    split_calls: int = 0
    split_skew: float | None = None
    #: the highest rate a sized call moved its message at, GB/s (bytes per ns):
    #: the call that waited least for its peers
    best_gbps: float | None = None

    @property
    def bytes_per_call(self) -> float | None:
        return self.bytes / self.sized if self.sized else None

    @property
    def us_per_call(self) -> float:
        return self.us / self.calls if self.calls else 0.0

    @property
    def mean_gbps(self) -> float | None:
        """The calls' mean rate, GB/s: bytes a sized call over time a call."""
        per_call = self.bytes_per_call
        if per_call is None or self.us_per_call <= 0:
            return None
        return per_call / (self.us_per_call * 1000.0)


def collective_calls(
    collectives: Sequence[Collective], window: tuple[int, int] | None
) -> tuple[CollectiveCalls, ...]:
    """The collectives whose kernels start in ``window`` (all without one), by
    name, the most GPU time first."""
    # name -> [calls, sized, bytes, ns, group, splits, skew sum, best GB/s]
    by: dict[str, list[Any]] = {}
    for c in collectives:
        if window is not None and not window[0] <= c.start_us < window[1]:
            continue
        got = by.get(c.name)
        if got is None:
            got = by[c.name] = [0, 0, 0, 0, 0, 0, 0.0, None]
        got[0] += 1
        size = max(c.in_bytes, c.out_bytes)
        if size >= 0:
            got[1] += 1
            got[2] += size
            if c.dur_ns > 0 and (got[7] is None or size / c.dur_ns > got[7]):
                got[7] = size / c.dur_ns
        got[3] += c.dur_ns
        got[4] = max(got[4], c.group)
        skew = _split_skew(c.splits)
        if skew is not None:
            got[5] += 1
            got[6] += skew
    out = [
        CollectiveCalls(
            name=name,
            calls=n,
            sized=sized,
            bytes=nbytes,
            us=ns / 1000.0,
            group=group,
            split_calls=splits,
            split_skew=skews / splits if splits else None,
            best_gbps=best,
        )
        for name, (n, sized, nbytes, ns, group, splits, skews, best) in by.items()
    ]
    out.sort(key=lambda c: (-c.us, c.name))
    return tuple(out)


def _split_skew(splits: str) -> float | None:
    """The largest part of a message split by destination (``"[4, 12]"``) over
    an even part; None for no split, or one that does not read as two or more
    non-negative counts."""
    if len(splits) < 5 or splits[0] != "[" or splits[-1] != "]":
        return None
    try:
        parts = [int(p) for p in splits[1:-1].split(",")]
    except ValueError:
        return None
    total = sum(parts)
    if len(parts) < 2 or total <= 0 or min(parts) < 0:
        return None
    return max(parts) * len(parts) / total


@value_class
class Sanity(ValueBase):
    """What the trace says of itself that the figures depend on."""

    #: kernels whose launch call is in the trace, and those of them that start
    #: before that call starts (the host's and the GPU's clocks disagree)
    kernels_launched: int = 0
    kernels_before_launch: int = 0
    #: runtime calls that launch a kernel (any API), and kernel records
    kernel_launch_calls: int = 0
    kernel_records: int = 0
    #: of the window's kernel launch calls, the share made inside the optimizer's
    #: steps (``Optimizer.step#...``); None without either
    optimizer_launch_share: float | None = None
    #: host-side CUDA runtime and driver calls of any kind (a profile that
    #: recorded CUDA has them even where no kernel ran in it)
    runtime_calls: int = 0
    #: host-side ProfilerStep ranges
    steps: int = 0
    #: host time inside torch.compile's compiling ranges (``… (dynamo_timed)``:
    #: tracing, lowering, compiling its kernels) in the window, microseconds
    compile_us: float = 0.0
    #: launch calls in the window of COLD_LAUNCH_US or longer (CUDA loading a
    #: kernel's module, or compiling it, on its first use), and their time (us)
    cold_launches: int = 0
    cold_launch_us: float = 0.0
    #: the kernels that start in the window: how many, their exact time (their
    #: durations in nanoseconds) and the time the figures count (whole
    #: microseconds, the start rounded up and the end down as HTA rounds them),
    #: microseconds
    kernels_in_window: int = 0
    kernel_exact_us: float = 0.0
    kernel_counted_us: float = 0.0
    #: of the kernels that start in the window, those that ran less than
    #: TINY_KERNEL_NS, counted one by one (a kernel table's means cannot say it)
    kernels_under_10us: int = 0
    #: CUDA graph captures begun (``cudaStreamBeginCapture`` and its twins): the
    #: launches inside one put kernels in a graph and run nothing; and the
    #: window's time inside them (from a capture's begin to its end on its
    #: thread, us): one-off time, as compiling is
    graph_captures: int = 0
    graph_capture_us: float = 0.0
    #: synchronizing calls in the window of COLD_LAUNCH_US or longer during
    #: which the GPU ran nothing the trace recorded (work the profiler did not
    #: see), and their time there (us)
    blind_waits: int = 0
    blind_wait_us: float = 0.0
    #: set-up calls (SETUP_CALLS) in the window of COLD_LAUNCH_US or longer
    #: while the GPU was busy less than half of the call, and their time there
    #: (us): one-off, as cold launches are
    setup_calls: int = 0
    setup_call_us: float = 0.0
    #: the same by name: (name, calls, us), the most time first
    setup_by_name: tuple[tuple[str, int, float], ...] = ()
    #: a trace's Python frames (``with_stack=True``) by their self time in the
    #: window: (name, us), the most first (:data:`PYTHON_FRAMES` of them)
    python_frames: tuple[tuple[str, float], ...] = ()
    #: the same frames' self time by package (a file's first path part, or the
    #: script's own file; C functions left out): (package, us), the most first
    python_packages: tuple[tuple[str, float], ...] = ()
    #: ops' warm-up calls in the window (:data:`WARMUP_CALL_US` or longer and
    #: :data:`WARMUP_RATIO` times their op's median call, the GPU busy less than
    #: half of them), their time there (the union of the calls, less the cold
    #: launches, set-up calls, graph captures and compiling ranges counted
    #: already: us), and by op: (name, calls, us), the most time first
    warmup_calls: int = 0
    warmup_us: float = 0.0
    warmup_by_name: tuple[tuple[str, int, float], ...] = ()
    #: batches a step fetches from its DataLoader where every ProfilerStep
    #: fetches the same number, two or more, and runs one optimizer step
    #: (``Optimizer.step#``): gradient accumulation over that many micro-batches;
    #: 0 where the trace shows none (one batch a step, or steps that differ)
    micro_batches: int = 0

    @property
    def records_graphs(self) -> bool:
        """The trace records CUDA graph captures, and most of its launch calls
        ran no kernel: its launch figures describe the capture, not a run."""
        return self.graph_captures > 0 and self.kernels_launched * 2 < self.kernel_launch_calls


#: an op's call is warm-up where it lasts this long (us) and this many times the
#: median call of its op in the window (of at least WARMUP_MIN_CALLS calls),
#: while the GPU is busy less than half of it: cuDNN's algorithm search
#: (torch.backends.cudnn.benchmark) on each new convolution shape, cuBLAS's and
#: a library's first calls; a steady op's calls vary by a few times, not twenty
WARMUP_CALL_US = 10_000
WARMUP_RATIO = 20
WARMUP_MIN_CALLS = 3
#: the long calls looked at (the first ones: warm-up comes first)
WARMUP_MAX_CALLS = 2_000
#: the Python frames Sanity.python_frames keeps
PYTHON_FRAMES = 12
#: a Python frame's package: the first part of its file's path (``lightning`` of
#: ``lightning/pytorch/loops/fit_loop.py(1): run``), or a script's own file
_PACKAGE = re.compile(r"([^/()<>\s]+?)(?:/|\(\d+\): )")
#: the suffix of the ranges torch.compile times its compiling with
COMPILE_RANGE_SUFFIX = "(dynamo_timed)"
#: a launch call this long (us) is no launch's cost but a one-off: a launch
#: takes microseconds, CUDA's lazy loading of a module or a JIT compile of its
#: kernels on first use tens to thousands of milliseconds
COLD_LAUNCH_US = 100_000
#: a kernel shorter than this (ns) is a tiny one: the launch costs more than it
#: runs (Sanity.kernels_under_10us; the analyzer's launch.tiny_kernel_us)
TINY_KERNEL_NS = 10_000
#: a shorter launch call is a first use as well where it is the first launch of
#: its kernel in the trace, takes this long (us) and the GPU idles through most
#: of it: CUDA's lazy loading of a kernel's module takes milliseconds, where a
#: launch that waits for room in a full queue (a GPU-bound job) waits on a busy GPU
FIRST_USE_US = 1_000


@dataclass
class _Tally:
    """Per name, in one part of the trace: calls, time, direct children's time."""

    total: dict[str, int] = field(default_factory=dict)
    children: dict[str, int] = field(default_factory=dict)
    calls: Counter[str] = field(default_factory=Counter)
    #: a trace's Python frames (``with_stack=True``): their self time by name
    #: (their time less that of the frames, ops and calls nested in them)
    python: dict[str, int] = field(default_factory=dict)


class _Both:
    """Files a record in two lists (a step mark with a role of its own)."""

    __slots__ = ("a", "b")

    def __init__(self, a: list[Any], b: list[Any]) -> None:
        self.a, self.b = a, b

    def append(self, r: Any) -> None:
        self.a.append(r)
        self.b.append(r)


class Scan:
    """One timeline's shared passes (the module's docstring).  ``include_last_step``
    keeps the last step in HTA's window (its metrics only)."""

    def __init__(self, timeline: Timeline, include_last_step: bool = False) -> None:
        self.timeline = timeline
        self.include_last_step = include_last_step
        gpu, runtime, ranges = timeline.gpu, timeline.runtime, timeline.ranges
        gpu.sort(key=_START)
        runtime.sort(key=_START)
        ranges.sort(key=_START)
        #: correlation id -> the first runtime call with it
        if runtime and min(map(_CORR, runtime)) < 0:
            self.calls: dict[int, Any] = {r[4]: r for r in reversed(runtime) if r[4] >= 0}
            with_id = len(runtime) - sum(1 for r in runtime if r[4] < 0)
        else:
            self.calls = {r[4]: r for r in reversed(runtime)}
            with_id = len(runtime)
        #: no two runtime calls share a correlation id (the joins below hold)
        self.unique_calls = len(self.calls) == with_id
        self.runtime_names = set(map(_NAME, runtime))

    # -- the passes ------------------------------------------------------------------------
    @cached_property
    def ranges(self) -> RangePass:
        return RangePass(self)

    @cached_property
    def gpu(self) -> GpuPass:
        return GpuPass(self)

    @cached_property
    def runtime(self) -> RuntimePass:
        return RuntimePass(self)

    @property
    def range_names(self) -> set[str]:
        return self.ranges.names

    @property
    def step_events(self) -> list[Any]:
        """Every range whose name holds "ProfilerStep" (HTA's step events)."""
        return self.ranges.step_events

    @cached_property
    def step_ranges(self) -> list[Any]:
        """The host-side ProfilerStep ranges, in start order (Timeline.step_ranges)."""
        return [
            r
            for r in self.step_events
            if (r[4] == OP or r[4] == ANNOTATION) and r[2].startswith("ProfilerStep#")
        ]

    # -- the steps and the window ----------------------------------------------------------
    @cached_property
    def host(self) -> list[Step]:
        """:func:`host_steps`."""
        steps = [(r[0], r[1], step_id(r[2])) for r in self.step_ranges if r[1] > r[0]]
        return steps or _span_step(self.timeline)

    @cached_property
    def fast_steps(self) -> bool:
        """Whether the GPU pass stretches the steps (else :func:`device_steps`
        does): runtime calls with their own correlation ids, host steps in order."""
        ends = [e for _, e, _ in self.host]
        return self.unique_calls and all(a <= b for a, b in pairwise(ends))

    @cached_property
    def steps(self) -> list[Step]:
        """:func:`device_steps` of :attr:`host`."""
        host = self.host
        if not host:
            return []
        if not self.step_ranges:  # (as device_steps keeps the span step)
            return host
        if not self.fast_steps:
            return device_steps(self.timeline, host)
        g = self.gpu
        if not g.step_seen:
            return host
        prev_end = host[0][0]
        first_lo = g.step_lo[0]
        if first_lo is not None:
            # GPU work launched before the first step (and still running) delays it
            for a in self.timeline.gpu:
                if a[0] >= first_lo:
                    break
                if a[3] in TABLE_KINDS and a[1] < first_lo and not self._in_a_step(a):
                    prev_end = max(prev_end, a[1])
        return _stretched(host, g.step_hi, g.step_matched, prev_end)

    def _in_a_step(self, a: Any) -> bool:
        """Whether a GPU activity was launched by a call inside a host step."""
        call = self.calls.get(a[7]) if a[7] >= 0 else None
        if call is None:
            return False
        ends = self._host_ends
        i = bisect.bisect_right(ends, call[0])
        return i < len(ends) and self.host[i][0] <= call[0] and call[1] <= ends[i]

    @cached_property
    def _host_ends(self) -> list[int]:
        return [e for _, e, _ in self.host]

    @cached_property
    def window(self) -> tuple[int, int] | None:
        """The analyzer's window: from the first step's start to the last step's
        end (the ProfilerStep spans, each stretched to the end of the GPU work
        launched in it), or, without steps, the span of GPU activity (else of the
        host's); None for a timeline with nothing in it."""
        steps = self.steps
        if not steps:
            return None
        host = self.host[: len(steps)]
        return (
            min(steps[0][0], host[0][0]),
            max(max(e for _, e, _ in steps), max(e for _, e, _ in host)),
        )

    # -- HTA's window ----------------------------------------------------------------------
    @cached_property
    def hta_steps(self) -> tuple[int, bool]:
        """HTA's step count and whether its window leaves out the last step
        (:func:`~gputui.trace.timeline.hta_window`)."""
        events = self.step_events
        host_steps = len({r[2] for r in events if r[4] != GPU_ANNOTATION})
        if len({r[2] for r in events}) < 2:
            return host_steps, False
        return host_steps, not self.include_last_step

    def hta_cutoff(self) -> tuple[int, bool] | None:
        """HTA's window as a cutoff on start times, and whether it is inclusive;
        None where HTA keeps everything (fewer than two step names)."""
        events = self.step_events
        if len({r[2] for r in events}) < 2:
            return None
        if self.include_last_step:
            return max(map(_END, events)), True
        return max(map(_START, events)), False

    # -- the step breakdown's and the account's times --------------------------------------
    def layers(self) -> list[list[Any]]:
        """The sweep's layers: every list the passes filed, by its bit."""
        out: list[list[Any]] = [[] for _ in range(LAYERS)]
        for i, lst in enumerate(self.ranges.lists):
            out[i] = lst
        for i, lst in enumerate(self.runtime.lists):
            out[RT_SYNC + i] = lst
        for i, lst in enumerate(self.gpu.lists):
            out[GPU_COMPUTE + i] = lst
        out[MODULE_CALLS] = self.ranges.module_calls
        out[LIBRARY_CODE] = self.ranges.library_code
        out[TORCH_CODE] = self.torch_code
        return out

    @cached_property
    def torch_code(self) -> list[Interval]:
        """:data:`TORCH_CODE`'s intervals, in start order: the optimizer's ranges
        and :attr:`engine_gaps`.  An optimizer's step that runs a backward inside
        it (``optimizer.step(closure)``: Lightning's loop, LBFGS) also runs the
        job's forward and its Python there: not torch's alone, left out."""
        funcs = self.ranges.engine_functions
        ranges = [
            r
            for r in self.ranges.torch_code
            if not funcs
            or bisect.bisect_left(funcs, r[0], key=_START)
            == bisect.bisect_left(funcs, r[1], key=_START)
        ]
        gaps = self.engine_gaps
        if not gaps:
            return ranges
        return merge([*((r[0], r[1]) for r in ranges), *gaps])

    @cached_property
    def engine_gaps(self) -> list[Interval]:
        """The autograd engine's own time between two backward functions it ran
        on a thread (:data:`ENGINE_GAP_US` or less), where no op of any thread
        starts: torch's C++ walking the graph and handing each function on, which
        no range records, while the training thread waits in ``backward()``.
        Given as runs of the functions with those gaps between them, each from
        its first function's start to its last one's end (the functions are
        torch dispatch already): a few intervals a backward pass, not one a
        function, for the sweep to read."""
        funcs = self.ranges.engine_functions
        if not funcs:
            return []
        starts = list(map(_START, self.ranges.lists[DISPATCH_OP]))  # (bisect without a key)
        n_ops = len(starts)
        runs: dict[Any, list[int]] = {}  # thread -> its open run [start, end]
        out: list[Interval] = []
        right = bisect.bisect_right
        limit = ENGINE_GAP_US
        for r in funcs:
            start, end, tid = r[0], r[1], r[3]
            run = runs.get(tid)
            if run is not None:
                prev = run[1]
                if start <= prev:  # (a function inside the run so far)
                    if end > prev:
                        run[1] = end
                    continue
                if start - prev <= limit:
                    i = right(starts, prev)  # the first op starting after prev
                    if i >= n_ops or starts[i] >= start:
                        run[1] = end  # nothing else ran meanwhile: the engine's
                        continue
                out.append((run[0], run[1]))
            runs[tid] = [start, end]
        out.extend((a, b) for a, b in runs.values())
        return merge(sorted(out))

    @cached_property
    def sync_gaps(self) -> list[Interval]:
        """The GPU's idle gaps within the steps that a synchronization left
        (:func:`after_sync`): of the gaps between compute kernels (on a stream,
        not empty) within the steps, only those a synchronizing call ends in
        can be one, so only those are looked at."""
        calls = self.runtime.sync_calls
        steps = self.steps
        if not calls or not steps or not self.gpu.has_parts:
            return []
        span = merge((s, e) for s, e, _ in steps)
        span_ends = [e for _, e in span]
        lists = self.gpu.lists
        recs: list[Any] = lists[0]
        coll = lists[GPU_COLLECTIVE - GPU_COMPUTE]
        if coll:
            recs = sorted([*recs, *coll], key=_START)
        neg = float("-inf")
        most = list(accumulate((r[1] if r[1] > r[0] else neg for r in recs), max))
        gaps: set[Interval] = set()

        def gap_at(t: float) -> None:
            """The gap within the steps that ``t`` falls in, if any."""
            i = bisect.bisect_left(span_ends, t)
            if i >= len(span) or span[i][0] > t:
                return
            s_lo, s_hi = span[i]
            k = bisect.bisect_left(recs, t, key=_START)  # compute starting before t
            before = most[k - 1] if k else neg
            if before > t:
                return  # t falls inside a compute kernel
            hi = s_hi
            while k < len(recs):
                r = recs[k]
                if r[0] >= s_hi:
                    break
                if r[1] > r[0]:
                    hi = r[0]
                    break
                k += 1
            lo = s_lo if before < s_lo else before
            if lo < hi:
                gaps.add((lo, hi))  # type: ignore[arg-type]

        for s, e in calls:
            gap_at(e)  # the gap a call returns in
            # and those it waited through: that idle time is no wait for the GPU
            gap_at(s)
            j = bisect.bisect_left(recs, s, key=_START)
            while j < len(recs) and recs[j][0] < e:
                r = recs[j]
                if j and r[1] > r[0] and most[j - 1] < r[0]:
                    gap_at(most[j - 1] if most[j - 1] > s else s)
                j += 1
            # the GPU drained during the call and stayed idle past its end (the
            # gap may lie across two steps: the one in the earlier step is it too)
            if j and s < most[j - 1] < e:
                gap_at(most[j - 1])
        return merge(after_sync(sorted(gaps), calls))

    @cached_property
    def swept(self) -> dict[int, int]:
        """The time under each combination of the passes' lists, the host's
        steps, the steps' own windows and :attr:`sync_gaps` (:func:`sweep`): what
        the step breakdown and the account sum.  Needs steps."""
        steps = self.steps
        host = [(s, e) for s, e, _ in self.host[: len(steps)]]
        span = merge((s, e) for s, e, _ in steps)
        layers = self.layers()
        layers[HOST_WINDOWS] = host
        layers[STEP_WINDOWS] = span
        layers[SYNC_GAPS] = self.sync_gaps
        layers[STEPS_SPAN] = [(steps[0][0], steps[-1][1])]
        lo = min(host[0][0], span[0][0])
        hi = max(max(e for _, e in host), span[-1][1])
        return sweep(layers, lo, hi)

    # -- the analyzer's tables -------------------------------------------------------------
    def gpu_bounds(self) -> tuple[int, int]:
        """The GPU activities that start in the window, as a slice of the list."""
        gpu = self.timeline.gpu
        w = self.window
        if w is None:
            return 0, len(gpu)
        return bisect.bisect_left(gpu, w[0], key=_START), bisect.bisect_left(gpu, w[1], key=_START)

    def kernel_tally(self) -> dict[str, list[int]]:
        """``name -> [calls, total ns, min ns, max ns]`` of the kernels, copies and
        sets that start in the window (:func:`gputui.trace.tables.tally`)."""
        a, b = self.gpu_bounds()
        kinds = TABLE_KINDS
        return tally((act[4], act[2]) for act in islice(self.timeline.gpu, a, b) if act[3] in kinds)

    def cast_parents(self) -> tuple[tuple[str, int], ...]:
        """The window's conversions (``aten::to``) by the host range each runs
        directly inside: the name of the torch op or autograd node that encloses
        it (autocast casts a matmul's or a convolution's inputs inside the op;
        the backward casts a gradient back inside its node), ``""`` for one
        called from the program itself (under a step mark, a ``record_function``
        or a Python frame, or nothing).  The most first.  One walk over the
        host's ranges: callers ask only where the casts are many."""
        w = self.window
        lo, hi = (w[0], w[1]) if w is not None else (float("-inf"), float("inf"))
        stacks: dict[Any, list[Any]] = {}
        by: Counter[str] = Counter()
        gpu_annotation, cast = GPU_ANNOTATION, CAST_OP
        for r in self.timeline.ranges:
            if r[4] == gpu_annotation:
                continue
            st = stacks.get(r[3])
            if st is None:
                st = stacks[r[3]] = []
            s = r[0]
            while st and st[-1][1] <= s:
                st.pop()
            if r[2] == cast and lo <= s < hi:
                p = st[-1] if st else None
                inside = p is not None and p[4] == OP and p[2] != cast and p[1] >= r[1]
                by[p[2] if p is not None and inside else ""] += 1
            st.append(r)
        return tuple(sorted(by.items(), key=lambda kv: (-kv[1], kv[0])))

    def comm_sequence(self, limit: int = COMM_SEQUENCE) -> tuple[tuple[str, float, float], ...]:
        """The communication kernels (NCCL's, by name) on a stream that start in
        the window, in start order, the first ``limit``: each as its
        collective's kind (its name where none reads from it), its start from
        the window's (µs) and its time on the GPU (µs).  What ranks' captures
        are matched by, collective by collective: a collective's kernels end
        together on every rank, so the one that ran shortest arrived last, and
        the others' excess over it is their wait for that rank."""
        comm = self.gpu.lists[GPU_COMM - GPU_COMPUTE]
        w = self.window
        a, b, lo = 0, len(comm), comm[0][0] if comm else 0
        if w is not None:
            a, b, lo = (
                bisect.bisect_left(comm, w[0], key=_START),
                bisect.bisect_left(comm, w[1], key=_START),
                w[0],
            )
        kinds: dict[str, str] = {}
        out = []
        for act in islice(comm, a, min(b, a + limit)):
            kind = kinds.get(act[4])
            if kind is None:
                kind = kinds[act[4]] = collective_kind(act[4]) or act[4]
            out.append((kind, float(act[0] - lo), act[2] / 1000.0))
        return tuple(out)

    def gpu_span(self) -> float | None:
        """From the first GPU activity in the window to the last one's end (µs)."""
        a, b = self.gpu_bounds()
        if b <= a:
            return None
        gpu = self.timeline.gpu
        return float(max(map(_END, islice(gpu, a, b))) - gpu[a][0])

    @cached_property
    def _tallies(self) -> list[_Tally]:
        return _nest(self)

    def op_tally(self, part: int = 1) -> list[OpTally]:
        """The host's ops and runtime calls that start in one part of the trace (0
        before the window, 1 in it, 2 after it), by name, in the order they first
        appear (:func:`~gputui.trace.timeline.self_times`' rows)."""
        t = self._tallies[part]
        children = t.children
        return [
            OpTally(name, t.calls[name], total - children.get(name, 0), total)
            for name, total in t.total.items()
        ]

    def python_frames(self, limit: int = PYTHON_FRAMES) -> tuple[tuple[str, float], ...]:
        """A trace's Python frames (``with_stack=True``) that start in the window,
        by their self time there (µs: their time less that of the frames, ops
        and runtime calls nested in them), the most first; empty for a trace
        recorded without Python stacks."""
        frames = self._tallies[1].python
        top = sorted(frames.items(), key=lambda kv: -kv[1])[:limit]
        return tuple((name, float(us)) for name, us in top if us > 0)

    def python_packages(self, limit: int = PYTHON_FRAMES) -> tuple[tuple[str, float], ...]:
        """:meth:`python_frames`' self times by package (:class:`Sanity`)."""
        by: dict[str, int] = {}
        for name, us in self._tallies[1].python.items():
            m = _PACKAGE.match(name)
            if m and us > 0:
                by[m[1]] = by.get(m[1], 0) + us
        top = sorted(by.items(), key=lambda kv: -kv[1])[:limit]
        return tuple((name, float(us)) for name, us in top)

    def outside(self) -> tuple[Outside, Outside]:
        """What lies before the window and after it."""
        w = self.window
        if w is None:
            return Outside(), Outside()
        tl_ = self.timeline
        lists = [items for items in (tl_.gpu, tl_.runtime, tl_.ranges) if items]
        first = min((items[0][0] for items in lists), default=w[0])
        last = max((max(map(_END, items)) for items in lists), default=w[1])
        a, b = self.gpu_bounds()
        gpu = tl_.gpu
        sides = []
        for part, span, (lo, hi) in ((0, w[0] - first, (0, a)), (2, last - w[1], (b, len(gpu)))):
            acts = [x for x in islice(gpu, lo, hi) if x[3] in TABLE_KINDS]
            ops = sorted(self.op_tally(part), key=lambda t: -t.self_us)
            sides.append(
                Outside(
                    us=max(0, span),
                    ops=tuple(ops),
                    gpu_activities=len(acts),
                    gpu_us=round(sum(x[2] for x in acts) / 1000.0, 3),
                )
            )
        return sides[0], sides[1]

    def sanity(self) -> Sanity:
        g = self.gpu
        return Sanity(
            kernels_launched=g.launched,
            kernels_before_launch=g.before_launch,
            kernel_launch_calls=self.runtime.kernel_launch_calls,
            kernel_records=g.kernels,
            runtime_calls=len(self.timeline.runtime),
            steps=len(self.step_ranges),
            compile_us=self._compile_us(),
            cold_launches=len(self._cold_launches),
            cold_launch_us=float(sum(e - s for s, e in self._cold_launches)),
            graph_captures=self._capture_count(),
            graph_capture_us=float(length(self._graph_captures)),
            blind_waits=len(self._blind_waits),
            blind_wait_us=float(sum(e - s for s, e in self._blind_waits)),
            setup_calls=len(self._setup_calls),
            setup_call_us=float(sum(c[1] - c[0] for c in self._setup_calls)),
            setup_by_name=self._setup_by_name(),
            python_frames=self.python_frames(),
            python_packages=self.python_packages(),
            micro_batches=self._micro_batches(),
            optimizer_launch_share=self._optimizer_launch_share(),
            **self._warmup(),
            **self._kernel_rounding(),
        )

    @cached_property
    def _blind_waits(self) -> list[tuple[int, int]]:
        """The synchronizing calls in the window of :data:`COLD_LAUNCH_US` or
        longer (their part in it) while the GPU ran nothing the trace recorded
        (under 1% of the call): what the CPU waited for is not in the trace."""
        return [(s, e) for s, e, _name in self._idle_long_calls(0, None, 0.01)]

    @cached_property
    def _setup_calls(self) -> list[tuple[int, int, str]]:
        """The set-up calls (:data:`SETUP_CALLS`) in the window of
        :data:`COLD_LAUNCH_US` or longer (their part in it, and their name)
        while the GPU was busy less than half of the call: making or freeing a
        resource, not waiting on the GPU's work (``cudaFree`` first waits for
        the device)."""
        if self.runtime_names.isdisjoint(SETUP_CALLS):
            return []
        return self._idle_long_calls(RT_OTHER - RT_SYNC, SETUP_CALLS, 0.5)

    def _idle_long_calls(
        self, kind: int, names: frozenset[str] | None, busy_share: float
    ) -> list[tuple[int, int, str]]:
        """The runtime and driver calls of one kind (the runtime pass's list
        ``kind``: 0 the synchronizing ones), of ``names`` where given, whose
        part in the window lasts :data:`COLD_LAUNCH_US` or longer while the GPU
        was busy less than ``busy_share`` of it: (start, end, name) of that part."""
        window = self.window
        if window is None:
            return []
        lo, hi = window
        rt = self.runtime.lists
        long = [
            (max(r[0], lo), min(r[1], hi), r[2])
            for calls in (rt[kind], rt[kind + RT_DRIVER])
            for r in calls
            if r[1] - r[0] >= COLD_LAUNCH_US
            and (names is None or r[2] in names)
            and r[1] > lo
            and r[0] < hi
        ]
        long = [c for c in long if c[1] - c[0] >= COLD_LAUNCH_US]
        if not long:
            return []
        busy = self._gpu_busy
        return [c for c in long if length(intersect([c[:2]], busy)) < busy_share * (c[1] - c[0])]

    def _optimizer_launch_share(self) -> float | None:
        """:attr:`Sanity.optimizer_launch_share`: of the window's kernel launch
        calls, the share that start inside the optimizer's steps
        (``Optimizer.step#...``) on their thread; None without an optimizer step
        or a launch in the window."""
        names = {n for n in self.range_names if n.startswith(OPTIMIZER_STEP)}
        if not names:
            return None
        return launch_share_inside(self.timeline.ranges, self.window_kernel_launches(), names)

    def _micro_batches(self) -> int:
        """:attr:`Sanity.micro_batches`: the DataLoader's fetches (``__next__``)
        and the optimizer's steps (``Optimizer.step#...``) that start inside each
        host-side ProfilerStep, on the step's thread (counted by bisection: a
        long trace has thousands of steps)."""
        steps = [r for r in self.step_ranges if r[1] > r[0]]
        if not steps:
            return 0
        tid = steps[0][3]
        fetches = [r[0] for r in self.ranges.lists[DATA] if r[3] == tid]
        if len(fetches) < 2 * len(steps):
            return 0
        optimizer = [
            r[0]
            for r in self.ranges.lists[ANNOTATION_OTHER]
            if r[3] == tid and r[2].startswith(OPTIMIZER_STEP)
        ]
        fetches.sort()
        optimizer.sort()
        left = bisect.bisect_left
        counts: set[tuple[int, int]] = set()
        for step in steps:
            lo, hi = step[0], step[1]
            if step[3] != tid:
                return 0  # steps marked on two threads: no one loop to read
            counts.add(
                (
                    left(fetches, hi) - left(fetches, lo),
                    left(optimizer, hi) - left(optimizer, lo),
                )
            )
            if len(counts) > 1:
                return 0
        ((n, opt),) = counts
        return n if n >= 2 and opt == 1 else 0

    def _warmup(self) -> dict[str, Any]:
        """:class:`Sanity`'s ``warmup_calls``, ``warmup_us`` and ``warmup_by_name``."""
        window = self.window
        if window is None:
            return {}
        lo, hi = window
        ops = self.ranges.lists[DISPATCH_OP]
        least = WARMUP_CALL_US
        # the long calls first (one cheap pass): most traces have none
        long = [r for r in ops if r[1] - r[0] >= least and r[1] > lo and r[0] < hi]
        if not long:
            return {}
        names = {r[2] for r in long}
        by_op: dict[str, list[Any]] = {name: [] for name in names}
        for r in ops:
            if r[1] > lo and r[0] < hi and r[2] in names:
                by_op[r[2]].append(r)
        steps = self.steps
        first_step_end = steps[0][1] if len(steps) >= 2 and self.step_ranges else None
        busy = self._gpu_busy
        calls: list[tuple[Interval, str]] = []
        for name, recs in by_op.items():
            for r in _warmup_run(recs, first_step_end):
                part = (max(r[0], lo), min(r[1], hi))
                us = part[1] - part[0]  # (the part in the window must be that long too)
                if us >= least and 2 * length(intersect([part], busy)) < us:
                    calls.append((part, name))
        if not calls:
            return {}
        # less what the other one-off figures count (set-up calls inside
        # cuDNN's search, cold launches, compiling, graph captures)
        counted = merge(
            [
                *self._cold_launches,
                *((c[0], c[1]) for c in self._setup_calls),
                *self._graph_captures,
                *self._compile_ranges(),
            ]
        )
        own = [(part, name, length(subtract([part], counted))) for part, name in calls]
        kept = [c for c in own if c[2] >= least]
        if not kept:
            return {}
        # named by the innermost: an op's call holds the ops it calls (conv2d,
        # convolution, cudnn_convolution), and the innermost is where time went
        inner = [
            c
            for c in kept
            if not any(
                o is not c and c[0][0] <= o[0][0] and o[0][1] <= c[0][1] and o[0] != c[0]
                for o in kept
            )
        ]
        by: dict[str, list[float]] = {}
        for _part, name, us in inner:
            got = by.setdefault(name, [0, 0])
            got[0] += 1
            got[1] += us
        return {
            "warmup_calls": len(inner),
            "warmup_us": float(length(subtract(merge([c[0] for c in kept]), counted))),
            "warmup_by_name": tuple(
                (name, int(n), float(us))
                for name, (n, us) in sorted(by.items(), key=lambda kv: -kv[1][1])
            ),
        }

    def _compile_ranges(self) -> list[Interval]:
        """torch.compile's compiling ranges in the window (:meth:`_compile_us`)."""
        window = self.window
        if window is None or not any(n.endswith(COMPILE_RANGE_SUFFIX) for n in self.range_names):
            return []
        lo, hi = window
        return [
            (max(r[0], lo), min(r[1], hi))
            for r in self.timeline.ranges
            if r[2].endswith(COMPILE_RANGE_SUFFIX) and r[1] > lo and r[0] < hi
        ]

    @cached_property
    def _gpu_busy(self) -> list[Interval]:
        """The GPU's busy time, its activities merged (the long calls' test)."""
        return merge((a[0], a[1]) for a in self.timeline.gpu if a[1] > a[0])

    def _setup_by_name(self) -> tuple[tuple[str, int, float], ...]:
        """:meth:`_setup_calls` by name: (name, calls, us), the most time first."""
        by: dict[str, list[int]] = {}
        for s, e, name in self._setup_calls:
            got = by.setdefault(name, [0, 0])
            got[0] += 1
            got[1] += e - s
        return tuple(
            (name, n, float(us)) for name, (n, us) in sorted(by.items(), key=lambda kv: -kv[1][1])
        )

    def _capture_count(self) -> int:
        """The CUDA graph captures begun in the trace (:class:`Sanity`)."""
        if self.runtime_names.isdisjoint(GRAPH_CAPTURES):
            return 0
        return sum(1 for r in self.timeline.runtime if r[2] in GRAPH_CAPTURES)

    @cached_property
    def _graph_captures(self) -> list[Interval]:
        """The CUDA graph captures in the trace's window, each from its begin
        call to the next end call on its thread (or the window's end), merged
        (:class:`Sanity`)."""
        window = self.window
        if window is None or self.runtime_names.isdisjoint(GRAPH_CAPTURES):
            return []
        lo, hi = window
        begun: dict[Any, int] = {}
        out: list[Interval] = []
        for r in self.timeline.runtime:  # (in start order)
            name = r[2]
            if name in GRAPH_CAPTURES:
                begun.setdefault(r[3], r[0])
            elif name in _END_CAPTURES and r[3] in begun:
                out.append((begun.pop(r[3]), r[1]))
        out.extend((start, hi) for start in begun.values())
        return merge((max(a, lo), min(b, hi)) for a, b in out if b > lo and a < hi)

    def _kernel_rounding(self) -> dict[str, Any]:
        """The kernels that start in the window, their exact time and the time
        the figures count (:class:`Sanity`)."""
        window = self.window
        if window is None:
            return {}
        lo, hi = window
        n = exact = counted = tiny = 0
        tiny_ns = TINY_KERNEL_NS
        for kernels in self.gpu.per_device.values():
            for a in kernels:
                if lo <= a[0] < hi:
                    n += 1
                    exact += a[2]
                    counted += a[1] - a[0]
                    if a[2] < tiny_ns:
                        tiny += 1
        return {
            "kernels_in_window": n,
            "kernel_exact_us": exact / 1000.0,
            "kernel_counted_us": float(counted),
            "kernels_under_10us": tiny,
        }

    @cached_property
    def _cold_launches(self) -> list[tuple[int, int]]:
        """The launch calls in the window of :data:`COLD_LAUNCH_US` or longer,
        and the first uses of :data:`FIRST_USE_US` or longer
        (:meth:`_first_uses`)."""
        window = self.window
        if window is None:
            return []
        lo, hi = window
        rt = self.runtime.lists
        cold: list[Any] = []
        maybe: list[Any] = []
        for calls in (rt[RT_LAUNCH - RT_SYNC], rt[RT_LAUNCH - RT_SYNC + RT_DRIVER]):
            for r in calls:
                d = r[1] - r[0]
                if d >= FIRST_USE_US and r[1] > lo and r[0] < hi:
                    (cold if d >= COLD_LAUNCH_US else maybe).append(r)
        if maybe:  # (the part inside the window must be that long too)
            cold.extend(
                r for r in self._first_uses(maybe) if min(r[1], hi) - max(r[0], lo) >= FIRST_USE_US
            )
        return [(max(r[0], lo), min(r[1], hi)) for r in cold]

    def window_kernel_launches(self) -> list[Any]:
        """The kernel launch calls (any API, graph launches too) that start in
        the window, in start order."""
        window = self.window
        if window is None:
            return []
        lo, hi = window
        rt = self.runtime.lists
        kernel_launches = KERNEL_LAUNCHES
        return sorted(
            (
                r
                for calls in (rt[RT_LAUNCH - RT_SYNC], rt[RT_LAUNCH - RT_SYNC + RT_DRIVER])
                for r in calls
                if lo <= r[0] < hi and r[2] in kernel_launches
            ),
            key=_START,
        )

    def launchers(self, names: set[str]) -> frozenset[str]:
        """Those of ``names`` (host ops) that queued GPU work in the window: a
        kernel launch or an async copy names the op as its External id, or,
        where the ids say nothing of it (a trace whose launches carry other
        ids), starts inside one of its calls on its thread.  Read only for the
        few names asked (the slow ops of a table)."""
        window = self.window
        if window is None or not names:
            return frozenset()
        lo, hi = window
        rt = self.runtime.lists
        launches = [
            r
            for calls in (rt[RT_LAUNCH - RT_SYNC], rt[RT_LAUNCH - RT_SYNC + RT_DRIVER])
            for r in calls
            if r[1] > lo and r[0] < hi
        ]
        if not launches:
            return frozenset()
        ids = {r[5] for r in launches if r[5] != -1}
        mine = [r for r in self.timeline.ranges if r[2] in names and r[0] < hi]
        found = {r[2] for r in mine if r[5] in ids}
        rest = [r for r in mine if r[2] not in found]
        if rest:
            threads = {r[3] for r in rest}
            starts: dict[Any, list[int]] = {}
            for r in launches:
                if r[3] in threads:
                    starts.setdefault(r[3], []).append(r[0])
            for at in starts.values():
                at.sort()
            for r in rest:
                on_thread = starts.get(r[3])
                if on_thread:
                    k = bisect.bisect_left(on_thread, r[0])
                    if k < len(on_thread) and on_thread[k] <= r[1]:
                        found.add(r[2])
        return frozenset(found)

    def _first_uses(self, calls: list[Any]) -> list[Any]:
        """Of launch calls of a millisecond or more, those that launched the first
        activity of its name in the trace while the GPU was busy less than half
        of the call: loading the kernel, not waiting for the GPU."""
        gpu = self.timeline.gpu  # in start order: read backwards, the first stays
        firsts = set({a[4]: a[7] for a in reversed(gpu)}.values())
        firsts.discard(-1)
        busy = merge_sorted(gpu)
        starts = [b[0] for b in busy]
        out = []
        for r in calls:
            if r[4] not in firsts:
                continue
            s, e = r[0], r[1]
            i = max(0, bisect.bisect_right(starts, s) - 1)
            covered = 0
            while i < len(busy) and busy[i][0] < e:
                covered += max(0, min(e, busy[i][1]) - max(s, busy[i][0]))
                i += 1
            if 2 * covered < e - s:
                out.append(r)
        return out

    def _compile_us(self) -> float:
        """The union of torch.compile's compiling ranges inside the window."""
        return float(length(merge(self._compile_ranges())))


_MISSING = object()


def _warmup_run(calls: list[Any], first_step_end: int | None) -> list[Any]:
    """The warm-up calls among one op's ``calls`` in the window (in start order):
    those of :data:`WARMUP_CALL_US` or longer and :data:`WARMUP_RATIO` times the
    op's median call, where they are one run of its calls (no ordinary call of
    the op between them), the run starts in the first half of the op's calls'
    span (within the first step, in a window of steps) and at least
    :data:`WARMUP_MIN_CALLS` ordinary calls follow it: the op got fast and stayed
    fast.  A long call that recurs (a large copy every step) is none."""
    if len(calls) < WARMUP_MIN_CALLS + 1:
        return []
    durations = sorted(r[1] - r[0] for r in calls)
    bar = max(WARMUP_CALL_US, WARMUP_RATIO * max(durations[len(durations) // 2], 1))
    run = [k for k, r in enumerate(calls) if r[1] - r[0] >= bar]
    if not run or run[-1] - run[0] + 1 != len(run) or len(calls) - 1 - run[-1] < WARMUP_MIN_CALLS:
        return []
    first, last = calls[0][0], calls[-1][0]
    start = calls[run[0]][0]
    if 2 * (start - first) > last - first:
        return []
    if first_step_end is not None and start >= first_step_end:
        return []
    return [calls[k] for k in run]


class RangePass:
    """The host ranges, filed in one pass in start order under their role
    (:func:`host_role`), with the step marks picked out."""

    def __init__(self, scan: Scan) -> None:
        lists: list[list[Any]] = [[] for _ in range(6)]
        #: every range whose name holds "ProfilerStep" (HTA's step events)
        self.step_events: list[Any] = []
        #: a trace's Python frames that call a module, and a numeric library's
        #: (:data:`MODULE_CALLS`, :data:`LIBRARY_CODE`)
        self.module_calls: list[Any] = []
        self.library_code: list[Any] = []
        #: torch's own host code between its ops (:data:`TORCH_CODE`)
        self.torch_code: list[Any] = []
        #: the autograd engine's backward functions (:data:`ENGINE_FUNCTION`)
        self.engine_functions: list[Any] = []
        self._collectives: list[Any] = []  # the plugin's collectives, not ops
        roles: dict[str, dict[str, Any]] = {}
        missing = _MISSING
        for r in scan.timeline.ranges:
            kind = r[4]
            by_name = roles.get(kind)
            if by_name is None:
                by_name = roles[kind] = {}
            name = r[2]
            lst = by_name.get(name, missing)
            if lst is missing:
                lst = by_name[name] = self._filed(name, kind, lists)
            if lst is not None:
                lst.append(r)
        #: each role's ranges (:data:`DATA` ... :data:`ANNOTATION_OTHER`)
        self.lists = lists
        #: the names of the ranges of each kind
        self.by_kind = {kind: set(names) for kind, names in roles.items()}
        self.names: set[str] = set().union(*self.by_kind.values())
        #: external ids of the plugin's host collectives, of any kind (their
        #: kernels are communication)
        self.collective_ids = {r[5] for r in (*lists[COLLECTIVE], *self._collectives) if r[5] >= 0}

    def _filed(self, name: str, kind: str, lists: list[list[Any]]) -> Any:
        if kind == PYTHON and STEP_MARK not in name and name not in COLLECTIVE_OPS:
            if is_module_call(name):
                return self.module_calls
            if is_library_code(name):
                return self.library_code
        role = host_role(name, kind)
        lst = None if role is None else lists[role]
        if lst is None and name in COLLECTIVE_OPS:
            return self._collectives
        if STEP_MARK in name:
            return self.step_events if lst is None else _Both(lst, self.step_events)
        if role == ANNOTATION_OTHER and name.startswith(OPTIMIZER_RANGES):
            return _Both(lists[role], self.torch_code)
        if role == DISPATCH_OP and name.startswith(ENGINE_FUNCTION):
            return _Both(lists[role], self.engine_functions)
        return lst


class GpuPass:
    """The GPU activities, filed in one pass in start order (module docstring)."""

    def __init__(self, scan: Scan) -> None:
        #: by class, on a stream or not (GPU_COMPUTE - GPU_COMPUTE ...)
        self.lists: list[list[Any]] = [[] for _ in range(12)]
        #: HTA's activities in its window (on a stream), and those it types as
        #: computation and as communication
        self.hta_all: list[Any] = []
        self.hta_comp: list[Any] = []
        self.hta_comm: list[Any] = []
        #: device -> its kernels (the plugin's GPU utilization)
        self.per_device: dict[int, list[Any]] = {}
        self.kernel_names: set[str] = set()
        #: correlation ids of copies from or to pageable memory (they block the
        #: host) -> COPY_H2D or COPY_D2H (the copy's direction)
        self.blocking: dict[int, int] = {}
        #: stream -> [the previous activity's end, host wait, kernel wait, other]
        self.idle: dict[int, list[int]] = {}
        #: HTA's launch pairs: call durations, GPU durations, launch delays (µs)
        self.launch_us: tuple[list[int], list[int], list[int]] = ([], [], [])
        # the steps' GPU work (Scan.steps): per host step its first start, last
        # end and how many activities
        host = scan.host if scan.fast_steps else []
        self.step_lo: list[int | None] = [None] * len(host)
        self.step_hi: list[int | None] = [None] * len(host)
        self.step_matched = [0] * len(host)
        counts = self._read(scan, host)
        #: kernels; an activity on a stream, not empty, not a synchronization (the
        #: account has a GPU side); kernels whose launch call is in the trace,
        #: those of them that start before it; launch pairs whose GPU work is
        #: shorter than the call; activities the steps matched
        self.kernels, self.has_parts, self.launched, self.before_launch = counts[:4]
        self.short, self.step_seen = counts[4:]

    def _read(self, scan: Scan, host: list[Step]) -> tuple[int, bool, int, int, int, int]:
        collective_ids = scan.ranges.collective_ids
        cutoff = scan.hta_cutoff() if scan.unique_calls else None
        lim = None if cutoff is None else cutoff[0] + 1 if cutoff[1] else cutoff[0]
        n_steps, starts, ends = len(host), [s for s, _, _ in host], [e for _, e, _ in host]
        step_lo, step_hi, matched = self.step_lo, self.step_hi, self.step_matched
        right, calls, hta_launch = bisect.bisect_right, scan.calls, HTA_LAUNCH_CALLS
        codes: dict[str, dict[str, tuple[int, int, bool, int]]] = {}
        lists, per_device, idle, blocking = self.lists, self.per_device, self.idle, self.blocking
        hta_all, hta_comp, hta_comm = self.hta_all, self.hta_comp, self.hta_comm
        cpu_us, gpu_us, delays = self.launch_us
        coll = GPU_COLLECTIVE - GPU_COMPUTE
        kernel, off, wait_us, cutoff_us = KERNEL, OFF_STREAM, KERNEL_WAIT_US, RUNTIME_CUTOFF_US
        short = launched = before = kernels = seen = 0
        parts = False
        for a in scan.timeline.gpu:
            kind = a[3]
            by_name = codes.get(kind)
            if by_name is None:
                by_name = codes[kind] = {}
            code = by_name.get(a[4])
            if code is None:
                code = by_name[a[4]] = self._code(kind, a[4])
            cls, hta, table, pageable = code
            s, e, stream, corr = a[0], a[1], a[5], a[7]
            call = calls.get(corr)  # (its keys are all >= 0)
            if cls >= 0:
                if cls == 0 and collective_ids and a[8] in collective_ids:
                    cls = coll
                if stream != -1:
                    lists[cls].append(a)
                    parts = parts or e > s
                else:
                    lists[cls + off].append(a)
            if kind == kernel:
                kernels += 1
                dev = per_device.get(a[6])
                if dev is None:
                    dev = per_device[a[6]] = []
                dev.append(a)
                if call is not None:
                    launched += 1
                    before += s < call[0]
            elif pageable and corr >= 0:
                blocking[corr] = pageable
            if table and call is not None and n_steps:
                cs = call[0]
                i = right(ends, cs)
                if i < n_steps and cs >= starts[i] and call[1] <= ends[i]:
                    lo, hi = step_lo[i], step_hi[i]
                    if lo is None or s < lo:
                        step_lo[i] = s
                    if hi is None or e > hi:
                        step_hi[i] = e
                    matched[i] += 1
                    seen += 1
            if stream == -1:
                continue
            if lim is not None:  # HTA's window: launched before its last step
                if corr >= 0:
                    if call is None or call[0] >= lim:
                        continue
                elif s >= lim:
                    continue
            hta_all.append(a)
            if hta == 1:
                hta_comp.append(a)
            elif hta == 2:
                hta_comm.append(a)
            if table:
                row = idle.get(stream)
                if row is None:
                    idle[stream] = [e, 0, 0, 0]
                else:
                    gap = s - row[0]
                    if call is not None and call[0] > row[0]:
                        row[1] += gap
                    elif gap < wait_us:
                        row[2] += gap
                    else:
                        row[3] += gap
                    row[0] = e
            if call is not None and call[2] in hta_launch:
                c, g = call[1] - call[0], e - s
                d = s - call[0] - c
                cpu_us.append(c)
                gpu_us.append(g)
                delays.append(d if d > 0 else 0)
                short += c <= cutoff_us and g < c
        return kernels, parts, launched, before, short, seen

    def _code(self, kind: str, name: str) -> tuple[int, int, bool, int]:
        """What a (kind, name) is: its class (an index into :attr:`lists`, -1
        for a synchronization), its HTA type (1 computation, 2 communication, 0
        other), whether HTA's idle breakdown reads it, whether it is a copy from
        or to pageable memory (0: not; COPY_H2D, COPY_D2H)."""
        hta_type = hta_kernel_type(name)
        hta = 1 if hta_type == HTA_COMPUTATION else 2 if hta_type == HTA_COMMUNICATION else 0
        if kind == KERNEL:
            self.kernel_names.add(name)
            cls = GPU_COMM if hta_type == HTA_COMMUNICATION else GPU_COMPUTE
        elif kind == MEMCPY:
            cls = GPU_MEMCPY
        elif kind == MEMSET:
            cls = GPU_MEMSET
        elif kind == SYNC:
            cls = GPU_COMPUTE - 1
        else:
            cls = GPU_OTHER
        pageable = 0
        if kind == MEMCPY and "Pageable" in name:
            pageable = COPY_H2D if "HtoD" in name else COPY_D2H
        return cls - GPU_COMPUTE, hta, kind in TABLE_KINDS, pageable


class RuntimePass:
    """The runtime calls, filed in one pass in start order: by what the account
    makes of them (sync, launch, other) and API (runtime, driver); the starts of
    the synchronizing and launching calls, and the synchronizing calls'
    intervals (the account's); the starts of the blocking copies (from or to
    pageable memory) by direction."""

    def __init__(self, scan: Scan) -> None:
        blocking = scan.gpu.blocking
        #: RT_SYNC, RT_SYNC + RT_DRIVER, RT_LAUNCH, ... (less RT_SYNC)
        lists: list[list[Any]] = [[] for _ in range(6)]
        sync_calls: list[Interval] = []
        sync_starts: list[int] = []
        launch_starts: list[int] = []
        #: [COPY_H2D], [COPY_D2H]: the starts of the blocking copies' calls
        copy_starts: tuple[list[int], list[int], list[int]] = ([], [], [])
        #: the same copies' calls' lengths (us), in the same order
        copy_waits: tuple[list[int], list[int], list[int]] = ([], [], [])
        #: the synchronizing calls that are no blocking copy
        sync_ops: list[Any] = []
        sync_names, launch_names = SYNC_CALLS, LAUNCH_CALLS
        launch = RT_LAUNCH - RT_SYNC
        other = RT_OTHER - RT_SYNC
        runtime_api, driver = RUNTIME, RT_DRIVER
        for r in scan.timeline.runtime:
            s = r[0]
            e = r[1]
            name = r[2]
            api = 0 if r[6] == runtime_api else driver
            if name in sync_names or (blocking and r[4] in blocking):
                sync_starts.append(s)
                lists[api].append(r)
                if e > s:
                    sync_calls.append((s, e))
                way = blocking.get(r[4]) if blocking else None
                if way:
                    copy_starts[way].append(s)
                    copy_waits[way].append(e - s)
                elif name in sync_names:
                    sync_ops.append(r)
            elif name in launch_names:
                launch_starts.append(s)
                lists[launch + api].append(r)
            else:
                lists[other + api].append(r)
        sync_calls.sort()
        self.lists = lists
        self.sync_calls = sync_calls
        self.sync_starts = sync_starts
        self.launch_starts = launch_starts
        self.copy_starts = copy_starts
        self.copy_waits = copy_waits
        self.explicit_syncs = sync_ops
        #: whether the trace recorded GPU activity (else no copy can be told blocking)
        self.copies_seen = bool(scan.timeline.gpu)
        launches = scan.runtime_names & KERNEL_LAUNCHES
        self.kernel_launch_calls = (
            sum(1 for r in scan.timeline.runtime if r[2] in launches) if launches else 0
        )


# -- self times ---------------------------------------------------------------------------
def _nest(scan: Scan) -> list[_Tally]:
    """Each op's self time, per part of the trace (before the window, in it, after
    it): the host's ranges (but the GPU's annotations) and runtime calls nested
    per thread, in start order, each under the innermost one still running on
    its thread.  Annotations and Python functions nest but are not rows."""
    timeline = scan.timeline
    ranges, runtime = timeline.ranges, timeline.runtime
    w = scan.window
    bounds = (float("-inf"), float("inf")) if w is None else (w[0], w[1])
    by_kind = scan.ranges.by_kind
    ops = by_kind.get(OP, set()) | scan.runtime_names
    others: set[str] = set()
    for kind, names in by_kind.items():
        if kind != OP and kind != GPU_ANNOTATION:
            others |= names
    shadowed = by_kind.get(GPU_ANNOTATION, set()) & ops
    # the Python frames are the steps' thread's (others wait on locks and queues)
    steps = scan.step_ranges
    frames = PYTHON in by_kind
    main = steps[0][3] if steps and frames else _NO_THREAD
    tallies = None if ops & others else _nest_fast(ranges, runtime, bounds, main)
    if tallies is None:
        return _nest_stream(ranges, runtime, bounds, main, frames)
    python = by_kind.get(PYTHON, ())
    for part, t in enumerate(tallies):
        for name, total in t.total.items():  # (in the order they first appear)
            if total and name in python:
                t.python[name] = total - t.children.get(name, 0)
        for name in others:
            t.total.pop(name, None)
        lo = float("-inf") if part == 0 else bounds[part - 1]
        hi = float("inf") if part == 2 else bounds[part]
        calls: Counter[str] = Counter()
        for items in (ranges, runtime):
            a = bisect.bisect_left(items, lo, key=_START)
            b = bisect.bisect_left(items, hi, key=_START)
            calls.update(map(_NAME, islice(items, a, b)))
            if items is ranges and shadowed:  # GPU annotations named as ops are no calls
                calls.subtract(
                    r[2] for r in islice(items, a, b) if r[4] == GPU_ANNOTATION and r[2] in shadowed
                )
        t.calls = calls
    return tallies


def _host_in_start_order(ranges: list[Any], runtime: list[Any]) -> Iterator[Any]:
    """The host's ranges (but the GPU's annotations) and runtime calls, both in
    start order, merged: the ranges first where they start together."""
    gpu_annotation = GPU_ANNOTATION
    m = len(runtime)
    j = 0
    inf = float("inf")
    rt_next = runtime[0][0] if m else inf
    for r in ranges:
        start = r[0]
        while rt_next < start:
            yield runtime[j]
            j += 1
            rt_next = runtime[j][0] if j < m else inf
        if r[4] != gpu_annotation:
            yield r
    yield from islice(runtime, j, None)


def _nest_fast(
    ranges: list[Any], runtime: list[Any], bounds: tuple[float, float], main: Any = _NO_THREAD
) -> list[_Tally] | None:
    """Self times in one walk over the ranges and the runtime calls together, in
    start order (ranges first where they start together).  None where records
    on one thread overlap without nesting, or two that start together come the
    shorter first: each call's own clamping and the longer-first order
    (:func:`_nest_stream`) are needed then.  Python frames of threads other
    than ``main`` (where given) nest but are tallied under no name."""
    # per part, per name in the order it first starts there: [time, the
    # children's time]; an open record is (start, end, its row), so a child's
    # time goes to the part its parent started in
    rows: list[dict[str, list[int]]] = [{}, {}, {}]
    got_rows = rows[0]
    nameless = [0, 0]  # the row of other threads' Python frames (no row)
    stacks: dict[int, list[Any]] = {}
    last_tid: Any = _NO_THREAD
    st: list[Any] = []
    pop, push = st.pop, st.append
    w0, w1 = bounds
    part = 0
    next_bound = w0
    inf = float("inf")
    python = PYTHON
    off_main = False
    for rec in _host_in_start_order(ranges, runtime):
        s = rec[0]
        if s >= next_bound:  # the next part of the trace
            while s >= next_bound:
                part += 1
                next_bound = w1 if part == 1 else inf
            got_rows = rows[part]
        tid = rec[3]
        if tid != last_tid:
            got = stacks.get(tid)
            if got is None:
                got = stacks[tid] = []
            st = got
            pop, push = st.pop, st.append
            last_tid = tid
            off_main = main is not _NO_THREAD and tid != main
        e = rec[1]
        d = e - s
        if st:
            p = st[-1]
            while p[1] <= s:
                pop()
                if not st:
                    break
                p = st[-1]
            else:
                if e > p[1]:
                    return None
                p[2][1] += d
        if off_main and rec[4] == python:
            push((s, e, nameless))  # nests, under no name
            continue
        row = got_rows.get(rec[2])
        if row is None:
            row = got_rows[rec[2]] = [0, 0]
        row[0] += d
        push((s, e, row))
    return [
        _Tally({n: r[0] for n, r in got.items()}, {n: r[1] for n, r in got.items() if r[1]})
        for got in rows
    ]


def _nest_stream(
    ranges: list[Any],
    runtime: list[Any],
    bounds: tuple[float, float],
    main: Any = _NO_THREAD,
    frames: bool = False,
) -> list[_Tally]:
    """:func:`gputui.trace.timeline.self_times`, with each op counted in the part
    of the trace it starts in: each thread's records in start order, the longer
    first; an op's self time is its time less its direct children's, at least 0.
    For the traces :func:`_nest_fast` leaves: a trace recorded with Python stacks
    opens each ``record_function`` inside one Python frame and closes it inside
    another, and an op often starts in the microsecond its frame does.

    One walk in start order, as :func:`_nest_fast`, that keeps each thread's open
    records and their children's time, not a sorted copy of the trace: a record
    that starts together with the shorter ones open above it goes under them.
    Python frames of threads other than ``main`` (where given) are no rows, and
    where the trace has frames (``frames``) their children are counted apart
    (:func:`_frames_child`)."""
    w0, w1 = bounds
    # per part, per name in the order it first appears there (as _nest_fast's):
    # [calls, time, the children's time] of the ops and runtime calls
    rows: list[dict[str, list[int]]] = [{}, {}, {}]
    got_rows = rows[0]
    # the Python frames': [0, time, children's time, 0] (four: a frame's row)
    py_rows: list[dict[str, list[int]]] = [{}, {}, {}]
    got_py = py_rows[0]
    python = PYTHON
    part = 0
    next_bound = w0
    # per thread: its open records, each as [start, end, its children's time,
    # its children's time as the Python frames count it, its row or None]
    stacks: dict[Any, list[list[Any]]] = {}
    op = OP
    last_tid: Any = _NO_THREAD
    st: list[list[Any]] = []
    inf = float("inf")
    for rec in _host_in_start_order(ranges, runtime):
        s, e = rec[0], rec[1]
        if s >= next_bound:  # the next part of the trace
            while s >= next_bound:
                part += 1
                next_bound = w1 if part == 1 else inf
            got_rows = rows[part]
            got_py = py_rows[part]
        tid = rec[3]
        dur = e - s
        kind = rec[4]  # (a runtime call's is its correlation id: never a kind)
        if kind == op or len(rec) == 7:  # an op, or a runtime call
            row = got_rows.get(rec[2])
            if row is None:
                row = got_rows[rec[2]] = [0, 0, 0]
            row[0] += 1
            row[1] += dur
        elif kind == python and (main is _NO_THREAD or tid == main):
            # a Python frame of the steps' thread: a row of its own table
            row = got_py.get(rec[2])
            if row is None:
                row = got_py[rec[2]] = [0, 0, 0, 0]
                if rec[2] not in got_rows:  # (the order names first appear in)
                    got_rows[rec[2]] = [0, 0, 0]
            row[1] += dur
        else:  # nests, but is no row (its name still takes its place in the order)
            if rec[2] not in got_rows:
                got_rows[rec[2]] = [0, 0, 0]
            row = None
        if tid != last_tid:
            got = stacks.get(tid)
            if got is None:
                got = stacks[tid] = []
            st = got
            last_tid = tid
        while st and st[-1][1] <= s:  # (_close, inlined)
            done = st.pop()
            done_row = done[4]
            if done_row is not None and (child := done[3] if len(done_row) == 4 else done[2]):
                d = done[1] - done[0]
                done_row[2] += child if child < d else d
        if st:
            top = st[-1]
            if top[0] == s and top[1] < e:
                # it starts with the shorter records open above: it goes under them
                k = len(st) - 1
                while k > 0 and st[k - 1][0] == s and st[k - 1][1] < e:
                    k -= 1
                under = st[k][1] - s  # its one child, the longest of them
                if k > 0:
                    st[k - 1][2] += dur - under
                    st[k - 1][3] += dur - under
                st.insert(k, [s, e, under, under, row])
                continue
            top[2] += dur
            if frames:
                if top[1] >= e:  # held by the innermost open record (_frames_child's usual case)
                    top[3] += dur
                else:
                    _frames_child(st, s, e)
        st.append([s, e, 0, 0, row])
    return _finish(stacks, rows, py_rows)


def _finish(
    stacks: dict[Any, list[list[Any]]],
    rows: list[dict[str, list[int]]],
    py_rows: list[dict[str, list[int]]],
) -> list[_Tally]:
    """:func:`_nest_stream`'s end: the records still open closed, and the rows
    as tallies."""
    for st in stacks.values():
        while st:
            done = st.pop()
            row = done[4]
            _close(done, done[3] if row is not None and len(row) == 4 else done[2], row)
    tallies = [_Tally(), _Tally(), _Tally()]
    for t, got_rows, got_py in zip(tallies, rows, py_rows, strict=True):
        for name, (calls, total, taken) in got_rows.items():
            if calls:
                t.total[name] = total
                t.children[name] = taken
                t.calls[name] = calls
        t.python = {name: total - taken for name, (_, total, taken, _) in got_py.items() if total}
    return tallies


def _frames_child(st: list[list[Any]], s: int, e: int) -> None:
    """A record [s, e) that starts under the open records ``st`` (of
    :func:`_nest_stream`), as the Python frames count their children: each open
    record it outlasts has it as a child only while it runs (beyond its own open
    child), and the innermost one that holds it the rest.  A ``record_function``
    range opened in one frame's ``__enter__`` and closed in another's
    ``__exit__`` outlasts the first: the rest of it is the caller's child, not
    the caller's own Python."""
    j = len(st) - 1
    reach = s
    while j >= 0 and st[j][1] < e:
        end = st[j][1]
        if end > reach:
            st[j][3] += end - reach
            reach = end
        j -= 1
    if j >= 0:
        st[j][3] += e - reach


def _close(rec: Any, child: int, row: list[int] | None) -> None:
    """A record of :func:`_nest_stream` that ends: its children's time, at most
    its own, is taken from its row's self time."""
    if child and row is not None:
        dur = rec[1] - rec[0]
        row[2] += child if child < dur else dur
