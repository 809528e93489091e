"""Rules over a profiler capture (or a trace): where the GPU idles and why,
host synchronisation, copies, precision, memory-bound and tiny kernels,
communication.

A capture is profiled, which slows the CPU side (more so on launch-bound
steps); where the job's GPU was also sampled unprofiled, the idle time a rule
claims is bounded by what NVML saw (1 - utilization).  Where only the profiled
capture (or a trace) saw it, the step account takes the profiler's own cost out
of kernel launch and torch dispatch (:data:`PROFILER_SLOWDOWN`) before the idle
time is compared with the GPU's busy time: a healthy bf16 transformer traced
with shapes and FLOPs idles 41% in its trace (HTA agrees: 40.8%, 93% of it
host wait) while its unprofiled GPU is busy all the time.  Idle time is claimed by
one cause only, in this order: data loading (its own rule), synchronisation,
launch overhead, other CPU-side work.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from gputui import fmt
from gputui.analysis import thresholds
from gputui.analysis.evidence import (
    CPU_OP_US,
    MIN_GPU_SAMPLES,
    PROFILER_SLOWDOWN,
    SYNC_CALLS,
    TRUTH_OPS,
    CaptureView,
    JobEvidence,
    cast_load,
    many_casts,
)
from gputui.analysis.finding import Finding
from gputui.analysis.frameworks import (
    COMPILE,
    DYNAMIC_CACHE,
    INDEX_COPY_OP,
    ISIN_OP,
    fused_optimizer,
    generate_cache,
    larger_batch,
    spell,
    traced_generate_cache,
)
from gputui.analysis.ledger import GPU_COMM, GPU_COPY, GPU_IDLE, ISSUE, ISSUE_MODEL
from gputui.analysis.optimizer import FUSED, MULTI, optimizer_impl
from gputui.analysis.registry import finding, rule
from gputui.analysis.rules.account import LAUNCH_SHARE, cpu_side_largest
from gputui.analysis.severity import INFO, WARN
from gputui.protocol.messages import DATA, OPTIMIZER
from gputui.trace import kernels
from gputui.trace.markers import COMPILED_RANGES
from gputui.trace.op_rows import GPU_MEMCPY, off_device

if TYPE_CHECKING:
    from gputui.trace.scan import CollectiveCalls

#: the thresholds (gputui.analysis.thresholds).  Synchronizing calls per step from
#: which syncs explain the idle time; the GPU's idle share worth a finding, and the
#: higher one when only the profiled capture measured it
#: (profiling alone left a healthy bf16 transformer's H100 about 27% idle in its
#: capture while NVML saw it 100% busy); launches averaging under SHORT_KERNEL_US
#: are launch-bound (seed: kernels under 10 us), as are steps where TINY_SHARE of
#: them are tiny
SYNC_PER_STEP = thresholds.value("sync.per_step")
IDLE_SHARE = thresholds.value("idle.share")
IDLE_SHARE_PROFILED = thresholds.value("idle.share_profiled")
SHORT_KERNEL_US = thresholds.value("launch.short_kernel_us")
TINY_SHARE = thresholds.value("launch.tiny_share")
#: copies: pageable ones' and all host-device copies' share of the span, casts per
#: step and their share of CPU op time, aten::copy_'s share that "dominates"
PAGEABLE_SHARE = thresholds.value("copy.pageable_share")
MEMCPY_SHARE = thresholds.value("copy.memcpy_share")
COPY_CPU_SHARE = thresholds.value("copy.copy_cpu_share")
SYNC_MEMCPY_PER_STEP = thresholds.value("copy.sync_memcpy_per_step")
#: communication's share of the step (TensorBoard profiler: 10%), overlap under
#: which it is poor, and the share from which overlap matters
COMM_SHARE = thresholds.value("comm.share")
OVERLAP = thresholds.value("comm.overlap")
POOR_OVERLAP_SHARE = thresholds.value("comm.poor_overlap_share")
#: zero-filling calls per step that look like zero_grad() writing zeros
ZERO_PER_STEP = thresholds.value("steps.zero_per_step")


def capture_of(ev: JobEvidence) -> CaptureView | None:
    cap = ev.capture
    if cap is None or (not cap.kernel_calls and not cap.cpu_ops):
        return None
    return cap


def attributable_idle(ev: JobEvidence, cap: CaptureView) -> float | None:
    """The share of the step the GPU idles, net of data loading, bounded by what
    NVML saw unprofiled, else by the step account with the profiler's own CPU
    cost taken out (:func:`unprofiled_idle`); None when the capture has no GPU
    timeline."""
    idle = cap.idle_share
    if idle is None:
        return None
    if _unprofiled(ev):
        idle = min(idle, 1.0 - ev.gpu.util_pct / 100.0)  # type: ignore[union-attr,operator]
    else:
        estimate = unprofiled_idle(cap)
        if estimate is not None:
            idle = min(idle, estimate)
    busy = ev.ledger.gpu_busy
    if busy is not None:
        # the capture's idle share is HTA's, over HTA's window: in a trace
        # without steps, from its first GPU activity on, set-up before the
        # analyzer's window included; the window's own account bounds it (the
        # GPU idles no more at the job's own speed than under the profiler)
        idle = min(idle, max(0.0, 1.0 - busy))
    return max(0.0, idle - ev.phase_share(DATA))


def unprofiled_idle(cap: CaptureView) -> float | None:
    """The capture's GPU idle share at the job's own speed (CaptureView.unprofiled_idle)."""
    return cap.unprofiled_idle()


def _unprofiled(ev: JobEvidence) -> bool:
    gpu = ev.gpu
    return gpu is not None and gpu.util_pct is not None and gpu.samples >= MIN_GPU_SAMPLES


def idle_floor(ev: JobEvidence, cap: CaptureView) -> float:
    """The idle share worth a finding: higher when only a profiled capture without
    a step account saw it (nothing then takes the profiler's cost out)."""
    if _unprofiled(ev) or unprofiled_idle(cap) is not None:
        return IDLE_SHARE
    return IDLE_SHARE_PROFILED


def syncs_per_step(cap: CaptureView) -> tuple[float, int]:
    """(CUDA runtime synchronizations per step, their total count).  Read-back ops
    (aten::item) are not counted: on a CPU tensor (the optimizer's step count)
    they wait for nothing; on a GPU tensor they end in cudaStreamSynchronize."""
    _us, calls = cap.ops_us(SYNC_CALLS)
    return calls / cap.steps, calls


def launch_bound(cap: CaptureView) -> bool:
    mean = cap.mean_kernel_us
    tiny = cap.tiny_kernel_share()
    return (mean is not None and mean < SHORT_KERNEL_US) or (
        tiny is not None and tiny >= TINY_SHARE
    )


def _gap_evidence(ev: JobEvidence, cap: CaptureView, idle: float) -> str:
    """The GPU's idle share at the job's own speed, and beside it, where it
    differs, the GPU's busy share as the ledger measured it in the profiled
    steps (the same figure as the account's)."""
    text = f"the GPU idles {idle * 100:.0f}% of the step"
    if ev.phase_share(DATA) >= 0.005:
        text += " outside the data wait"
    busy = ev.ledger.gpu_busy
    measured = cap.idle_share if busy is None else 1.0 - busy
    if measured is not None and abs(measured - idle) > 0.02:
        slowed = not _unprofiled(ev) and unprofiled_idle(cap) is not None
        if slowed:  # the two figures are of two speeds: say which is which
            text += " at the job's own speed"
        if busy is None:
            text += f" ({measured * 100:.0f}% in the capture, profiled"
        else:
            text += f" (busy {busy * 100:.0f}% of the profiled steps"
        if slowed:
            text += (
                f", where launch and dispatch count {PROFILER_SLOWDOWN:g}x slower "
                "under the profiler"
            )
        text += ")"
    return text


@rule(
    "sync.host_sync",
    "sync",
    "bottleneck tables: training slower after adding logging (.item() syncs), CPU-GPU "
    "synchronization; Nsight Systems: host synchronization APIs",
    ("capture",),
    trigger=(
        "capture: >= {sync.per_step} CUDA synchronizations (cudaStreamSynchronize, "
        "cudaDeviceSynchronize, ...) per step; cost: the GPU's idle share net of data "
        "loading and a trace's ops' warm-up calls (bounded by unprofiled NVML utilization); "
        "where the GPU's activity was "
        "not recorded, the CPU's wait in them"
    ),
    bucket="sync",
)
def host_sync(ev: JobEvidence) -> Iterable[Finding]:
    cap = capture_of(ev)
    if cap is None:
        return []
    per_step, _calls = syncs_per_step(cap)
    if per_step < SYNC_PER_STEP:
        return []
    idle = attributable_idle(ev, cap)
    if idle is not None:  # nor a wait on GPU work the trace did not record, nor warm-up
        idle = max(0.0, idle - ev.blind_wait_share - ev.warmup_share)
    waits = sync_waits(cap)
    sources = sync_sources(cap, waits)
    # the ledger's count where it has one (every synchronizing call in the
    # window's steps, blocking copies too), as the account shows it
    counted = ev.ledger.syncs_per_step
    shown = per_step if counted is None else counted
    evidence = f"{fmt.per_step(shown)} synchronizations per step"
    # the read-backs of a tensor's truth (`if tensor:`, a while loop's condition)
    truths = cap.op_count(TRUTH_OPS) / cap.steps
    if sources:
        listed = ", ".join(
            _sync_label(key, n, ev.warmup_ops, truths)
            + ("" if waits is None else f" ({fmt.us(waits.get(key, 0.0))} a step)")
            for key, n in sources[:4]
        )
        evidence += f", from {listed}"
        copies = sum(n for key, n in sources if key in ("copy_h2d", "copy_d2h"))
        if any(key in ("copy_h2d", "copy_d2h") for key, _ in sources[:4]):
            evidence += "; a copy from or to pageable memory blocks the CPU"
            if copy_stream_syncs(cap, copies) >= 0.5 * copies:
                evidence += ", then synchronizes its stream: two calls each"
    cost = idle
    acct = cap.account
    if idle is not None:
        evidence += "; " + _gap_evidence(ev, cap, idle)
        if ev.warmup_share >= 0.01:
            evidence += f"; the ops' warm-up calls ({ev.warmup_share * 100:.0f}%) left out"
    elif acct is not None and acct.step_us > 0:
        # the GPU's idle time unknown (its activity not recorded): the CPU's own
        # wait in them is what they cost it
        cost = acct.share("sync")
        evidence += (
            f"; the CPU waits {cost * 100:.0f}% of the step in them (the GPU's idle time "
            "is not recorded)"
        )
    return [
        finding(
            ev,
            "sync.host_sync",
            "the CPU waits for the GPU inside the step",
            evidence,
            _sync_fix(ev, sources, waits, truths),
            _SYNC_CONFIRM,
            share=cost,
            severity=None if cost is not None else WARN,
        )
    ]


_SYNC_CONFIRM = (
    "a new capture shows fewer synchronizing calls (cudaStreamSynchronize, blocking copies) "
    "and a smaller idle share"
)
#: what makes the CPU wait for the GPU, as the capture's tables tell it: how it
#: reads in the evidence (one, several), and its fix
_SYNC_SOURCE = {
    "copy_h2d": (
        "copy to the GPU from pageable memory",
        "copies to the GPU from pageable memory",
        "",  # _pin_fix
    ),
    "copy_d2h": (
        "copy to pageable host memory",
        "copies to pageable host memory",
        "each .cpu(), .numpy() or .tolist() of a GPU tensor waits for the GPU: read values "
        "back every N steps, or copy into a pinned buffer with non_blocking=True and wait on "
        "a CUDA event only where the value is used",
    ),
    "copy_wait": (
        "copy that waits for the GPU (aten::copy_)",
        "copies that wait for the GPU (aten::copy_)",
        "a copy with non_blocking=False waits until the GPU has run everything queued "
        "before it: copy from and to pinned memory with non_blocking=True, and move data "
        "to the host only where it is used",
    ),
    "shape": (
        "op whose output size depends on the data",
        "ops whose output size depends on the data",
        "nonzero, masked_select, boolean-mask indexing and unique wait for the GPU to learn "
        "their output's size: use fixed-shape forms (torch.where, multiplying by the mask)",
    ),
    "readback": (
        "read-back of a GPU value (.item())",
        "read-backs of a GPU value (.item())",
        "each .item(), float(tensor), print(tensor) or `if tensor:` stops the CPU until the "
        "GPU catches up, and the GPU then waits for new launches: keep values on the GPU, "
        "log them every N steps, accumulate metrics as tensors",
    ),
    "device": (
        "cudaDeviceSynchronize",
        "cudaDeviceSynchronize",
        "torch.cuda.synchronize() in the loop (often timing or logging code) waits for all "
        "queued work: drop it, or time with torch.cuda.Event(enable_timing=True) read every "
        "N steps",
    ),
    "event": (
        "event wait",
        "event waits",
        "event.synchronize() waits on the CPU: wait only where the value is used, and let "
        "streams wait on events (stream.wait_event) instead of the CPU",
    ),
    "compiled": (
        "synchronization inside torch.compile's code",
        "synchronizations inside torch.compile's code",
        "a synchronization inside torch.compile's code is a graph break's eager code "
        "(.item(), .tolist(), print(tensor), a data-dependent shape: TORCH_LOGS=graph_breaks "
        "names it; keep the value on the GPU, or torch._dynamo.config."
        "capture_scalar_outputs=True for .item()), or, in the first calls, Inductor's own "
        "while it warms up and records CUDA graphs (mode='reduce-overhead'): profile steps "
        "after those",
    ),
    "outside": (
        "synchronization outside any torch op",
        "synchronizations outside any torch op",
        "a synchronization outside torch's ops is the job's own (torch.cuda.synchronize(), "
        "event.synchronize(), often timing or logging code) and waits for all queued work: "
        "drop it, or time with torch.cuda.Event(enable_timing=True) read every N steps",
    ),
    "other": (
        "other stream synchronization",
        "other stream synchronizations",
        "a call that needs a GPU value on the CPU (.item(), .cpu(), .tolist(), print(tensor), "
        "a data-dependent shape) or torch.cuda.synchronize() stops the CPU until the GPU "
        "catches up: keep values on the GPU and read them every N steps",
    ),
}
_STREAM_SYNCS = ("cudaStreamSynchronize", "cuStreamSynchronize")
_DEVICE_SYNCS = ("cudaDeviceSynchronize", "cuCtxSynchronize")
_EVENT_SYNCS = ("cudaEventSynchronize", "cuEventSynchronize")
_SHAPE_OPS = (
    "aten::nonzero",
    "aten::masked_select",
    "aten::_unique2",
    "aten::unique_dim",
    "aten::unique_consecutive",
)
_READBACKS = ("aten::_local_scalar_dense", "aten::item", *TRUTH_OPS)
_COPY_OPS = ("aten::copy_", "aten::_to_copy", "aten::to")
#: a source named by its op (an op of none of the kinds above)
_OP = "op:"


def sync_sources(
    cap: CaptureView, waits: Mapping[str, float] | None = None
) -> list[tuple[str, float]]:
    """What the capture's synchronizations came from (keys of :data:`_SYNC_SOURCE`,
    or ``op:NAME``) and how many of each per step: the longest wait first where
    ``waits`` (:func:`sync_waits`) tells it, else the most first.

    The blocking copies are the step account's (a copy from or to pageable
    memory waits, and then synchronizes its stream); an older hook's account
    has none, and the capture's copy rows count them.  The other
    synchronizations are told by the op they ran in where the account has it
    (a trace whose calls carry their op's id); else from the capture's tables:
    the stream synchronizations left after the copies' are given to the ops that
    end in one (data-dependent shapes, then read-backs, as many as they were
    called: on a CPU tensor they wait for nothing), and the rest are other."""
    steps = cap.steps
    acct = cap.account
    if acct is not None and acct.blocking_h2d_per_step is not None:
        h2d, d2h = acct.blocking_h2d_per_step, acct.blocking_d2h_per_step or 0.0
    else:
        h2d = cap.pageable_copies("HtoD")[1] / steps
        d2h = cap.pageable_copies("DtoH")[1] / steps
    counts = {"copy_h2d": h2d, "copy_d2h": d2h}
    by_op = None if acct is None else acct.sync_ops_per_step
    if by_op is not None:
        counts.update(_by_op(by_op, h2d + d2h))
    else:
        counts.update(_from_tables(cap, h2d + d2h))
    order = list(_SYNC_SOURCE)
    return sorted(
        ((k, n) for k, n in counts.items() if n >= 0.05),
        key=lambda kn: (
            -(waits.get(kn[0], 0.0) if waits is not None else 0.0),
            -kn[1],
            order.index(kn[0]) if kn[0] in order else len(order),
        ),
    )


def sync_waits(cap: CaptureView) -> dict[str, float] | None:
    """The CPU's time per step (us) in each source's synchronizing calls (the
    keys of :func:`sync_sources`), from an account that times them; None from
    one that only counts them (an older hook's).  A stream synchronization
    inside a copy op that follows a blocking copy is the copy's: such ops'
    time goes to the copies, in proportion to the calls."""
    acct = cap.account
    if acct is None or acct.sync_ops_us_per_step is None:
        return None
    h2d = acct.blocking_h2d_us_per_step or 0.0
    d2h = acct.blocking_d2h_us_per_step or 0.0
    waits = {"copy_h2d": h2d, "copy_d2h": d2h}
    by_op = acct.sync_ops_per_step or {}
    copies = (acct.blocking_h2d_per_step or 0.0) + (acct.blocking_d2h_per_step or 0.0)
    in_copy_ops = sum(n for name, n in by_op.items() if name in _COPY_OPS)
    for name, us in acct.sync_ops_us_per_step.items():
        key = _source_key(name)
        if key == "copy_wait" and in_copy_ops > 0:
            theirs = us * min(1.0, copies / in_copy_ops)  # the blocking copies' syncs
            us -= theirs
            if copies > 0:
                waits["copy_h2d"] += theirs * (acct.blocking_h2d_per_step or 0.0) / copies
                waits["copy_d2h"] += theirs * (acct.blocking_d2h_per_step or 0.0) / copies
        waits[key] = waits.get(key, 0.0) + us
    return waits


def _source_key(name: str) -> str:
    """The source (:data:`_SYNC_SOURCE`'s key, or ``op:NAME``) of a
    synchronization in the op ``name`` ("" outside any op)."""
    if name in _COPY_OPS:
        return "copy_wait"
    if name in _READBACKS:
        return "readback"
    if name in _SHAPE_OPS:
        return "shape"
    if not name:
        return "outside"
    if name.startswith(COMPILED_RANGES):
        return "compiled"
    return _OP + name


def copy_stream_syncs(cap: CaptureView, copies: float) -> float:
    """Of the synchronizing calls per step, the stream synchronizations that end
    a blocking copy (torch's copy from or to pageable memory calls the copy, then
    synchronizes the stream, inside one ``aten::copy_``): at most one a copy."""
    acct = cap.account
    by_op = None if acct is None else acct.sync_ops_per_step
    if by_op is not None:
        in_copies = sum(n for name, n in by_op.items() if name in _COPY_OPS)
    else:
        in_copies = cap.ops_us(_STREAM_SYNCS)[1] / cap.steps
    return min(in_copies, copies)


def _by_op(by_op: Mapping[str, float], copies: float) -> dict[str, float]:
    """The synchronizations per step that are no blocking copy, by the op they
    ran in (the account's): a copy's beyond the blocking copies' own."""
    counts: dict[str, float] = {}
    for name, n in by_op.items():
        key = _source_key(name)
        counts[key] = counts.get(key, 0.0) + n
    if "copy_wait" in counts:
        counts["copy_wait"] = max(0.0, counts["copy_wait"] - copies)
    return counts


def _from_tables(cap: CaptureView, copies: float) -> dict[str, float]:
    """The synchronizations per step that are no blocking copy, from the op
    table alone (:func:`sync_sources`)."""
    steps = cap.steps

    def per_step(names: tuple[str, ...]) -> float:
        return cap.ops_us(names)[1] / steps

    left = max(0.0, per_step(_STREAM_SYNCS) - copies)
    shape = min(left, per_step(_SHAPE_OPS))
    left -= shape
    scalar = per_step(("aten::_local_scalar_dense",)) or per_step(("aten::item",))
    readback = min(left, scalar + per_step(TRUTH_OPS))
    return {
        "shape": shape,
        "readback": readback,
        "device": per_step(_DEVICE_SYNCS),
        "event": per_step(_EVENT_SYNCS),
        "other": left - readback,
    }


#: the fix of synchronizations inside an op that had warm-up calls in the trace
_WARMUP_SYNC_FIX = (
    "the synchronizations inside an op's warm-up calls are its first-use work "
    "(cuDNN's benchmark mode times each candidate algorithm on the GPU and waits for "
    "it): one-off, gone once each shape has been seen; profile steps after a warm-up, "
    "and keep input shapes steady (with torch.backends.cudnn.benchmark on, each new "
    "shape searches again)"
)


def _sync_label(
    key: str, n: float, warmup_ops: frozenset[str] = frozenset(), truths: float = 0.0
) -> str:
    """How ``n`` synchronizations per step of a source read in the evidence
    (``warmup_ops``: the ops that had warm-up calls in the trace; ``truths``:
    the calls per step that read a tensor as a Python bool)."""
    count = fmt.per_step(n)
    if key.startswith(_OP):
        name = key[len(_OP) :]
        warm = ", whose first calls were warm-up" if name in warmup_ops else ""
        return f"{count} in {fmt.clean(name, 80)}{warm}"
    one, several, _fix = _SYNC_SOURCE[key]
    if key == "readback" and _truth_reads(n, truths):
        # torch reads a tensor's truth with .item() inside aten::is_nonzero
        return (
            f"{count} {'read-back' if count == '1' else 'read-backs'} of a GPU value, "
            f"{fmt.per_step(min(n, truths))} of them `if`/`while` on a tensor ({TRUTH_OPS[0]})"
        )
    return f"{count} {one if count == '1' else several}"


def _truth_reads(readbacks: float, truths: float) -> bool:
    """Whether most of the read-backs are a tensor read as a Python bool: as
    many calls that do so as half the read-backs, or more (on a CPU tensor
    they read nothing back: more of them than read-backs says nothing)."""
    return readbacks > 0 and 0.5 * readbacks <= truths <= 2 * readbacks


#: the fix of read-backs that are mostly a tensor read as a Python bool
_TRUTH_FIX = (
    "a Python `if` or `while` on a GPU tensor (a loop that runs while a tensor "
    "condition holds, a check on a result) reads it back each time and stops the CPU "
    "until the GPU catches up: keep such conditions Python numbers (a loop's count of "
    "iterations, a time step as a float), or test them every N steps, and make "
    "per-element choices with torch.where"
)


def _sync_fix(
    ev: JobEvidence,
    sources: list[tuple[str, float]],
    waits: Mapping[str, float] | None = None,
    truths: float = 0.0,
) -> str:
    """The fixes of the sources that make a fifth or more of the CPU's wait in
    synchronizations where ``waits`` tells it, else of their count (the largest
    first; the general one where nothing is told apart; ``truths``: the calls
    per step that read a tensor as a Python bool)."""
    weight = {key: n for key, n in sources}
    if waits is not None and sum(waits.get(key, 0.0) for key, _ in sources) > 0:
        weight = {key: waits.get(key, 0.0) for key, _ in sources}
    total = sum(weight.values())
    fixes: list[str] = []
    for key, _n in sources:
        if 5 * weight[key] < total:
            continue
        if key == "copy_h2d":
            fix = _pin_fix(ev)
        elif key.startswith(_OP) and key[len(_OP) :] in ev.warmup_ops:
            fix = _WARMUP_SYNC_FIX
        elif key == "readback" and _truth_reads(_n, truths):
            fix = _TRUTH_FIX
        else:
            fix = _SYNC_SOURCE.get(key, _SYNC_SOURCE["other"])[2]
        if fix not in fixes:
            fixes.append(fix)
    return "; ".join(fixes or [_SYNC_SOURCE["other"][2]])


def _pin_fix(ev: JobEvidence) -> str:
    """How to make copies from pageable host memory asynchronous, in the words of
    the job's DataLoader where the hook saw one."""
    if ev.loader is not None and not ev.loader.pin_memory:
        return (
            "the DataLoader runs with pin_memory=False: set DataLoader(pin_memory=True) and "
            "copy with .to('cuda', non_blocking=True); pin other reused host buffers once "
            "with tensor.pin_memory()"
        )
    return (
        "pin the host side: DataLoader(pin_memory=True), or tensor.pin_memory() once for "
        "reused buffers, then .to('cuda', non_blocking=True); better, keep the data on the GPU"
    )


@rule(
    "launch.overhead",
    "launch",
    "bottleneck tables: many tiny GPU kernels (under 10 us), launch overhead; timeline "
    "pattern: many short GPU kernels with gaps",
    ("capture",),
    trigger=(
        "capture: the GPU idles >= {idle.share} of the step (>= {idle.share_profiled} when "
        "only a profiled capture without a step account saw it; with one, launch + dispatch "
        "count {idle.profiler_slowdown} slower than the job's own), and, with a step "
        "account, kernel launch (less a trace's cold launch calls: 100ms or more, or a "
        "kernel's first launch of 1ms or more on an idle GPU) + torch dispatch (less the "
        "ops that average {launch.cpu_op_us} or more a call: CPU work, and a trace's "
        "set-up calls of 100ms or more on an idle GPU: cudaMalloc, cudaFree, stream "
        "creation), plus a trace's model Python (the time inside the model's module calls of "
        "its Python stack that no other bucket claims, less numpy's and PIL's frames there), "
        ">= {launch.issue_share} of the step and the largest CPU-side share (a "
        "trace's one-off time, compiling, cold launches, set-up calls and ops' warm-up "
        "calls, out of the idle "
        "share); "
        "without one, kernels average < {launch.short_kernel_us} or "
        "{launch.tiny_share} of them are < {launch.tiny_kernel_us}; cost: the idle share, at "
        "most launch + dispatch; not on a trace that records CUDA graph captures where most "
        "launch calls ran no kernel"
    ),
    bucket=ISSUE,
)
def launch_overhead(ev: JobEvidence) -> Iterable[Finding]:
    cap = capture_of(ev)
    if cap is None or ev.records_graphs:  # (launches into a graph: the trace warns)
        return []
    tiny_kernels = launch_bound(cap)
    acct = cap.account
    model = 0.0
    if acct is not None and acct.step_us > 0:
        # Launch-bound means issuing ops holds the step: launch calls and torch
        # dispatch, not Python outside torch, a sync or the data loader.
        # a trace's cold launches (first-use loading) are no launch cost of the loop
        launch = max(0.0, acct.share("launch") - ev.cold_launch_share)
        # nor is the time torch's ops spent computing on the CPU (their own rules
        # speak of it: cpu.tensor_creation)
        # nor a trace's long set-up calls (the allocator's first reservations, a
        # library's streams and handles), which the account counts as dispatch
        cpu_work = min(
            acct.share("dispatch"),
            cap.cpu_work_us(CPU_OP_US) / cap.steps / acct.step_us + ev.setup_share,
        )
        # and the model's own Python around its ops, where a trace's Python stack
        # tells it (its module calls): what compiling or graphing it takes away
        model = acct.model_python_share
        issuing = launch + acct.share("dispatch") - cpu_work + model
        if issuing < LAUNCH_SHARE or cpu_side_largest(acct, cpu_work) != "launch":
            return []
    elif not tiny_kernels:
        return []
    idle = attributable_idle(ev, cap)
    if idle is not None:  # nor is the GPU's idle time while they ran
        idle = max(0.0, idle - ev.one_off_share)
    if idle is None or idle < idle_floor(ev, cap):
        return []
    ceiling = None
    if acct is not None and acct.step_us > 0:
        share = min(idle, issuing)
    else:
        # a capture without a step account (an older hook's): issuing ops costs at
        # most the time the capture's CPU ops and launch calls took per step
        share = idle
        step_us = (ev.mean_step_s or 0.0) * 1e6
        if step_us > 0 and cap.cpu_ops:
            ceiling = cap.cpu_op_us / cap.steps / step_us
            if ceiling < share:
                share = ceiling
            else:
                ceiling = None  # it holds nothing back: not worth a word
    tiny = cap.tiny_kernel_share()
    issued = None if acct is None or acct.step_us <= 0 else (issuing, model)
    evidence = _launch_evidence(ev, cap, tiny, issued, idle, ceiling)
    if ev.context.inference:
        evidence += _generate_cache(ev)[1]
    # "tiny" where the kernels under TINY_KERNEL_US are a fair share of them;
    # "short" where their mean is short but few are that short
    title = (
        (
            "the step is launch-bound: many tiny kernels"
            if tiny is not None and tiny >= TINY_SHARE
            else "the step is launch-bound: many short kernels"
        )
        if tiny_kernels
        else "the step is launch-bound: issuing ops holds it"
    )
    return [
        finding(
            ev,
            "launch.overhead",
            title,
            evidence,
            launch_fix(ev),
            "kernels per step fall and the capture's GPU busy share rises",
            share=share,
            bucket=ISSUE_MODEL if model >= 0.01 else None,
        )
    ]


def _launch_evidence(
    ev: JobEvidence,
    cap: CaptureView,
    tiny: float | None,
    issued: tuple[float, float] | None,
    idle: float,
    ceiling: float | None,
) -> str:
    """launch.overhead's evidence: the launches, the share of the step issuing
    ops takes (``issued``: that share and the model's Python in it, where the
    capture has a step account), the GPU's idle time, and an older capture's
    ceiling on the launch cost."""
    issuing, model = issued if issued is not None else (0.0, 0.0)
    mean = cap.mean_kernel_us
    launches = ev.ledger.launches_per_step
    return (
        (
            f"{cap.kernels_per_step:,.0f} kernel launches per step averaging {fmt.us(mean)}"
            if launches is None
            else f"{fmt.per_step(launches)} launch calls per step, GPU work averaging "
            f"{fmt.us(mean)}"
        )
        + (f", {tiny * 100:.0f}% of them under 10us" if tiny is not None else "")
        + "; "
        + (
            ""
            if issued is None
            else (
                f"kernel launch, torch dispatch and the model's Python around its ops "
                f"{issuing * 100:.0f}% of the step (the model's Python in its module calls "
                f"{model * 100:.0f}%, by the trace's Python stack); "
                if model >= 0.01
                else f"kernel launch + torch dispatch {issuing * 100:.0f}% of the step; "
            )
        )
        + _gap_evidence(ev, cap, idle)
        + (
            f"; the capture has no step account (an older gputui's): its CPU ops and "
            f"launch calls take {ceiling * 100:.0f}% of the step, the most launch cost can be"
            if ceiling is not None
            else ""
        )
    )


def launch_fix(ev: JobEvidence) -> str:
    """What cuts the cost of issuing ops, for this job: an eager job compiles; a
    compiled one moves to CUDA graphs, and is told what blocks them; an
    inference loop batches more work per call, and hears nothing of optimizers."""
    ctx = ev.context
    more_work = (
        "batch more requests into each call (a larger batch, or padding to a few fixed shapes)"
        if ctx.inference
        else larger_batch(ctx.framework, ev.micro_batches)
    )
    if ctx.inference and _generate_cache(ev)[0] == DYNAMIC_CACHE:
        # Hugging Face's generate() on its default cache: each new token grows
        # every layer's key and value tensors, so no graph can hold the step
        return (
            "decode with a static KV cache: model.generation_config.cache_implementation = "
            "'static' (or generate(..., cache_implementation='static')): the default dynamic "
            "cache grows every layer's key and value tensors at each new token, so the "
            "decoding step stays eager; with a static one, recent transformers compile the "
            "step into CUDA graphs themselves (do not wrap the model in torch.compile as "
            f"well); and {more_work}"
        )
    if ctx.cuda_graphs:
        impl = None if ctx.inference else optimizer_impl(ev)
        optimizer = (
            # what a graphed forward and backward leave eager, most often
            f"; the optimizer ({impl[0]}) runs outside them: a fused one "
            f"({fused_optimizer(ctx.framework, ctx.optimizer_class)}) launches a few kernels a step"
            if impl is not None and impl[0] != FUSED
            else ""
        )
        return (
            "the step already runs CUDA graphs: what is left is issued outside them; find "
            "the ops between graph launches in the trace, move them into the captured region "
            f"or off the step, and {more_work}{optimizer}"
        )
    if ctx.mostly_compiled:
        blocked = ctx.break_where()
        return (
            "the model is already compiled: launch cost is now the Python and C++ around "
            "the compiled graphs; torch.compile(model, mode='reduce-overhead') runs them as "
            "CUDA graphs, which need the whole step in few graphs with steady shapes"
            + (
                f"; the graph break at {blocked} splits it: remove it (keep the value on the "
                "GPU, or torch._dynamo.config.capture_scalar_outputs=True for .item())"
                if blocked
                else "; TORCH_LOGS=graph_breaks names any break that splits it"
            )
            + "; mark varying dimensions dynamic or pad them, so shapes stay steady; and "
            + more_work
        )
    fix = f"launch fewer, larger kernels: {spell(COMPILE, ctx.framework)} fuses small ops "
    fix += "(mode='reduce-overhead' adds CUDA graphs), "
    impl = optimizer_impl(ev)
    if not ctx.inference and (impl is None or impl[0] != FUSED) and not _optimizer_small(ev, impl):
        fix += f"a fused optimizer ({fused_optimizer(ctx.framework, ctx.optimizer_class)}), "
    fix += more_work + _graph_advice(ev)
    if ctx.compiled is False:
        # the profile shows no compiled region: a model wrapped in torch.compile
        # whose frame dynamo skipped (a graph break inside a loop) runs eagerly
        fix += (
            "; if the model is already wrapped in torch.compile, no compiled region ran "
            "here: a graph break (one inside a loop skips the whole frame) left it eager, "
            "and TORCH_LOGS=graph_breaks names it"
        )
    elif ctx.compiled and ctx.compiled_share is not None:
        # compiled regions ran, but issue little of the step: one function compiled,
        # or dynamo falling back to eager for the rest
        fix += (
            "; torch.compile ran here, but its regions made "
            + (f"{ctx.compiled_share * 100:.0f}%" if ctx.compiled_share >= 0.01 else "under 1%")
            + " of the kernel launches: the rest of the step runs eager. Compile the module that "
            "issues them (the whole model, not one function); if it is wrapped already, "
            "TORCH_LOGS=graph_breaks names where dynamo fell back to eager"
        )
    return fix


def _generate_cache(ev: JobEvidence) -> tuple[str | None, str]:
    """The KV cache of a Hugging Face generate() loop (:data:`DYNAMIC_CACHE`,
    :data:`STATIC_CACHE`, None: none seen), by the Python sampler's or a trace's
    stack, else by a trace's op calls where nothing ran compiled (a compiled
    step hides the cache's ops); and, where the ops told, the words that say
    how."""
    cache = generate_cache(ev.python_profile)
    cap, ctx = ev.capture, ev.context
    if cache is not None or cap is None or ctx.compiled or ctx.cuda_graphs:
        return cache, ""
    cache = traced_generate_cache(cap.op_calls)
    if cache != DYNAMIC_CACHE:
        return cache, ""
    isin = dict(cap.op_calls).get(ISIN_OP, 0)
    return cache, (
        f"; Hugging Face generate() on its dynamic KV cache, by the trace's ops: {isin:,} "
        f"{ISIN_OP} calls (its end-of-sequence checks, at each new token), and no "
        f"{INDEX_COPY_OP} into a preallocated cache"
    )


#: a multi-tensor optimizer's share of the launches (a live job: of the step)
#: below which fusing it is not advised: it issues a few kernels a step already
OPTIMIZER_LAUNCH_SHARE = thresholds.value("launch.optimizer_share")


def _optimizer_small(ev: JobEvidence, impl: tuple[str, str] | None) -> bool:
    """Whether the job's optimizer is multi-tensor (foreach, torch's default)
    and issues too little of the step for a fused one to matter: under
    :data:`OPTIMIZER_LAUNCH_SHARE` of a trace's kernel launch calls, or of a
    live job's step (its optimizer phase)."""
    if impl is None or impl[0] != MULTI:
        return False
    share = ev.optimizer_launch_share
    if share is None and not ev.from_trace and ev.phase_mean(OPTIMIZER) is not None:
        share = ev.phase_share(OPTIMIZER)
    return share is not None and share < OPTIMIZER_LAUNCH_SHARE


def _graph_advice(ev: JobEvidence) -> str:
    """CUDA graphs for an eager step, unless the step synchronizes: a graph
    cannot hold a read-back (.item(), .cpu()), so those go first."""
    cap = capture_of(ev)
    per_step = 0.0 if cap is None else syncs_per_step(cap)[0]
    if per_step < SYNC_PER_STEP:
        return "; capture the step in a CUDA graph when its shapes are static"
    # the count the account and sync.host_sync print (blocking copies too)
    counted = ev.ledger.syncs_per_step
    shown = per_step if counted is None else counted
    return (
        f"; its {fmt.per_step(shown)} synchronizations per step (.item(), .cpu(), "
        "print(tensor)) stop the host each time and keep the step out of a CUDA graph "
        "(and reduce-overhead): keep those values on the GPU first"
    )


#: what the host did while the GPU idled, by account bucket
_WHILE = {
    "data": "waited for data",
    "phase": "ran user phases",
    "comm": "waited in collectives",
    "sync": "waited in synchronizations and refilled the GPU after them",
    "launch": "launched kernels",
    "dispatch": "ran torch ops (dispatch)",
    "python": "ran Python outside torch",
    "model_python": "ran the model's Python in its module calls",
}


@rule(
    "launch.idle_gaps",
    "launch",
    "profiler observations: large gaps between GPU kernels come from CPU-side overhead "
    "(Python, data loading); Nsight Systems: low GPU utilization",
    ("capture",),
    trigger=(
        "capture: the GPU idles (less a trace's one-off time: torch.compile's compiling "
        "ranges, cold launch calls, CUDA graph captures, long set-up calls, ops' warm-up "
        "calls: 10ms or more and 20 times the op's median call, one run before its ordinary "
        "calls, on an idle GPU; at most the window's own idle share, communication kernels "
        "busy) "
        ">= {idle.share} of the step ({idle.share_profiled} when "
        "only a profiled capture without a step account saw it; with one, launch + dispatch "
        "count {idle.profiler_slowdown} slower than the job's own) (under a cause that names "
        "the idle time: data wait, host sync, launch, Python); not on a trace that records "
        "CUDA graph captures where most launch calls ran no kernel"
    ),
    symptom_of=("cpu.python", "launch.overhead", "sync.host_sync", "data.loader_wait"),
    bucket=GPU_IDLE,
    symptom=True,
)
def idle_gaps(ev: JobEvidence) -> Iterable[Finding]:
    cap = capture_of(ev)
    if cap is None or ev.records_graphs:  # (launches into a graph: the trace warns)
        return []
    idle = attributable_idle(ev, cap)
    if idle is not None:  # the GPU waiting for torch.compile's compiling is not the model's
        idle = max(0.0, idle - ev.one_off_share)
    if idle is None or idle < idle_floor(ev, cap):
        return []
    split = ev.ledger.idle_shares
    during = ", ".join(
        f"{_WHILE[b]} {share * 100:.0f}%"
        for b, share in sorted(split.items(), key=lambda kv: -kv[1])
        if share >= 0.01 and b in _WHILE
    )
    return [
        finding(
            ev,
            "launch.idle_gaps",
            "the GPU idles between kernels",
            _gap_evidence(ev, cap, idle)
            + (
                f"; in that idle time the host {during} of the step"
                if during
                else ": the CPU side (Python, host work between ops) does not keep it fed"
            ),
            "find the CPU work between launches in the trace (ui.perfetto.dev): move host-side "
            "preprocessing out of the step, "
            + ("" if ev.context.mostly_compiled else "torch.compile the model, ")
            + "avoid Python loops over tensors",
            "the capture's GPU busy share rises",
            share=idle,
        )
    ]


@rule(
    "copy.pageable",
    "copy",
    "Nsight Systems: asynchronous memcpy from pageable memory (it runs synchronously); "
    "timeline pattern: long cudaMemcpyAsync blocks",
    ("capture",),
    trigger="capture: Memcpy HtoD/DtoH from pageable memory >= {copy.pageable_share} of the "
    "GPU timeline",
    bucket="sync",
)
def pageable(ev: JobEvidence) -> Iterable[Finding]:
    cap = capture_of(ev)
    if cap is None:
        return []
    us, calls = cap.pageable_copies()
    share = cap.span_share(us)
    if share is None or share < PAGEABLE_SHARE:
        return []
    fix = _pin_fix(ev)
    return [
        finding(
            ev,
            "copy.pageable",
            "host-device copies from pageable memory",
            f"{calls} copies from or to pageable host memory take {fmt.us(us)} of GPU time "
            f"({share * 100:.0f}% of the capture); such copies block the CPU and cannot "
            "overlap with compute",
            fix,
            "the capture's copies read 'Pinned -> Device' and overlap with kernels",
            share=share,
        )
    ]


@rule(
    "copy.transfers",
    "copy",
    "bottleneck tables: aten::copy_ dominates (excessive CPU-GPU transfer); Nsight "
    "Systems: long cudaMemcpy",
    ("capture",),
    trigger=(
        "capture: other host-device copies >= {copy.memcpy_share} of the GPU timeline, or "
        "aten::copy_ >= {copy.copy_cpu_share} of CPU op time"
    ),
    bucket=GPU_COPY,
)
def transfers(ev: JobEvidence) -> Iterable[Finding]:
    cap = capture_of(ev)
    if cap is None or not cap.span_us:
        return []
    memcpy_us = cap.class_us(kernels.MEMCPY)
    pageable_us, _ = cap.pageable_copies()
    # copies within the GPU's memory (DtoD) cross no link: no transfer to move
    on_device = sum(
        k.total_us
        for k in cap.kernels
        if k.kernel_class == kernels.MEMCPY and not off_device(GPU_MEMCPY, k.name)
    )
    share = (memcpy_us - pageable_us - on_device) / cap.span_us  # copy.pageable: those
    copy = cap.op("aten::copy_")
    total_cpu = cap.cpu_op_us
    cpu_share = copy.self_us / total_cpu if copy is not None and total_cpu else 0.0
    if share < MEMCPY_SHARE and not (cpu_share >= COPY_CPU_SHARE and share >= 0.02):
        return []
    return [
        finding(
            ev,
            "copy.transfers",
            "much time goes to host-device copies",
            f"copies take {share * 100:.0f}% of the GPU timeline"
            + (
                " (those not from or to pageable memory: copy.pageable has them)"
                if pageable_us
                else ""
            )
            + (f"; aten::copy_ is {cpu_share * 100:.0f}% of CPU op time" if cpu_share else ""),
            "keep tensors on the GPU across steps, move data once per batch, preprocess on the "
            "GPU; use pinned memory and non_blocking=True so copies overlap with compute",
            "the capture's memcpy share falls",
            share=share,
        )
    ]


@rule(
    "copy.frequent_casts",
    "copy",
    "profiler observations: aten::to appears frequently (repeated dtype or device casting)",
    ("capture",),
    trigger="capture: >= {copy.casts_per_step} aten::to/_to_copy calls per step taking >= "
    "{copy.cast_cpu_share} of CPU op time",
    bucket="dispatch",
)
def frequent_casts(ev: JobEvidence) -> Iterable[Finding]:
    cap = capture_of(ev)
    if cap is None:
        return []
    us, calls, total_cpu = cast_load(cap.cpu_ops)
    if not many_casts(us, calls, total_cpu, cap.steps):
        return []
    seen = (
        f"{calls / cap.steps:.0f} conversions per step (aten::to: a dtype or a device), "
        f"{us / total_cpu * 100:.0f}% of CPU op time"
    )
    fix = (
        "cast once: create tensors with the dtype and device they are used with, keep "
        "constants on the GPU, let autocast handle precision instead of manual "
        ".half()/.float()"
    )
    inside = _casts_inside(cap.cast_parents)
    if inside is not None:
        forward, backward, own, names = inside
        seen += (
            f"; {forward * 100:.0f}% of them inside other torch ops ({names}) and "
            f"{backward * 100:.0f}% inside autograd's backward"
            + (f", {own * 100:.0f}% called by the program" if own >= 0.005 else "")
            + ": autocast casting each op's fp32 weights and inputs, and the gradients back"
        )
        fix = (
            "nothing to cast by hand: these are autocast's own, made again at every call, "
            "and they cost host time, which matters only where the host limits the step: "
            f"{spell(COMPILE, ev.context.framework)} folds them into its kernels"
        )
    return [
        finding(
            ev,
            "copy.frequent_casts",
            "tensors are cast over and over",
            seen,
            fix,
            "aten::to drops in the capture's CPU ops",
            severity=INFO,
        )
    ]


#: how many of a trace's casts run inside other torch ops, against those the
#: program makes, for them to be read as autocast's
AUTOCAST_OVER_OWN = 2.0


def _casts_inside(
    parents: Sequence[tuple[str, int]],
) -> tuple[float, float, float, str] | None:
    """Where a trace's casts run (:attr:`CaptureView.cast_parents`): the shares
    inside forward torch ops, inside autograd's backward and called by the
    program, and the ops that run the most; None unless those inside forward
    ops outnumber the program's own :data:`AUTOCAST_OVER_OWN` times (then they
    are autocast's, or the ops' own, not a cast the program repeats)."""
    total = sum(n for _name, n in parents)
    if not total:
        return None
    own = sum(n for name, n in parents if not name)
    backward = sum(n for name, n in parents if name and "backward" in name.lower())
    forward = total - own - backward
    if not forward or forward < AUTOCAST_OVER_OWN * own:
        return None
    ops = [fmt.clean(name, 40) for name, _n in parents if name and "backward" not in name.lower()]
    names = ", ".join(ops[:3]) + (", ..." if len(ops) > 3 else "")
    return forward / total, backward / total, own / total, names


@rule(
    "copy.sync_memcpy",
    "sync",
    "Nsight Systems: synchronous memcpy and memset",
    ("capture",),
    trigger="capture: >= {copy.sync_memcpy_per_step} synchronous cudaMemcpy/cudaMemset per step",
    bucket="sync",
)
def sync_memcpy(ev: JobEvidence) -> Iterable[Finding]:
    cap = capture_of(ev)
    if cap is None:
        return []
    us, calls = cap.ops_us(("cudaMemcpy", "cudaMemset"))
    if calls / cap.steps < SYNC_MEMCPY_PER_STEP:
        return []
    return [
        finding(
            ev,
            "copy.sync_memcpy",
            "synchronous copies in the step",
            f"{calls} cudaMemcpy/cudaMemset calls over {cap.steps} steps ({fmt.us(us)} of CPU "
            "time): each waits for the GPU",
            "use pinned memory with non_blocking=True copies; read values back every N steps",
            "cudaMemcpy disappears from the capture's CPU ops (cudaMemcpyAsync is fine)",
            severity=INFO,
        )
    ]


#: the ops that make a tensor of zeros, each with one aten::zero_ inside
ZERO_FACTORIES = ("aten::zeros", "aten::new_zeros", "aten::zeros_like")


@rule(
    "steps.zero_grad_zeros",
    "launch",
    "TorchTidy: zero_grad writing zeros instead of setting gradients to None",
    ("capture",),
    trigger=(
        "capture: >= {steps.zero_per_step} zero-fill calls per step (zero_grad writing "
        "zeros), less those the zero-tensor factories make (aten::zeros, new_zeros, zeros_like)"
    ),
    bucket=ISSUE,
)
def zero_grad_zeros(ev: JobEvidence) -> Iterable[Finding]:
    cap = capture_of(ev)
    if cap is None:
        return []
    _us, zeroed = cap.ops_us(("aten::zero_",))
    # a new tensor of zeros (batch norm's statistics, a loss's gradient) is
    # made by a factory that calls zero_ once: those are not the gradients'
    _us, made = cap.ops_us(ZERO_FACTORIES)
    calls = max(0, zeroed - made)
    if calls / cap.steps < ZERO_PER_STEP:
        return []
    fills = sum(k.total_us for k in cap.kernels if "FillFunctor" in k.name)
    share = cap.span_share(fills)
    return [
        finding(
            ev,
            "steps.zero_grad_zeros",
            "gradients are zeroed with kernels",
            f"{calls / cap.steps:.0f} aten::zero_ calls per step"
            + (f", fill kernels {fmt.us(fills)} in the capture" if fills else ""),
            "optimizer.zero_grad(set_to_none=True) (the default since torch 2.0) frees the "
            "gradients instead of writing zeros into them",
            "aten::zero_ disappears from the capture's CPU ops",
            share=share,
            severity=INFO if not share or share < 0.02 else None,
        )
    ]


@rule(
    "comm.share",
    "comm",
    "TensorBoard profiler: communication over 10% of the step; bottleneck tables: NCCL "
    "communication overhead",
    ("capture",),
    trigger=(
        "capture: NCCL kernels >= {comm.share} of the GPU timeline; cost: the part not "
        "overlapped with compute"
    ),
    bucket=GPU_COMM,
)
def comm_share(ev: JobEvidence) -> Iterable[Finding]:
    cap = capture_of(ev)
    if cap is None or not cap.span_us:
        return []
    comm_us = cap.class_us(kernels.COMMUNICATION)
    # kernels on several streams can add up past the span: a share is at most all of it
    share = cap.span_share(comm_us) or 0.0
    if share < COMM_SHARE:
        return []
    overlap = cap.comm_compute_overlap
    exposed = share * (1.0 - (overlap or 0.0))
    # The step waits for communication only where its host does: in the comm,
    # sync and launch buckets.  An NCCL kernel that spins for a slower peer while
    # this host runs ahead costs this rank no more than that (the peer's delay is
    # the rank view's straggler finding).
    acct = cap.account
    waited = None
    if acct is not None and acct.step_us > 0:
        waited = acct.share("comm") + acct.share("sync") + acct.share("launch")
    capped = waited is not None and waited < exposed
    if waited is not None and capped:
        exposed = waited
    return [
        finding(
            ev,
            "comm.share",
            "communication takes a large share of the step",
            f"{_comm_kernels(ev)} {share * 100:.0f}% of the capture"
            + (
                f", {overlap * 100:.0f}% of it overlapped with compute"
                if overlap is not None
                else ""
            )
            + (
                f"; the host waits on communication and the GPU {exposed * 100:.0f}% "
                "of the step (a kernel that waits for a slower rank costs this one no more)"
                if capped
                else ""
            )
            + collective_evidence(cap.collectives),
            comm_fix(ev.context.collectives, ev.context.inference, cap.collectives),
            "the capture's exposed communication time falls",
            share=exposed,
        )
    ]


def _comm_kernels(ev: JobEvidence) -> str:
    """What the job's communication kernels are: NCCL's, or beside them DeepEP's
    expert-parallel exchange."""
    cap = capture_of(ev)
    if cap is not None and any(kernels.expert_exchange(k.name) for k in cap.kernels):
        return "communication kernels (DeepEP's expert-parallel dispatch and combine)"
    return "NCCL kernels"


#: a collective's calls wait more than they move data where their mean rate is
#: under this share of the rate of its fastest call (the one that waited least),
#: or where they take a millisecond or more on average at under 0.1 GB/s (a
#: gigabit network's rate: no interconnect a GPU job uses is slower)
COMM_WAIT_RATE = 1 / 3
COMM_WAIT_US = 1000.0
COMM_SLOW_GBPS = 0.1
#: an all-to-all's split by destination is even where its largest part is at
#: most this much over an even one
EVEN_SPLIT = 1.1


def waiting_collectives(sizes: Sequence[CollectiveCalls]) -> list[CollectiveCalls]:
    """The collectives whose kernels wait more than they transfer: three or more
    sized calls whose mean rate is under :data:`COMM_WAIT_RATE` of their
    fastest call's, or that average :data:`COMM_WAIT_US` or more at under
    :data:`COMM_SLOW_GBPS`."""
    out = []
    for c in sizes:
        mean = c.mean_gbps
        if c.sized < 3 or mean is None or not c.best_gbps:
            continue
        if mean < COMM_WAIT_RATE * c.best_gbps or (
            c.us_per_call >= COMM_WAIT_US and mean < COMM_SLOW_GBPS
        ):
            out.append(c)
    return out


def even_splits(sizes: Sequence[CollectiveCalls]) -> bool:
    """Whether every all-to-all that splits its message by destination splits
    it evenly (each rank sends each peer as much), and one does."""
    split = [c for c in sizes if c.split_calls and c.split_skew is not None]
    return bool(split) and all((c.split_skew or 0.0) <= EVEN_SPLIT for c in split)


def collective_evidence(sizes: Sequence[CollectiveCalls], top: int = 2) -> str:
    """What the largest collectives move, as a clause: "its 12 all_to_allv calls
    move 8.0KiB each, in 1.3ms on average, the fastest at 0.8GB/s" ("" for
    none sized)."""
    parts = []
    for c in [c for c in sizes if c.sized][:top]:
        per_call = c.bytes_per_call
        text = (
            f"{c.calls:,} {fmt.clean(c.name, 40)} call{'s' * (c.calls != 1)} "
            f"move{'s' * (c.calls == 1)} {fmt.size(per_call)}{' each' * (c.calls != 1)}, in "
            f"{fmt.us(c.us_per_call)}{' on average' * (c.calls != 1)}"
        )
        if c.calls > 1 and c.best_gbps:
            text += f", the fastest at {fmt.rate(c.best_gbps * 1e9)}"
        if c.split_calls and c.split_skew is not None:
            text += (
                ", split evenly between the ranks"
                if c.split_skew <= EVEN_SPLIT
                else f", its largest part {c.split_skew:.1f}x an even one"
            )
        parts.append(text)
    return "; its " + "; ".join(parts) if parts else ""


def comm_fix(
    collectives: tuple[str, ...],
    inference: bool = False,
    sizes: Sequence[CollectiveCalls] = (),
) -> str:
    """Communication advice for the collectives the job runs: all-to-all (expert
    and embedding parallelism), all-gather and reduce-scatter (FSDP, ZeRO),
    all-reduce (DDP); the all-reduce advice when nothing tells.  A job with no
    backward and no optimizer (``inference``) has no gradients to sync: its
    collectives are tensor or sequence parallelism, or weights sharded
    FSDP-style, each moving data at every layer.  Where the trace records the
    messages (``sizes``): kernels that wait more than they transfer are told
    so first, and an all-to-all whose splits are even is not told to balance
    them."""
    kinds = set(collectives)
    parts = []
    waiting = waiting_collectives(sizes)
    if waiting:
        c = waiting[0]
        mean = (c.mean_gbps or 0.0) * 1e9  # bytes/s
        best = (c.best_gbps or 0.0) * 1e9
        why = (
            f"their fastest call moved its message at {fmt.rate(best)}, the calls average "
            f"{fmt.rate(mean)}"
            if mean < COMM_WAIT_RATE * best
            else f"{fmt.size(c.bytes_per_call)} a call in {fmt.us(c.us_per_call)}: "
            f"{fmt.rate(mean)}, slower than any interconnect"
        )
        parts.append(
            f"the {fmt.clean(c.name, 40)} kernels wait more than they move data ({why}): a peer "
            "reaches each call later (every rank's trace analyzed together, or the rank "
            "view, names the rank the others wait for), or NCCL's transport is slow "
            "(NCCL_DEBUG=INFO names it: P2P or NVLink inside a node; NET over sockets is "
            "slow)"
        )
    if "all_to_all" in kinds or ("send_recv" in kinds and not kinds & {"all_reduce"}):
        balance = (
            ""
            if even_splits(sizes)
            else "balance the tokens or ids each rank sends (a capacity factor, "
            "load-balancing loss, sharding by frequency), "
        )
        parts.append(
            "the all-to-all exchange (expert or embedding parallelism) waits on the slowest "
            f"peer and the network: {balance}send fewer, larger messages, overlap the "
            "exchange with compute of the previous micro-batch, and keep it inside a node "
            "(NVLink) where the layout allows"
        )
    if inference and kinds & {"all_gather", "reduce_scatter", "all_reduce"}:
        parts.append(
            "with no backward here, the "
            + "/".join(k.replace("_", "-") for k in sorted(kinds) if k != "all_to_all")
            + " calls are tensor or sequence parallelism, or weights sharded FSDP-style, "
            "moving activations or weights at every layer: shard over fewer GPUs, or none "
            "where the model fits one (a replica per GPU, each serving its own requests), "
            "keep the ranks on GPUs joined by NVLink (PCIe makes each collective slow), and "
            "put more tokens through each call (a larger batch)"
        )
        return "; ".join(parts)
    if kinds & {"all_gather", "reduce_scatter"}:
        parts.append(
            "FSDP/ZeRO's all-gathers and reduce-scatters: prefetch the next unit's "
            "parameters (FSDP backward_prefetch=BACKWARD_PRE, forward_prefetch=True), "
            "larger wrapping units (fewer, larger collectives), hybrid sharding inside a "
            "node (ShardingStrategy.HYBRID_SHARD), or more compute per gather (a larger "
            "batch per GPU)"
        )
    if "all_reduce" in kinds or not parts:
        parts.append(
            "overlap the gradient all-reduce with backward: DDP(bucket_cap_mb=25..100, "
            "gradient_as_bucket_view=True, static_graph=True where the graph is fixed); "
            "fewer, larger all-reduces; larger batches per GPU (gradient accumulation with "
            "no_sync())"
        )
    return "; ".join(parts)


@rule(
    "comm.poor_overlap",
    "comm",
    "timeline patterns: NCCL calls between backward and the optimizer (DDP sync not "
    "overlapped); HTA: comm/compute overlap",
    ("capture",),
    trigger="capture: NCCL kernels {comm.poor_overlap_share} to {comm.share} of the GPU "
    "timeline with comm/compute overlap < {comm.overlap}",
    bucket=GPU_COMM,
)
def comm_poor_overlap(ev: JobEvidence) -> Iterable[Finding]:
    cap = capture_of(ev)
    if cap is None or not cap.span_us or cap.comm_compute_overlap is None:
        return []
    comm_us = cap.class_us(kernels.COMMUNICATION)
    share = comm_us / cap.span_us
    overlap = cap.comm_compute_overlap
    if share < POOR_OVERLAP_SHARE or overlap >= OVERLAP or share >= COMM_SHARE:
        return []  # comm.share covers large shares
    return [
        finding(
            ev,
            "comm.poor_overlap",
            "communication is not overlapped with compute",
            f"only {overlap * 100:.0f}% of NCCL time overlaps with compute kernels "
            f"(NCCL {share * 100:.0f}% of the capture)",
            comm_fix(ev.context.collectives, ev.context.inference, cap.collectives)
            if set(ev.context.collectives) - {"all_reduce"} or ev.context.inference
            else "let DDP start all-reduces during backward: a smaller bucket_cap_mb for "
            "earlier buckets, gradient_as_bucket_view=True, no work between loss.backward() "
            "and optimizer.step() that waits on gradients",
            "overlap rises in a new capture",
            share=share * (1.0 - overlap),
        )
    ]
