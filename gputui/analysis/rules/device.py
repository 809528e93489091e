"""Rules over one GPU as the monitor sees it (no job needed): lost, ECC and row
remapping, low utilization with a compute process on it, busy without tensor
cores, memory nearly full, clocks throttled, memory-bandwidth bound.

Each reads a :class:`DeviceEvidence`: the newest snapshot of the GPU and the
means over the last snapshots, so one idle sample between busy ones raises
nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gputui import fmt
from gputui.analysis import throttle
from gputui.analysis.finding import Finding
from gputui.analysis.gpu_window import GpuWindow
from gputui.analysis.registry import REGISTRY, rule
from gputui.analysis.severity import CRIT, INFO, WARN, Severity
from gputui.snapshot.model import DeviceSnapshot, Snapshot

#: GPU utilization below this with a compute process on the GPU is "low" (TensorBoard)
LOW_UTIL_PCT = 50.0
#: device memory above this share of the total is "nearly full" (TensorBoard: 90%)
MEM_FULL_PCT = 90.0
#: "busy": plain utilization at or above this ...
BUSY_UTIL_PCT = 80.0
#: ... while tensor cores do less than this: the work is not on the tensor cores
NO_TENSOR_PCT = 5.0
#: DRAM bandwidth use at or above this with SM activity below MEMBOUND_SM_PCT
MEMBOUND_DRAM_PCT = 60.0
MEMBOUND_SM_PCT = 50.0


@dataclass(frozen=True)
class DeviceEvidence:
    """What the device rules read about one GPU."""

    device: DeviceSnapshot  # the newest snapshot of the GPU
    window: GpuWindow | None  # means over the recent snapshots
    has_compute: bool  # a compute process is on the GPU


def device_evidence(snapshot: Snapshot, recent: Sequence[Snapshot]) -> list[DeviceEvidence]:
    """One DeviceEvidence per GPU of ``snapshot``, averaged over ``recent``."""
    by_uuid: dict[str, list[DeviceSnapshot]] = {d.uuid: [] for d in snapshot.devices}
    for snap in recent:
        for d in snap.devices:
            series = by_uuid.get(d.uuid)
            if series is not None and not d.lost:
                series.append(d)
    computing = {p.gpu_index for p in snapshot.processes if "compute" in p.type}
    return [
        DeviceEvidence(device, GpuWindow.of(by_uuid[device.uuid]), device.index in computing)
        for device in snapshot.devices
    ]


def _finding(
    ev: DeviceEvidence,
    rule_id: str,
    severity: Severity,
    title: str,
    evidence: str,
    fix: str,
    confirm: str,
) -> Finding:
    d = ev.device
    return Finding(
        rule=rule_id,
        severity=severity,
        scope=f"GPU {d.index}",
        title=title,
        evidence=evidence,
        fix=fix,
        confirm=confirm,
        source=REGISTRY[rule_id].source,
        gpu_index=d.index,
    )


@rule(
    "device.lost",
    "gpu",
    "gputui: NVML reports the GPU lost (GpuIsLost, reset required)",
    ("snapshot",),
    scope="device",
    trigger="NVML: the GPU is lost (crit)",
)
def lost(ev: DeviceEvidence) -> Iterable[Finding]:
    if not ev.device.lost:
        return []
    return [
        _finding(
            ev,
            "device.lost",
            CRIT,
            "GPU lost",
            f"GPU {ev.device.index} stopped answering the driver",
            "check dmesg for Xid errors; the GPU usually needs a reset or a reboot",
            "nvidia-smi lists the GPU again",
        )
    ]


@rule(
    "device.ecc",
    "gpu",
    "gputui: uncorrected ECC errors and row remapping (NVML)",
    ("snapshot",),
    scope="device",
    trigger="NVML: uncorrected ECC errors (crit), row remapping pending (warn) or failed (crit)",
)
def ecc(ev: DeviceEvidence) -> Iterable[Finding]:
    d = ev.device
    out: list[Finding] = []
    if d.lost:
        return out
    if d.ecc_errors_uncorrected:
        out.append(
            _finding(
                ev,
                "device.ecc",
                CRIT,
                "uncorrected ECC errors",
                f"{d.ecc_errors_uncorrected} uncorrected ECC error(s)",
                "drain the GPU and check its remapped rows; a reset usually applies pending remaps",
                "nvidia-smi -q -d ECC,ROW_REMAPPER shows no new errors",
            )
        )
    if d.remapped_rows_failed or d.remapped_rows_pending:
        what = "failed" if d.remapped_rows_failed else "pending"
        out.append(
            _finding(
                ev,
                "device.ecc",
                CRIT if d.remapped_rows_failed else WARN,
                f"row remapping {what}",
                f"remapped rows {what}",
                "a GPU reset applies pending remaps; failed remapping needs service",
                "nvidia-smi -q -d ROW_REMAPPER: no pending or failed remaps",
            )
        )
    return out


@rule(
    "device.no_tensor_work",
    "precision",
    "TensorBoard profiler: tensor-core-eligible work without tensor cores (GPM tensor "
    "activity is the witness); gputui: busy GPU with idle tensor cores",
    ("snapshot",),
    scope="device",
    trigger="GPM over the last 10 samples: utilization >= 80% with tensor activity < 5%",
)
def no_tensor_work(ev: DeviceEvidence) -> Iterable[Finding]:
    w, d = ev.window, ev.device
    if d.lost or w is None or not d.gpm_supported or w.util_pct is None or w.tensor_pct is None:
        return []
    if w.util_pct < BUSY_UTIL_PCT or w.tensor_pct >= NO_TENSOR_PCT:
        return []
    return [
        _finding(
            ev,
            "device.no_tensor_work",
            WARN,
            "busy but no tensor-core work",
            f"GPU util {w.util_pct:.0f}% but tensor activity {w.tensor_pct:.0f}%: the GPU is "
            "busy, the tensor cores are idle",
            "FP32 path? use bf16/fp16 autocast (torch.autocast) or TF32 "
            "(torch.set_float32_matmul_precision('high')); fine if the work is not matmul",
            "tensor activity rises; 'gputui attach PID' and a capture name the FP32 kernels",
        )
    ]


@rule(
    "device.low_util",
    "data",
    "TensorBoard profiler: GPU utilization under 50%; bottleneck tables: GPU utilization "
    "under 70% means data loading or CPU preprocessing",
    ("snapshot",),
    scope="device",
    trigger="the last 10 samples: utilization < 50% while a compute process is on the GPU",
)
def low_util(ev: DeviceEvidence) -> Iterable[Finding]:
    w, d = ev.window, ev.device
    if d.lost or w is None or not ev.has_compute or w.util_pct is None:
        return []
    if w.util_pct >= LOW_UTIL_PCT:
        return []
    return [
        _finding(
            ev,
            "device.low_util",
            WARN,
            "low GPU utilization",
            f"GPU util {w.util_pct:.0f}% (< {LOW_UTIL_PCT:.0f}%) with a compute process running",
            "likely data loading or CPU bound: more DataLoader workers, pin_memory=True, "
            "prefetch_factor; check the step breakdown with 'gputui attach'",
            "utilization rises above 80%; the attach screen's data phase shrinks",
        )
    ]


@rule(
    "device.memory_full",
    "memory",
    "TensorBoard profiler: memory over 90% of the device",
    ("snapshot",),
    scope="device",
    trigger="memory used > 90% of the device",
)
def memory_full(ev: DeviceEvidence) -> Iterable[Finding]:
    d = ev.device
    pct = d.mem_used_pct
    if d.lost or pct is None or pct <= MEM_FULL_PCT:
        return []
    return [
        _finding(
            ev,
            "device.memory_full",
            WARN,
            "memory nearly full",
            f"{fmt.size(d.mem_used_bytes)}/{fmt.size(d.mem_total_bytes)} used "
            f"({pct:.0f}% > {MEM_FULL_PCT:.0f}%)",
            "close to out-of-memory: smaller batch, activation checkpointing, or "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation",
            "used memory stays under 90%",
        )
    ]


@rule(
    "device.throttled",
    "gpu",
    "gputui: clock throttling and power caps (NVML clock-event reasons)",
    ("snapshot",),
    scope="device",
    trigger=(
        "NVML clock-event reasons that cost performance (power cap, thermal, hardware "
        "slowdown) active now"
    ),
)
def throttled(ev: DeviceEvidence) -> Iterable[Finding]:
    d = ev.device
    costly = throttle.costly(d.throttle_reasons)
    worst = throttle.worst(costly)
    if d.lost or worst is None:
        return []
    reasons = {t.reason for t in costly}
    evidence = "clock throttle: " + ", ".join(t.label for t in costly)
    if d.power_w is not None and d.power_limit_w:
        evidence += f"; power {d.power_w:.0f}/{d.power_limit_w:.0f} W"
    if d.temp_gpu_c is not None:
        evidence += f"; {d.temp_gpu_c:.0f}°C"
    if reasons & {"hw_slowdown", "hw_power_brake_slowdown"}:
        fix = "hardware slowdown: check power supply, cooling and dmesg for Xid errors"
    elif any("thermal" in r for r in reasons):
        fix = "check cooling and airflow (fans, inlet temperature)"
    else:
        fix = (
            "expected near the power limit under full load; lower power use or raise the "
            "limit (nvidia-smi -pl) if the clocks matter"
        )
    return [
        _finding(
            ev,
            "device.throttled",
            worst,
            "clocks throttled",
            evidence,
            fix,
            "the flag clears and the SM clock returns to its maximum",
        )
    ]


@rule(
    "device.memory_bound",
    "kernels",
    "bottleneck tables: high memory utilization but low compute (memory-bandwidth bound)",
    ("snapshot",),
    scope="device",
    trigger="GPM: DRAM bandwidth >= 60% with SM activity < 50%",
)
def memory_bound(ev: DeviceEvidence) -> Iterable[Finding]:
    gpm = ev.device.gpm
    if ev.device.lost or gpm is None or gpm.dram_bw_util_pct is None or gpm.sm_activity_pct is None:
        return []
    if gpm.dram_bw_util_pct < MEMBOUND_DRAM_PCT or gpm.sm_activity_pct >= MEMBOUND_SM_PCT:
        return []
    return [
        _finding(
            ev,
            "device.memory_bound",
            INFO,
            "memory-bandwidth bound",
            f"DRAM bandwidth {gpm.dram_bw_util_pct:.0f}% with SM activity "
            f"{gpm.sm_activity_pct:.0f}%",
            "fuse elementwise ops (torch.compile), avoid extra copies, larger batches",
            "DRAM activity falls for the same work; a capture shows fewer elementwise kernels",
        )
    ]
