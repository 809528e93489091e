"""Rules over device memory: growth, nearly full, allocator retries and OOMs,
fragmentation, allocations inside the loop, and the allocation sites a memory
snapshot found growing."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from gputui import fmt
from gputui.analysis import thresholds
from gputui.analysis.evidence import JobEvidence
from gputui.analysis.finding import Finding
from gputui.analysis.registry import finding, rule
from gputui.analysis.severity import CRIT, INFO, WARN

if TYPE_CHECKING:
    from gputui.protocol.memsnap import AllocSite

#: peak memory over this share of the device (TensorBoard's advice threshold)
NEAR_FULL = thresholds.value("memory.near_full")
#: a growing baseline that reaches the device's end within this many seconds is critical
OOM_SOON_S = thresholds.value("memory.oom_soon_s")
#: reserved beyond allocated by this factor and this many bytes: fragmentation
FRAGMENT_FACTOR = thresholds.value("memory.fragment_factor")
FRAGMENT_BYTES = thresholds.value("memory.fragment_bytes")
#: cudaMalloc/cudaFree per step from which the caching allocator is not caching
MALLOC_PER_STEP = thresholds.value("memory.malloc_per_step")


def _total(ev: JobEvidence) -> int | None:
    if ev.device_total_bytes:
        return ev.device_total_bytes
    return ev.gpu.mem_total_bytes if ev.gpu is not None else None


@rule(
    "memory.growth",
    "memory",
    "bottleneck tables: memory grows over time (a leak); SageMaker Debugger: memory creep",
    ("steps", "memory"),
    trigger=(
        "the allocated baseline (the minimum between steps) keeps growing; crit when it "
        "reaches the device's end within {memory.oom_soon_s}"
    ),
)
def growth(ev: JobEvidence) -> Iterable[Finding]:
    g = ev.growth
    if g is None or not g.growing or ev.memory is None:
        return []
    evidence = (
        f"allocated memory's baseline grew {fmt.size(g.total_bytes)} over {g.steps:,} steps "
        f"({fmt.size(g.per_step_bytes)} per step)"
        + (
            " (the hook does not number its samples: judged over their times at the job's "
            "step rate)"
            if g.by_time
            else ""
        )
    )
    severity = WARN
    seconds: float | None = None
    total = _total(ev)
    steps_per_s = ev.stats.steps_per_s
    rate = g.recent_per_step_bytes or g.per_step_bytes
    if total and steps_per_s and rate > 0:
        left = max(0, total - ev.memory.reserved)
        seconds = left / (rate * steps_per_s)
        evidence += f"; at this rate the device is full in about {fmt.duration(seconds)}"
        if seconds < OOM_SOON_S:
            severity = CRIT
    return [
        finding(
            ev,
            "memory.growth",
            "device memory keeps growing",
            evidence,
            "something keeps tensors alive across steps: a list of losses or outputs stored "
            "without .item()/.detach(), a cache keyed by step, hooks that keep activations; "
            "a memory snapshot (gputui attach PID --memory-snapshot N) names the allocation site",
            "the growth per step on the attach screen falls to about zero",
            severity=severity,
            failure_in_s=seconds,
        )
    ]


@rule(
    "memory.near_full",
    "memory",
    "TensorBoard profiler: peak memory over 90% of the device; memory usage near 100%: "
    "reduce the batch",
    ("memory",),
    trigger="peak reserved >= {memory.near_full} of the device",
)
def near_full(ev: JobEvidence) -> Iterable[Finding]:
    m, total = ev.memory, _total(ev)
    if m is None or not total:
        return []
    peak = max(m.peak_reserved, m.reserved)
    if peak < NEAR_FULL * total:
        return []
    return [
        finding(
            ev,
            "memory.near_full",
            "device memory is nearly full",
            f"peak reserved {fmt.size(peak)} of {fmt.size(total)} ({peak / total * 100:.0f}%)",
            "leave headroom against an out-of-memory error: a smaller micro-batch with gradient "
            "accumulation, activation checkpointing, bf16 activations, or "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation",
            "peak reserved stays under 90% of the device",
            severity=WARN,
        )
    ]


@rule(
    "memory.alloc_retries",
    "memory",
    "gputui: the caching allocator's retry and OOM counters (no tool reports them live)",
    ("memory",),
    trigger="the caching allocator's retry counter (warn) or OOM counter (crit) is above 0",
)
def alloc_retries(ev: JobEvidence) -> Iterable[Finding]:
    m = ev.memory
    if m is None or (not m.alloc_retries and not m.ooms):
        return []
    if m.ooms:
        return [
            finding(
                ev,
                "memory.alloc_retries",
                "the job hit out-of-memory errors",
                f"{m.ooms} out-of-memory error(s) and {m.alloc_retries} allocation retries so far",
                "the job caught an OOM (or a library did): lower the batch or sequence length, "
                "use activation checkpointing; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
                "when reserved memory is much larger than allocated",
                "the OOM counter stays where it is",
                severity=CRIT,
            )
        ]
    return [
        finding(
            ev,
            "memory.alloc_retries",
            "the allocator had to free its cache and retry",
            f"{m.alloc_retries} allocation retries: each frees cached blocks and synchronizes "
            "the device before allocating again",
            "reduce peak memory (smaller micro-batch, checkpointing) or set "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to cut fragmentation",
            "the retry counter stops rising",
            severity=WARN,
        )
    ]


@rule(
    "memory.fragmentation",
    "memory",
    "bottleneck tables: out of memory despite a small model (fragmentation)",
    ("memory",),
    trigger="reserved >= {memory.fragment_factor} allocated and >= {memory.fragment_bytes} "
    "more (info)",
)
def fragmentation(ev: JobEvidence) -> Iterable[Finding]:
    m = ev.memory
    if m is None or not m.allocated:
        return []
    spare = m.reserved - m.allocated
    if m.reserved < FRAGMENT_FACTOR * m.allocated or spare < FRAGMENT_BYTES:
        return []
    return [
        finding(
            ev,
            "memory.fragmentation",
            "reserved memory is much larger than allocated",
            f"reserved {fmt.size(m.reserved)} for {fmt.size(m.allocated)} allocated "
            f"({fmt.size(spare)} cached but unused)",
            "normal after a peak; if the job runs close to the device's end, set "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True so freed blocks can be reused for "
            "other sizes",
            "reserved tracks allocated more closely",
            severity=INFO,
        )
    ]


@rule(
    "memory.malloc_in_loop",
    "memory",
    "Nsight Systems: cudaMalloc calls during training (the caching allocator should serve them)",
    ("capture",),
    trigger="capture: >= {memory.malloc_per_step} cudaMalloc/cudaFree per step (in a trace, "
    "only one with ProfilerStep marks)",
    # the account counts these runtime calls with torch's dispatch (not as syncs)
    bucket="dispatch",
)
def malloc_in_loop(ev: JobEvidence) -> Iterable[Finding]:
    cap = ev.capture
    # a trace without step marks is one step from the program's first iterations
    # on: the caching allocator's first reservations are no allocation in the loop
    if cap is None or not cap.marked_steps:
        return []
    us, calls = cap.ops_us(("cudaMalloc", "cudaFree", "cudaMallocAsync", "cudaFreeAsync"))
    if calls / cap.steps < MALLOC_PER_STEP:
        return []
    share = cap.span_share(us)
    return [
        finding(
            ev,
            "memory.malloc_in_loop",
            "device memory is allocated inside the "
            + ("inference loop" if ev.context.inference else "training loop"),
            f"{calls} cudaMalloc/cudaFree calls over {cap.steps} captured steps "
            f"({fmt.us(us)} of CPU time)",
            "usually the allocator freeing and re-reserving under memory pressure: lower the peak "
            "(smaller micro-batch) or set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; "
            "avoid empty_cache() in the loop",
            "a new capture shows no cudaMalloc/cudaFree between steps",
            share=share,
        )
    ]


def site_label(site: AllocSite | None) -> str:
    """``file.py:42 (function)`` of an allocation site, the file by its name only
    (the full path is in the snapshot view); untrusted text, cleaned where shown."""
    if site is None:
        return "allocations with no Python frame (autograd's backward or C++ code)"
    name = site.file.replace("\\", "/").rsplit("/", 1)[-1] or site.file
    return f"{name}:{site.line}" + (f" ({site.function})" if site.function else "")


@rule(
    "memory.leak_site",
    "memory",
    "bottleneck tables: memory grows over time (a leak); PyTorch's memory snapshots "
    "(_record_memory_history, memory_viz) show which allocations stay alive",
    ("snapshot",),
)
def leak_site(ev: JobEvidence) -> Iterable[Finding]:
    snap = ev.memory_snapshot
    if snap is None or not snap.growing:
        return []
    top = snap.growing[0]
    window = ""
    if snap.first_step is not None and snap.last_step is not None:
        window = f" of steps {snap.first_step}..{snap.last_step}"
    kept = top.live_count[-1] if top.live_count else None
    evidence = (
        f"a memory snapshot{window}: allocations from {site_label(top.site)} stayed alive and "
        f"grew at the step boundaries, +{fmt.size(top.per_step_bytes)} per step"
        + (f" ({kept} kept at the end)" if kept else "")
    )
    others = snap.growing[1:]
    if others:
        evidence += "; also growing: " + ", ".join(site_label(g.site) for g in others[:2])
        if len(others) > 2:
            evidence += f" and {len(others) - 2} more"
    severity = WARN
    rate = sum(g.per_step_bytes for g in snap.growing)
    total = _total(ev)
    steps_per_s = ev.stats.steps_per_s
    reserved = ev.memory.reserved if ev.memory is not None else None
    if reserved is None and snap.fragmentation is not None:
        reserved = snap.fragmentation.reserved_bytes
    if total and steps_per_s and rate > 0 and reserved is not None:
        seconds = max(0, total - reserved) / (rate * steps_per_s)
        evidence += f"; at this rate the device is full in about {fmt.duration(seconds)}"
        if seconds < OOM_SOON_S:
            severity = CRIT
    where = "" if top.site is None else f" (at {site_label(top.site)})"
    return [
        finding(
            ev,
            "memory.leak_site",
            "allocations from one site survive every step and keep growing",
            evidence,
            "stop keeping references to tensors across steps, e.g. loss.item() / .detach()"
            f"{where}: store Python numbers (or detached CPU copies) in lists, logs and "
            "caches instead of the step's tensors, which keep their memory and their graph",
            "a new memory snapshot (m on the attach screen, or gputui attach PID "
            "--memory-snapshot N) lists no growing allocation",
            severity=severity,
        )
    ]
