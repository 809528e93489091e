"""Rules over the job's GPU as NVML and GPM saw it while the job ran: idle or
spiky utilization, clocks held back, the SMs and tensor cores underused.

GPM thresholds follow NVIDIA's reading of these metrics (DCGM): SM activity
under 0.5 is ineffective use of the GPU, 0.8 and more is necessary (not
sufficient) for good use; DRAM activity around 0.8 is the practical maximum.
They stand in, for the whole GPU, for Nsight Compute's per-kernel SM and memory
throughput and achieved occupancy; how to confirm names the ncu command.
"""

from __future__ import annotations

from collections.abc import Iterable

from gputui.analysis import throttle
from gputui.analysis.evidence import MIN_GPU_SAMPLES, GpuWindow, JobEvidence
from gputui.analysis.finding import Finding
from gputui.analysis.registry import finding, rule, severity_of
from gputui.analysis.severity import CRIT, INFO, WARN, Severity

#: GPU utilization under this (TensorBoard profiler: 50%) with no other cause found
LOW_UTIL_PCT = 50.0
#: utilization that swings this much (standard deviation, points) is "spiky"
SPIKY_STDEV = 25.0
#: "busy": NVML utilization at or above this
BUSY_UTIL_PCT = 80.0
#: tensor cores under this while busy: the matmuls are not on them
NO_TENSOR_PCT = 5.0
#: SM activity under this while busy: kernels too small to fill the GPU
LOW_SM_PCT = 50.0
#: achieved occupancy under this with the SMs active (Nsight Compute: poor < 25%)
LOW_OCCUPANCY_PCT = 25.0
#: DRAM activity at or above this is the bandwidth ceiling in practice
DRAM_BOUND_PCT = 75.0
#: GPU temperature from which clocks come down
HOT_C = 83.0
#: a clock-event reason active in this share of the samples counts
THROTTLE_SHARE = 0.3

NCU = (
    "ncu --set full --kernel-name regex:NAME --launch-count 5 --target-processes all "
    "python train.py (NAME: the top kernel of a capture)"
)


def _ready(ev: JobEvidence) -> GpuWindow | None:
    gpu = ev.gpu
    if gpu is None or gpu.samples < MIN_GPU_SAMPLES or not ev.enough_steps:
        return None
    return gpu


def _scope(gpu: GpuWindow) -> str:
    return "job's GPU" if gpu.index is None else f"GPU {gpu.index}"


@rule(
    "gpu.throttled",
    "gpu",
    "gputui: clock throttling and power caps while busy (NVML clock-event reasons); GPUs "
    "throttle above about 83C",
    ("gpu",),
    trigger=(
        "the job's GPU >= 80% busy with a costly clock-event reason in >= 30% of the "
        "samples, or >= 83C; cost: the clock deficit"
    ),
)
def throttled(ev: JobEvidence) -> Iterable[Finding]:
    gpu = _ready(ev)
    if gpu is None or (gpu.util_pct or 0) < BUSY_UTIL_PCT:
        return []
    active = [
        t
        for t in throttle.costly(gpu.throttle_share)
        if gpu.throttle_share[t.reason] >= THROTTLE_SHARE
    ]
    hot = gpu.temp_c is not None and gpu.temp_c >= HOT_C
    if not active and not hot:
        return []
    share = None
    evidence = ", ".join(
        f"{t.label} {gpu.throttle_share[t.reason] * 100:.0f}% of the time" for t in active
    )
    if gpu.clock_sm_mhz and gpu.clock_sm_max_mhz and gpu.clock_sm_mhz < gpu.clock_sm_max_mhz:
        # Time on the GPU scales at best with the clock: the lost share of it.
        lost = 1.0 - gpu.clock_sm_mhz / gpu.clock_sm_max_mhz
        share = lost * (gpu.util_pct or 0) / 100.0
        evidence += f"; SM clock {gpu.clock_sm_mhz:.0f} of {gpu.clock_sm_max_mhz:.0f} MHz"
    if gpu.power_w is not None and gpu.power_limit_w:
        evidence += f"; power {gpu.power_w:.0f}/{gpu.power_limit_w:.0f} W"
    if gpu.temp_c is not None:
        evidence += f"; {gpu.temp_c:.0f}C"
    reasons = {t.reason for t in active}
    if reasons & {"hw_slowdown", "hw_power_brake_slowdown", "hw_thermal_slowdown"}:
        fix = "a hardware slowdown: check the power supply, cooling and dmesg for Xid errors"
        floor: Severity = CRIT
    elif hot or reasons & {"sw_thermal_slowdown"}:
        fix = "the GPU runs hot: check airflow, fans and inlet temperature of the node"
        floor = WARN
    else:
        fix = (
            "the GPU holds its power limit: expected under full load; if clocks matter more, "
            "raise the limit (nvidia-smi -pl) where allowed, or trade some throughput for power "
            "(lower clocks give better energy per step)"
        )
        floor = INFO
    return [
        finding(
            ev,
            "gpu.throttled",
            "GPU clocks are held back",
            evidence.lstrip("; "),
            fix,
            "the clock-event flags clear on the monitor and the SM clock stays near its maximum",
            share=share,
            scope=_scope(gpu),
            severity=severity_of(None if share is None else share * 100, floor=floor),
        )
    ]


@rule(
    "gpu.spiky",
    "sync",
    "bottleneck tables: spiky GPU utilization from CPU-GPU synchronization or the GIL",
    ("gpu",),
    trigger=(
        "the job's GPU utilization swings (standard deviation >= 25 points) with a mean under 80%"
    ),
)
def spiky(ev: JobEvidence) -> Iterable[Finding]:
    gpu = _ready(ev)
    if gpu is None or gpu.util_stdev_pct is None or gpu.util_pct is None:
        return []
    if gpu.util_stdev_pct < SPIKY_STDEV or gpu.util_pct >= BUSY_UTIL_PCT:
        return []
    return [
        finding(
            ev,
            "gpu.spiky",
            "GPU utilization swings up and down",
            f"GPU util {gpu.util_pct:.0f}% on average, swinging by {gpu.util_stdev_pct:.0f} "
            "points from sample to sample",
            "bursts of GPU work separated by waits: look for synchronizing calls (.item(), "
            ".cpu(), torch.cuda.synchronize()), blocking copies (use pinned memory and "
            "non_blocking=True), and Python work that holds the GIL between steps",
            "utilization stays level; a capture (p) shows fewer synchronizations",
            scope=_scope(gpu),
            severity=WARN,
        )
    ]


@rule(
    "gpu.no_tensor_work",
    "precision",
    "TensorBoard profiler: time in tensor-core-eligible ops with 0% tensor-core kernels "
    "(GPM tensor activity is the witness); gputui: busy GPU with idle tensor cores",
    ("gpu",),
    trigger=(
        "GPM: the job's GPU >= 80% busy, tensor activity < 5%, FP32 activity >= 10% (a "
        "capture with FP32 GEMMs defers to precision.fp32_matmul)"
    ),
)
def no_tensor_work(ev: JobEvidence) -> Iterable[Finding]:
    gpu = _ready(ev)
    if gpu is None or not gpu.gpm or gpu.tensor_pct is None or gpu.util_pct is None:
        return []
    if gpu.util_pct < BUSY_UTIL_PCT or gpu.tensor_pct >= NO_TENSOR_PCT:
        return []
    fp32 = gpu.fp32_pct or 0.0
    if fp32 < 10.0:
        return []  # not arithmetic-bound on the CUDA cores either: other rules speak
    if ev.capture is not None and ev.capture.fp32_gemm_share() > 0:
        return []  # the capture names the kernels: precision.fp32_matmul says it better
    return [
        finding(
            ev,
            "gpu.no_tensor_work",
            "busy GPU, idle tensor cores",
            f"GPU util {gpu.util_pct:.0f}%, SM activity {gpu.sm_active_pct or 0:.0f}%, "
            f"FP32 pipes {fp32:.0f}% but tensor cores {gpu.tensor_pct:.0f}%",
            "matrix work in full FP32 runs on the CUDA cores: enable TF32 "
            "(torch.set_float32_matmul_precision('high')) or train in bf16 with "
            "torch.autocast('cuda', dtype=torch.bfloat16)",
            "GPM tensor activity rises on the monitor; step time falls",
            scope=_scope(gpu),
            severity=WARN,
        )
    ]


@rule(
    "gpu.sm_underused",
    "kernels",
    "Nsight Compute metrics as whole-GPU GPM thresholds: SM throughput under 50% "
    "(DCGM: SM activity below 0.5 is ineffective use)",
    ("gpu",),
    trigger="GPM: the job's GPU >= 80% busy but SM activity < 50% (kernels too small to fill it)",
)
def sm_underused(ev: JobEvidence) -> Iterable[Finding]:
    gpu = _ready(ev)
    if gpu is None or gpu.sm_active_pct is None or gpu.util_pct is None:
        return []
    if gpu.util_pct < BUSY_UTIL_PCT or gpu.sm_active_pct >= LOW_SM_PCT:
        return []
    return [
        finding(
            ev,
            "gpu.sm_underused",
            "kernels run, but most SMs sit idle",
            f"GPU util {gpu.util_pct:.0f}% (a kernel is running) but SM activity "
            f"{gpu.sm_active_pct:.0f}%: the kernels have too few blocks to fill "
            "the GPU's SMs",
            "give each kernel more work: larger batches or sequence chunks, fewer and larger "
            "ops (torch.compile fuses small ones); check that the work is not split into "
            "many tiny launches",
            f"SM activity rises above 50%; for the top kernel: {NCU}",
            scope=_scope(gpu),
            severity=WARN,
        )
    ]


@rule(
    "gpu.low_occupancy",
    "kernels",
    "Nsight Compute metrics as whole-GPU GPM thresholds: achieved occupancy under 25%",
    ("gpu",),
    trigger="GPM: SM activity >= 50% with achieved occupancy < 25% and tensor activity < 30%",
)
def low_occupancy(ev: JobEvidence) -> Iterable[Finding]:
    gpu = _ready(ev)
    if gpu is None or gpu.sm_occupancy_pct is None or gpu.sm_active_pct is None:
        return []
    if gpu.sm_active_pct < LOW_SM_PCT or gpu.sm_occupancy_pct >= LOW_OCCUPANCY_PCT:
        return []
    if (gpu.tensor_pct or 0) >= 30.0:
        return []  # tensor-core GEMMs run at low occupancy by design
    return [
        finding(
            ev,
            "gpu.low_occupancy",
            "few warps per SM (low occupancy)",
            f"SM occupancy {gpu.sm_occupancy_pct:.0f}% with SM activity "
            f"{gpu.sm_active_pct:.0f}%: little latency hiding",
            "for custom or generated kernels, fewer registers or less shared memory per thread "
            "lets more warps run; for library kernels, larger problem sizes",
            f"{NCU}: look at achieved occupancy and its limiters",
            scope=_scope(gpu),
            severity=INFO,
        )
    ]


@rule(
    "gpu.memory_bound",
    "kernels",
    "bottleneck tables: high memory utilization but low compute (memory-bandwidth "
    "bound); roofline: arithmetic intensity under the balance point",
    ("gpu",),
    trigger="GPM: DRAM bandwidth >= 75% with tensor activity < 30%",
)
def memory_bound(ev: JobEvidence) -> Iterable[Finding]:
    gpu = _ready(ev)
    if gpu is None or gpu.dram_pct is None or gpu.dram_pct < DRAM_BOUND_PCT:
        return []
    if (gpu.tensor_pct or 0) >= 30.0:
        return []
    cap = ev.capture
    share = None
    if cap is not None:
        # fusing elementwise chains typically halves their memory traffic
        busy = 1.0 - (cap.idle_share or 0.0)
        share = 0.5 * cap.class_share("elementwise", "reduction") * busy
    return [
        finding(
            ev,
            "gpu.memory_bound",
            "the GPU is limited by memory bandwidth",
            f"DRAM activity {gpu.dram_pct:.0f}% (about 80% is the practical maximum), tensor "
            f"cores {gpu.tensor_pct or 0:.0f}%, SM activity {gpu.sm_active_pct or 0:.0f}%",
            "fewer passes over memory: fuse elementwise and normalization chains "
            "(torch.compile), use fused kernels (FlashAttention via "
            "F.scaled_dot_product_attention, fused optimizers), keep activations in bf16",
            "DRAM activity and step time fall; the capture's elementwise share shrinks",
            share=share,
            scope=_scope(gpu),
            severity=WARN if share is None else None,
        )
    ]


@rule(
    "gpu.low_util",
    "data",
    "TensorBoard profiler: GPU utilization under 50%; bottleneck tables: GPU utilization "
    "under 70-80% means the GPU waits for the CPU",
    ("gpu",),
    trigger=(
        "the job's GPU < 50% utilized, with no capture and data loading < 5% (those rules"
        " name the cause)"
    ),
)
def low_util(ev: JobEvidence) -> Iterable[Finding]:
    gpu = _ready(ev)
    if gpu is None or gpu.util_pct is None or gpu.util_pct >= LOW_UTIL_PCT:
        return []
    if ev.capture is not None:
        return []  # the capture's rules name the cause and its cost
    if ev.phase_share("data") >= 0.05:
        return []  # data.loader_wait names it
    return [
        finding(
            ev,
            "gpu.low_util",
            "the GPU is idle much of the time",
            f"GPU util {gpu.util_pct:.0f}%, SM activity {gpu.sm_active_pct or 0:.0f}%",
            "the GPU waits for the CPU: press p (or attach --capture 5) to see where: idle "
            "gaps between tiny kernels (launch overhead), synchronizations, host copies",
            "GPU utilization rises above 80%",
            share=(100.0 - gpu.util_pct) / 100.0,
            scope=_scope(gpu),
        )
    ]
