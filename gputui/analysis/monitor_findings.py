"""Findings for the live monitor: one snapshot (plus a little history) in, advice out.

Pure functions over :mod:`gputui.model` values; no UI, no NVML.  Each rule looks at
one device and says what it saw (evidence, with the numbers) and what usually helps
(fix).  Thresholds follow the source material: the TensorBoard profiler flags GPU
utilization below 50% and peak memory above 90% of the device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gputui.analysis import throttle
from gputui.analysis.finding import FINDINGS_WINDOW, Finding
from gputui.analysis.severity import ORDER, Severity
from gputui.model import DeviceSnapshot, Snapshot

#: GPU utilization below this with a compute process on the GPU is "low" (TensorBoard).
LOW_UTIL_PCT = 50.0
#: device memory above this fraction of the total is "nearly full" (TensorBoard: peak > 90%).
MEM_FULL_PCT = 90.0
#: "busy": plain utilization at or above this ...
BUSY_UTIL_PCT = 80.0
#: ... while tensor cores do less than this: the work is not on the tensor cores.
NO_TENSOR_PCT = 5.0
#: DRAM bandwidth use at or above this with SM activity below MEMBOUND_SM_PCT: memory bound.
MEMBOUND_DRAM_PCT = 60.0
MEMBOUND_SM_PCT = 50.0


def findings(snapshot: Snapshot, history: Sequence[Snapshot] | None = None) -> list[Finding]:
    """All findings for ``snapshot``, most severe first.

    ``history`` is the recent snapshots, oldest first (the current one may or may not
    be included); utilization rules use its average so one idle sample between two
    busy ones does not raise a finding.
    """
    recent = list(history[-FINDINGS_WINDOW:]) if history else []
    if not recent or recent[-1] is not snapshot:
        recent.append(snapshot)
    out: list[Finding] = []
    for device in snapshot.devices:
        if device.lost:
            out.append(
                _gpu(
                    device,
                    "crit",
                    "GPU lost",
                    f"GPU {device.index} stopped answering the driver",
                    "check dmesg for Xid errors; the GPU usually needs a reset or reboot",
                    "lost",
                )
            )
            continue
        has_compute = any(
            p.gpu_index == device.index and "compute" in p.type for p in snapshot.processes
        )
        util = _mean(recent, device.uuid, _util)
        # Within one severity and GPU, the rule order below is the display order:
        # the finding that explains the most comes first.
        out.extend(ecc_problems(device))
        out.extend(no_tensor_work(device, util, _mean(recent, device.uuid, _tensor)))
        out.extend(low_utilization(device, util, has_compute))
        out.extend(memory_nearly_full(device))
        out.extend(throttling(device))
        out.extend(memory_bound(device))
    out.sort(key=lambda f: (ORDER[f.severity], -1 if f.gpu_index is None else f.gpu_index))
    return out


def low_utilization(device: DeviceSnapshot, util: float | None, has_compute: bool) -> list[Finding]:
    if not has_compute or util is None or util >= LOW_UTIL_PCT:
        return []
    return [
        _gpu(
            device,
            "warn",
            "low GPU utilization",
            f"GPU util {util:.0f}% (< {LOW_UTIL_PCT:.0f}%) with a compute process running",
            "likely data loading or CPU bound: more DataLoader workers, pin_memory=True, "
            "prefetch_factor; check the step breakdown with 'gputui attach'",
            "low_util",
        )
    ]


def throttling(device: DeviceSnapshot) -> list[Finding]:
    costly = throttle.costly(device.throttle_reasons)
    worst = throttle.worst(costly)
    if worst is None:
        return []
    reasons = {t.reason for t in costly}
    evidence = "clock throttle: " + ", ".join(t.label for t in costly)
    if device.power_w is not None and device.power_limit_w:
        evidence += f"; power {device.power_w:.0f}/{device.power_limit_w:.0f} W"
    if device.temp_gpu_c is not None:
        evidence += f"; {device.temp_gpu_c:.0f}°C"
    thermal = any("thermal" in r for r in reasons)
    fix = (
        "check cooling and airflow (fans, inlet temperature)"
        if thermal
        else "expected near the power limit under full load; lower power use or raise the "
        "limit (nvidia-smi -pl) if the clocks matter"
    )
    if reasons & {"hw_slowdown", "hw_power_brake_slowdown"}:
        fix = "hardware slowdown: check power supply, cooling and dmesg for Xid errors"
    return [_gpu(device, worst, "clocks throttled", evidence, fix, "throttle")]


def memory_nearly_full(device: DeviceSnapshot) -> list[Finding]:
    pct = device.mem_used_pct
    if pct is None or pct <= MEM_FULL_PCT:
        return []
    used = (device.mem_used_bytes or 0) / 2**30
    total = (device.mem_total_bytes or 0) / 2**30
    return [
        _gpu(
            device,
            "warn",
            "memory nearly full",
            f"{used:.1f}/{total:.1f} GiB used ({pct:.0f}% > {MEM_FULL_PCT:.0f}%)",
            "close to out-of-memory: smaller batch, activation checkpointing, or "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation",
            "mem_full",
        )
    ]


def no_tensor_work(
    device: DeviceSnapshot, util: float | None, tensor: float | None
) -> list[Finding]:
    if not device.gpm_supported or util is None or tensor is None:
        return []
    if util < BUSY_UTIL_PCT or tensor >= NO_TENSOR_PCT:
        return []
    return [
        _gpu(
            device,
            "warn",
            "busy but no tensor-core work",
            f"GPU util {util:.0f}% but tensor activity {tensor:.0f}%: the GPU is busy, "
            "the tensor cores are idle",
            "FP32 path? use bf16/fp16 autocast (torch.autocast) or TF32 "
            "(torch.set_float32_matmul_precision('high')); fine if the work is not matmul",
            "no_tensor",
        )
    ]


def memory_bound(device: DeviceSnapshot) -> list[Finding]:
    gpm = device.gpm
    if gpm is None or gpm.dram_bw_util_pct is None or gpm.sm_activity_pct is None:
        return []
    if gpm.dram_bw_util_pct < MEMBOUND_DRAM_PCT or gpm.sm_activity_pct >= MEMBOUND_SM_PCT:
        return []
    return [
        _gpu(
            device,
            "info",
            "memory-bandwidth bound",
            f"DRAM bandwidth {gpm.dram_bw_util_pct:.0f}% with SM activity "
            f"{gpm.sm_activity_pct:.0f}%",
            "fuse elementwise ops (torch.compile), avoid extra copies, larger batches",
            "mem_bound",
        )
    ]


def ecc_problems(device: DeviceSnapshot) -> list[Finding]:
    out: list[Finding] = []
    if device.ecc_errors_uncorrected:
        out.append(
            _gpu(
                device,
                "crit",
                "uncorrected ECC errors",
                f"{device.ecc_errors_uncorrected} uncorrected ECC error(s)",
                "drain the GPU and check remapped rows; a reset usually applies pending remaps",
                "ecc",
            )
        )
    if device.remapped_rows_failed or device.remapped_rows_pending:
        what = "failed" if device.remapped_rows_failed else "pending"
        out.append(
            _gpu(
                device,
                "crit" if device.remapped_rows_failed else "warn",
                f"row remapping {what}",
                f"remapped rows {what}",
                "a GPU reset applies pending remaps; failed remapping needs service",
                "remap",
            )
        )
    return out


def _gpu(
    device: DeviceSnapshot, severity: Severity, title: str, evidence: str, fix: str, rule: str
) -> Finding:
    """A finding about one GPU."""
    return Finding(
        rule=rule,
        severity=severity,
        scope=f"GPU {device.index}",
        title=title,
        evidence=evidence,
        fix=fix,
        gpu_index=device.index,
    )


def _util(device: DeviceSnapshot) -> float | None:
    return device.util_gpu_pct


def _tensor(device: DeviceSnapshot) -> float | None:
    return device.gpm.tensor_activity_pct if device.gpm is not None else None


def _mean(
    snapshots: Sequence[Snapshot], uuid: str, get: Callable[[DeviceSnapshot], float | None]
) -> float | None:
    """Mean of a device metric over snapshots; None when never available."""
    values: list[float] = []
    for snap in snapshots:
        for device in snap.devices:
            if device.uuid == uuid:
                value = get(device)
                if value is not None:
                    values.append(float(value))
                break
    return sum(values) / len(values) if values else None
