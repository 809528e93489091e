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
from typing import Any

from gputui.analysis import thresholds, throttle
from gputui.analysis.evidence import MIN_STEPS, GpuWindow, JobEvidence
from gputui.analysis.finding import Finding
from gputui.analysis.ledger import GPU_BUSY, GPU_IDLE
from gputui.analysis.registry import Minimum, finding, rule, severity_of
from gputui.analysis.rules.device import (
    BUSY_UTIL_PCT,
    MEMORY_BOUND_TRIGGER,
    NO_TENSOR_TRIGGER,
    TENSOR_BUSY_PCT,
    Said,
    low_util_in,
    memory_bound_in,
    no_tensor_work_in,
)
from gputui.analysis.severity import CRIT, INFO, WARN, Severity

#: utilization that swings this much (standard deviation, points) is "spiky", from
#: this many samples (a handful taken during a capture swing by themselves)
SPIKY_STDEV = thresholds.value("gpu.spiky_stdev_pct")
SPIKY_SAMPLES = int(thresholds.value("min.spiky_samples"))
#: SM activity under this while busy: kernels too small to fill the GPU
LOW_SM_PCT = thresholds.value("gpu.low_sm_pct")
#: achieved occupancy under this with the SMs active (Nsight Compute: poor < 25%)
LOW_OCCUPANCY_PCT = thresholds.value("gpu.low_occupancy_pct")
#: GPU temperature from which clocks come down
HOT_C = thresholds.value("gpu.hot_c")
#: a clock-event reason active in this share of the samples counts
THROTTLE_SHARE = thresholds.value("gpu.throttle_share")

NCU = (
    "ncu --set full --kernel-name regex:NAME --launch-count 5 --target-processes all "
    "python train.py (NAME: the top kernel of a capture)"
)


def _ready(ev: JobEvidence) -> GpuWindow | None:
    """The job's GPU window (the engine runs a GPU rule only with enough samples
    and steps: its declared minimum)."""
    return ev.gpu


def _scope(gpu: GpuWindow) -> str:
    return "job's GPU" if gpu.index is None else f"GPU {gpu.index}"


@rule(
    "gpu.throttled",
    "gpu",
    "gputui: clock throttling and power caps while busy (NVML clock-event reasons); GPUs "
    "throttle above about 83C",
    ("gpu",),
    trigger=(
        "the job's GPU >= {gpu.busy_util_pct} busy with a costly clock-event reason in >= "
        "{gpu.throttle_share} of the samples, or >= {gpu.hot_c}; cost: the clock deficit"
    ),
    bucket=GPU_BUSY,
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
        "the job's GPU utilization swings (standard deviation >= {gpu.spiky_stdev_pct} points) "
        "with a mean under {gpu.busy_util_pct}"
    ),
    minimum=Minimum(steps=MIN_STEPS, gpu_samples=SPIKY_SAMPLES),
    bucket=GPU_IDLE,
    symptom=True,
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
    trigger=NO_TENSOR_TRIGGER + " on the job's GPU (a capture with FP32 GEMMs defers to "
    "precision.fp32_matmul)",
    bucket=GPU_BUSY,
)
def no_tensor_work(ev: JobEvidence) -> Iterable[Finding]:
    gpu = _ready(ev)
    said = None if gpu is None else no_tensor_work_in(gpu)
    if gpu is None or said is None:
        return []
    if ev.capture is not None and ev.capture.fp32_gemm_share() > 0:
        return []  # the capture names the kernels: precision.fp32_matmul says it better
    return [_said(ev, gpu, "gpu.no_tensor_work", said, severity=WARN)]


def _said(ev: JobEvidence, gpu: GpuWindow, rule_id: str, said: Said, **kw: Any) -> Finding:
    """A job finding of what a reading of the job's GPU window says (``kw``:
    ``share``, ``severity``)."""
    t = said
    return finding(ev, rule_id, t.title, t.evidence, t.fix, t.confirm, scope=_scope(gpu), **kw)


@rule(
    "gpu.sm_underused",
    "kernels",
    "Nsight Compute metrics as whole-GPU GPM thresholds: SM throughput under 50% "
    "(DCGM: SM activity below 0.5 is ineffective use)",
    ("gpu",),
    trigger=(
        "GPM: the job's GPU >= {gpu.busy_util_pct} busy but SM activity < {gpu.low_sm_pct} "
        "(kernels too small to fill it)"
    ),
    bucket=GPU_BUSY,
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
    trigger=(
        "GPM: SM activity >= {gpu.low_sm_pct} with achieved occupancy < "
        "{gpu.low_occupancy_pct} and tensor activity < {gpu.tensor_busy_pct}"
    ),
    bucket=GPU_BUSY,
)
def low_occupancy(ev: JobEvidence) -> Iterable[Finding]:
    gpu = _ready(ev)
    if gpu is None or gpu.sm_occupancy_pct is None or gpu.sm_active_pct is None:
        return []
    if gpu.sm_active_pct < LOW_SM_PCT or gpu.sm_occupancy_pct >= LOW_OCCUPANCY_PCT:
        return []
    if (gpu.tensor_pct or 0) >= TENSOR_BUSY_PCT:
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
    trigger=MEMORY_BOUND_TRIGGER + " on the job's GPU; cost, with a capture: half the "
    "elementwise and reduction kernels' share of the busy time",
    bucket=GPU_BUSY,
)
def memory_bound(ev: JobEvidence) -> Iterable[Finding]:
    gpu = _ready(ev)
    said = None if gpu is None else memory_bound_in(gpu)
    if gpu is None or said is None:
        return []
    cap = ev.capture
    share = None
    if cap is not None:
        # fusing elementwise chains typically halves their memory traffic
        busy = 1.0 - (cap.idle_share or 0.0)
        share = 0.5 * cap.class_share("elementwise", "reduction") * busy
    return [
        _said(
            ev, gpu, "gpu.memory_bound", said, share=share, severity=WARN if share is None else None
        )
    ]


@rule(
    "gpu.low_util",
    "data",
    "TensorBoard profiler: GPU utilization under 50%; bottleneck tables: GPU utilization "
    "under 70-80% means the GPU waits for the CPU",
    ("gpu",),
    trigger=(
        "the job's GPU < {gpu.low_util_pct} utilized, with no capture and data loading < "
        "{data.share} (those rules name the cause)"
    ),
    bucket=GPU_IDLE,
    symptom=True,
)
def low_util(ev: JobEvidence) -> Iterable[Finding]:
    gpu = _ready(ev)
    if gpu is None or not low_util_in(gpu) or gpu.util_pct is None:
        return []
    if ev.capture is not None:
        return []  # the capture's rules name the cause and its cost
    if ev.phase_share("data") >= thresholds.value("data.share"):
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
