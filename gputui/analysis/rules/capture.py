"""Rules over a profiler capture (or a trace): where the GPU idles and why,
host synchronisation, copies, precision, memory-bound and tiny kernels,
communication.

A capture is profiled, which slows the CPU side (more so on launch-bound
steps); where the job's GPU was also sampled unprofiled, the idle time a rule
claims is bounded by what NVML saw (1 - utilization).  Idle time is claimed by
one cause only, in this order: data loading (its own rule), synchronisation,
launch overhead, other CPU-side work.
"""

from __future__ import annotations

from collections.abc import Iterable

from gputui import fmt
from gputui.analysis.evidence import (
    READBACK_OPS,
    SYNC_CALLS,
    CaptureView,
    JobEvidence,
    is_fp32_gemm,
)
from gputui.analysis.finding import Finding
from gputui.analysis.registry import finding, rule
from gputui.analysis.rules.account import LAUNCH_SHARE, cpu_side_largest
from gputui.analysis.severity import INFO, WARN
from gputui.protocol.messages import DATA
from gputui.trace import kernels

#: synchronizing calls (or read-backs) per step from which syncs explain the idle time
SYNC_PER_STEP = 2.0
#: idle share of the GPU from which the gaps are worth a finding
IDLE_SHARE = 0.15
#: ... when only the (profiled) capture measured it: profiling alone left a healthy
#: bf16 transformer's H100 about 27% idle in its capture while NVML saw it 100% busy
IDLE_SHARE_PROFILED = 0.35
#: launches averaging under this are launch-bound (seed: kernels under 10 us)
SHORT_KERNEL_US = 20.0
#: copies from pageable memory taking this share of the span
PAGEABLE_SHARE = 0.03
#: host-device copies taking this share of the span
MEMCPY_SHARE = 0.10
#: aten::to / _to_copy calls per step, and their share of the CPU ops' time
CASTS_PER_STEP = 50.0
CAST_CPU_SHARE = 0.10
#: aten::copy_ share of CPU op self time that "dominates"
COPY_CPU_SHARE = 0.15
#: FP32 (CUDA-core) GEMMs' share of kernel time that is worth TF32 or bf16
FP32_GEMM_SHARE = 0.20
#: elementwise + reduction share of kernel time of a memory-bound job (a healthy bf16
#: transformer's is 57-62%)
ELEMENTWISE_SHARE = 0.75
#: the top kernel's share of kernel time that deserves a deep dive
TOP_KERNEL_SHARE = 0.25
#: communication over this share of the step (TensorBoard profiler: 10%)
COMM_SHARE = 0.10
#: comm/compute overlap under this is poor
OVERLAP = 0.5
#: zero-filling calls per step that look like zero_grad() writing zeros
ZERO_PER_STEP = 20.0


def tensor_core_fp32(ev: JobEvidence) -> bool:
    """TF32 and bf16 tensor cores exist (compute capability 8.0 or newer, or
    not known: a live job's GPU is told by the GPM tensor activity instead)."""
    cc = ev.compute_capability
    if not cc:
        return True
    try:
        return float(cc) >= 8.0
    except ValueError:
        return True


def _capture(ev: JobEvidence) -> CaptureView | None:
    cap = ev.capture
    if cap is None or (not cap.kernel_calls and not cap.cpu_ops):
        return None
    return cap


def attributable_idle(ev: JobEvidence, cap: CaptureView) -> float | None:
    """The share of the step the GPU idles, net of data loading, bounded by what
    NVML saw unprofiled; None when the capture has no GPU timeline."""
    idle = cap.idle_share
    if idle is None:
        return None
    if _unprofiled(ev):
        idle = min(idle, 1.0 - ev.gpu.util_pct / 100.0)  # type: ignore[union-attr,operator]
    return max(0.0, idle - ev.phase_share(DATA))


def _unprofiled(ev: JobEvidence) -> bool:
    gpu = ev.gpu
    return gpu is not None and gpu.util_pct is not None and gpu.samples >= 3


def idle_floor(ev: JobEvidence) -> float:
    """The idle share worth a finding: higher when only the profiled capture saw it."""
    return IDLE_SHARE if _unprofiled(ev) else IDLE_SHARE_PROFILED


def syncs_per_step(cap: CaptureView) -> tuple[float, int]:
    """(CUDA runtime synchronizations per step, their total count).  Read-back ops
    (aten::item) are not counted: on a CPU tensor (the optimizer's step count)
    they wait for nothing; on a GPU tensor they end in cudaStreamSynchronize."""
    _us, calls = cap.ops_us(SYNC_CALLS)
    return calls / cap.steps, calls


def launch_bound(cap: CaptureView) -> bool:
    mean = cap.mean_kernel_us
    tiny = cap.tiny_kernel_share()
    return (mean is not None and mean < SHORT_KERNEL_US) or (tiny is not None and tiny >= 0.5)


def _gap_evidence(ev: JobEvidence, cap: CaptureView, idle: float) -> str:
    text = f"the GPU idles {idle * 100:.0f}% of the step"
    if cap.idle_share is not None and abs(cap.idle_share - idle) > 0.02:
        text += f" ({cap.idle_share * 100:.0f}% in the capture, profiled)"
    return text


@rule(
    "sync.host_sync",
    "sync",
    "bottleneck tables: training slower after adding logging (.item() syncs), CPU-GPU "
    "synchronization; Nsight Systems: host synchronization APIs",
    ("capture",),
    trigger=(
        "capture: >= 2 CUDA synchronizations (cudaStreamSynchronize, "
        "cudaDeviceSynchronize, ...) per step; cost: the GPU's idle share net of data "
        "loading (bounded by unprofiled NVML utilization)"
    ),
)
def host_sync(ev: JobEvidence) -> Iterable[Finding]:
    cap = _capture(ev)
    if cap is None:
        return []
    per_step, _calls = syncs_per_step(cap)
    if per_step < SYNC_PER_STEP:
        return []
    idle = attributable_idle(ev, cap)
    names = sorted(
        (o for o in cap.cpu_ops if o.name in SYNC_CALLS + READBACK_OPS),
        key=lambda o: -o.calls,
    )
    listed = ", ".join(f"{o.name} x{o.calls}" for o in names[:3])
    evidence = f"{per_step:.0f} synchronizations per step ({listed} in {cap.steps} steps)"
    if idle is not None:
        evidence += "; " + _gap_evidence(ev, cap, idle)
    return [
        finding(
            ev,
            "sync.host_sync",
            "the CPU waits for the GPU inside the step",
            evidence,
            "each .item(), .cpu(), .tolist(), print(tensor), torch.cuda.synchronize() or "
            "data-dependent shape (nonzero, boolean masks) stops the CPU until the GPU catches "
            "up, and the GPU then waits for new launches: keep values on the GPU, log them every "
            "N steps, accumulate metrics as tensors",
            "a new capture shows fewer cudaStreamSynchronize calls and a smaller idle share",
            share=idle,
            severity=None if idle is not None else WARN,
        )
    ]


@rule(
    "launch.overhead",
    "launch",
    "bottleneck tables: many tiny GPU kernels (under 10 us), launch overhead; timeline "
    "pattern: many short GPU kernels with gaps",
    ("capture",),
    trigger=(
        "capture: kernels average < 20 us or half of them are < 10 us, and the GPU idles "
        ">= 15% of the step (>= 35% when only the profiled capture saw it); no host syncs; "
        "with a step account, kernel launch + torch dispatch >= 40% of the step and the "
        "largest CPU-side share; cost: the idle share, at most launch + dispatch"
    ),
)
def launch_overhead(ev: JobEvidence) -> Iterable[Finding]:
    cap = _capture(ev)
    if cap is None or syncs_per_step(cap)[0] >= SYNC_PER_STEP or not launch_bound(cap):
        return []
    idle = attributable_idle(ev, cap)
    if idle is None or idle < idle_floor(ev):
        return []
    acct = cap.account
    if acct is not None and acct.step_us > 0:
        # Launch-bound means issuing ops holds the step: launch calls and torch
        # dispatch, not Python outside torch, a sync or the data loader.
        issuing = acct.share("launch") + acct.share("dispatch")
        if issuing < LAUNCH_SHARE or cpu_side_largest(acct) != "launch":
            return []
        idle = min(idle, issuing)
    mean = cap.mean_kernel_us
    tiny = cap.tiny_kernel_share()
    evidence = (
        f"{cap.kernels_per_step:,.0f} kernel launches per step averaging {fmt.us(mean)}"
        + (f", {tiny * 100:.0f}% of them under 10us" if tiny is not None else "")
        + "; "
        + _gap_evidence(ev, cap, idle)
    )
    return [
        finding(
            ev,
            "launch.overhead",
            "the step is launch-bound: many tiny kernels",
            evidence,
            "launch fewer, larger kernels: torch.compile(model) fuses small ops "
            "(mode='reduce-overhead' adds CUDA graphs), fused or foreach optimizers, larger "
            "batches per step; capture the step in a CUDA graph when its shapes are static",
            "kernels per step fall and the capture's GPU busy share rises",
            share=idle,
        )
    ]


@rule(
    "launch.idle_gaps",
    "launch",
    "profiler observations: large gaps between GPU kernels come from CPU-side overhead "
    "(Python, data loading); Nsight Systems: low GPU utilization",
    ("capture",),
    trigger=(
        "capture: the GPU idles >= 15% of the step (35% profiled only) though kernels are"
        " not tiny and there are no host syncs (silent when cpu.python names the time)"
    ),
    suppressed_by=("cpu.python", "launch.overhead", "sync.host_sync", "data.loader_wait"),
)
def idle_gaps(ev: JobEvidence) -> Iterable[Finding]:
    cap = _capture(ev)
    if cap is None or syncs_per_step(cap)[0] >= SYNC_PER_STEP or launch_bound(cap):
        return []
    idle = attributable_idle(ev, cap)
    if idle is None or idle < idle_floor(ev):
        return []
    return [
        finding(
            ev,
            "launch.idle_gaps",
            "the GPU idles between kernels",
            _gap_evidence(ev, cap, idle) + " while the kernels themselves are not tiny: the CPU "
            "side (Python, host work between ops) does not keep it fed",
            "find the CPU work between launches in the trace (ui.perfetto.dev): move host-side "
            "preprocessing out of the step, torch.compile the model, avoid Python loops over "
            "tensors",
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
    trigger="capture: Memcpy HtoD/DtoH from pageable memory >= 3% of the GPU timeline",
)
def pageable(ev: JobEvidence) -> Iterable[Finding]:
    cap = _capture(ev)
    if cap is None:
        return []
    us, calls = cap.pageable_copies()
    share = cap.span_share(us)
    if share is None or share < PAGEABLE_SHARE:
        return []
    fix = (
        "pin the host side: DataLoader(pin_memory=True), or tensor.pin_memory() once for "
        "reused buffers, then .to('cuda', non_blocking=True); better, keep the data on the GPU"
    )
    if ev.loader is not None and not ev.loader.pin_memory:
        fix = (
            "the DataLoader runs with pin_memory=False: set DataLoader(pin_memory=True) and "
            "copy with .to('cuda', non_blocking=True); pin other reused host buffers once "
            "with tensor.pin_memory()"
        )
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
        "capture: other host-device copies >= 10% of the GPU timeline, or aten::copy_ >= "
        "15% of CPU op time"
    ),
)
def transfers(ev: JobEvidence) -> Iterable[Finding]:
    cap = _capture(ev)
    if cap is None or not cap.span_us:
        return []
    memcpy_us = cap.by_class_us.get(kernels.MEMCPY, 0.0)
    pageable_us, _ = cap.pageable_copies()
    share = (memcpy_us - pageable_us) / cap.span_us  # copy.pageable speaks for those
    copy = cap.op("aten::copy_")
    total_cpu = sum(o.self_us for o in cap.cpu_ops)
    cpu_share = copy.self_us / total_cpu if copy is not None and total_cpu else 0.0
    if share < MEMCPY_SHARE and not (cpu_share >= COPY_CPU_SHARE and share >= 0.02):
        return []
    return [
        finding(
            ev,
            "copy.transfers",
            "much time goes to host-device copies",
            f"copies take {share * 100:.0f}% of the GPU timeline"
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
    trigger="capture: >= 50 aten::to/_to_copy calls per step taking >= 10% of CPU op time",
)
def frequent_casts(ev: JobEvidence) -> Iterable[Finding]:
    cap = _capture(ev)
    if cap is None:
        return []
    us, calls = cap.ops_us(("aten::to", "aten::_to_copy"))
    total_cpu = sum(o.self_us for o in cap.cpu_ops)
    if calls / cap.steps < CASTS_PER_STEP or not total_cpu or us / total_cpu < CAST_CPU_SHARE:
        return []
    return [
        finding(
            ev,
            "copy.frequent_casts",
            "tensors are cast over and over",
            f"{calls / cap.steps:.0f} aten::to/_to_copy calls per step, "
            f"{us / total_cpu * 100:.0f}% of CPU op time",
            "cast once: create tensors with the dtype and device they are used with, keep "
            "constants on the GPU, let autocast handle precision instead of manual "
            ".half()/.float()",
            "aten::to drops in the capture's CPU ops",
            severity=INFO,
        )
    ]


@rule(
    "copy.sync_memcpy",
    "sync",
    "Nsight Systems: synchronous memcpy and memset",
    ("capture",),
    trigger="capture: >= 1 synchronous cudaMemcpy/cudaMemset per step",
)
def sync_memcpy(ev: JobEvidence) -> Iterable[Finding]:
    cap = _capture(ev)
    if cap is None:
        return []
    us, calls = cap.ops_us(("cudaMemcpy", "cudaMemset"))
    if calls / cap.steps < 1.0:
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


@rule(
    "precision.fp32_matmul",
    "precision",
    "TorchTidy: FP32 matmul on Ampere or newer without TF32; TensorBoard profiler: "
    "tensor-core-eligible ops without tensor cores",
    ("capture",),
    trigger=(
        "capture: FP32 GEMMs on the CUDA cores >= 20% of kernel time; cost: 75% of their busy time"
        " (silent when SDPA's math backend made them: attention.sdpa_math speaks)"
    ),
    suppressed_by=("attention.sdpa_math",),
)
def fp32_matmul(ev: JobEvidence) -> Iterable[Finding]:
    cap = _capture(ev)
    if cap is None:
        return []
    share = cap.fp32_gemm_share()
    if share < FP32_GEMM_SHARE or not tensor_core_fp32(ev):
        return []
    top = max((k for k in cap.kernels if is_fp32_gemm(k.name)), key=lambda k: k.total_us)
    busy = cap.busy_share or 0.0
    evidence = f"FP32 GEMMs on the CUDA cores take {share * 100:.0f}% of kernel time"
    if ev.gpu is not None and ev.gpu.tensor_pct is not None:
        evidence += f"; tensor cores {ev.gpu.tensor_pct:.0f}% active"
    evidence += f" (top kernel: {kernels.short_kernel_name(top.name)})"
    # TF32 or bf16 tensor-core GEMMs run several times faster than FP32 on the
    # CUDA cores (H100: ~7x dense); three quarters of that time is a safe claim.
    return [
        finding(
            ev,
            "precision.fp32_matmul",
            "matrix products run in full FP32",
            evidence,
            "let them use the tensor cores: torch.set_float32_matmul_precision('high') (TF32, "
            "also torch.backends.cudnn.allow_tf32 = True for convolutions) or bf16 autocast: "
            "with torch.autocast('cuda', dtype=torch.bfloat16)",
            "GEMM kernel names change (tf32, bf16, nvjet); GPM tensor activity rises",
            share=share * busy * 0.75,
        )
    ]


@rule(
    "kernels.elementwise_bound",
    "kernels",
    "bottleneck tables: high memory use but low compute (memory-bound kernels); roofline: "
    "elementwise and reduction ops sit far under the balance point",
    ("capture",),
    trigger=(
        "capture: elementwise + reduction kernels >= 75% of kernel time with the GPU >= "
        "50% busy (and no GPM DRAM numbers: then gpu.memory_bound speaks; no roofline: "
        "then roofline.memory_bound speaks)"
    ),
)
def elementwise_bound(ev: JobEvidence) -> Iterable[Finding]:
    cap = _capture(ev)
    if cap is None:
        return []
    gpu = ev.gpu
    if gpu is not None and gpu.dram_pct is not None and gpu.samples >= 3:
        return []  # gpu.memory_bound speaks, with the DRAM numbers
    if ev.roofline is not None:
        return []  # the roofline rules speak, with each op's bytes and FLOPs
    share = cap.class_share(kernels.ELEMENTWISE, kernels.REDUCTION)
    busy = cap.busy_share or 0.0
    if share < ELEMENTWISE_SHARE or busy < 0.5:
        return []
    return [
        finding(
            ev,
            "kernels.elementwise_bound",
            "elementwise and reduction kernels dominate",
            f"elementwise and reduction kernels take {share * 100:.0f}% of kernel time; "
            "each reads and writes its tensors from memory",
            "fuse them: torch.compile(model) (Inductor fuses pointwise chains), fused "
            "LayerNorm/softmax/attention kernels (F.scaled_dot_product_attention), fused "
            "optimizers",
            "the capture's elementwise share and the step time fall",
            share=0.5 * share * busy,
        )
    ]


@rule(
    "kernels.top_kernel",
    "kernels",
    "workflow: focus on the top kernels by GPU time; Nsight Compute for a deep dive",
    ("capture",),
    trigger=(
        "capture: one compute kernel >= 25% of kernel time (info: the deep dive and the "
        "ncu command)"
    ),
)
def top_kernel(ev: JobEvidence) -> Iterable[Finding]:
    cap = _capture(ev)
    if cap is None or not cap.kernels:
        return []
    top = cap.kernels[0]
    if top.share < TOP_KERNEL_SHARE or top.kernel_class in (kernels.MEMCPY, kernels.MEMSET):
        return []
    short = kernels.short_kernel_name(top.name)
    stem = short.split("<", 1)[0]
    return [
        finding(
            ev,
            "kernels.top_kernel",
            "one kernel dominates the GPU time",
            f"{short} ({top.kernel_class}) takes {top.share * 100:.0f}% of kernel time, "
            f"{top.calls} launches of {fmt.us(top.mean_us)}",
            "make sure it is the kernel you expect at this size; for GEMMs, dimensions that are "
            "multiples of 8 (16 for fp8) keep the tensor cores' fast paths",
            f"ncu --set full --kernel-name regex:{stem} --launch-count 5 --target-processes all "
            "python train.py: its SM and memory throughput, occupancy and stall reasons",
            severity=INFO,
        )
    ]


@rule(
    "steps.zero_grad_zeros",
    "launch",
    "TorchTidy: zero_grad writing zeros instead of setting gradients to None",
    ("capture",),
    trigger="capture: >= 20 zero-fill calls per step (zero_grad writing zeros)",
)
def zero_grad_zeros(ev: JobEvidence) -> Iterable[Finding]:
    cap = _capture(ev)
    if cap is None:
        return []
    _us, calls = cap.ops_us(("aten::zero_",))
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
        "capture: NCCL kernels >= 10% of the GPU timeline; cost: the part not overlapped "
        "with compute"
    ),
)
def comm_share(ev: JobEvidence) -> Iterable[Finding]:
    cap = _capture(ev)
    if cap is None or not cap.span_us:
        return []
    comm_us = cap.by_class_us.get(kernels.COMMUNICATION, 0.0)
    # kernels on several streams can add up past the span: a share is at most all of it
    share = cap.span_share(comm_us) or 0.0
    if share < COMM_SHARE:
        return []
    overlap = cap.comm_compute_overlap
    exposed = share * (1.0 - (overlap or 0.0))
    return [
        finding(
            ev,
            "comm.share",
            "communication takes a large share of the step",
            f"NCCL kernels {share * 100:.0f}% of the capture"
            + (
                f", {overlap * 100:.0f}% of it overlapped with compute"
                if overlap is not None
                else ""
            ),
            "overlap it with backward: DDP(bucket_cap_mb=25..100, gradient_as_bucket_view=True, "
            "static_graph=True where the graph is fixed); fewer, larger all-reduces; larger "
            "batches per GPU (gradient accumulation with no_sync())",
            "the capture's exposed communication time falls",
            share=exposed,
        )
    ]


@rule(
    "comm.poor_overlap",
    "comm",
    "timeline patterns: NCCL calls between backward and the optimizer (DDP sync not "
    "overlapped); HTA: comm/compute overlap",
    ("capture",),
    trigger="capture: NCCL kernels present with comm/compute overlap < 50%",
)
def comm_poor_overlap(ev: JobEvidence) -> Iterable[Finding]:
    cap = _capture(ev)
    if cap is None or not cap.span_us or cap.comm_compute_overlap is None:
        return []
    comm_us = cap.by_class_us.get(kernels.COMMUNICATION, 0.0)
    share = comm_us / cap.span_us
    overlap = cap.comm_compute_overlap
    if share < 0.05 or overlap >= OVERLAP or share >= COMM_SHARE:
        return []  # comm.share covers large shares
    return [
        finding(
            ev,
            "comm.poor_overlap",
            "communication is not overlapped with compute",
            f"only {overlap * 100:.0f}% of NCCL time overlaps with compute kernels "
            f"(NCCL {share * 100:.0f}% of the capture)",
            "let DDP start all-reduces during backward: a smaller bucket_cap_mb for earlier "
            "buckets, gradient_as_bucket_view=True, no work between loss.backward() and "
            "optimizer.step() that waits on gradients",
            "overlap rises in a new capture",
            share=share * (1.0 - overlap),
        )
    ]
