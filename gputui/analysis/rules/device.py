"""Rules over one GPU as the monitor sees it (no job needed): lost, ECC and row
remapping, Xid errors, low utilization with a compute process on it, busy
without tensor cores, memory nearly full, clocks throttled, memory-bandwidth
bound.

Each reads a :class:`DeviceEvidence`: the newest snapshot of the GPU and the
means over the last snapshots, so one idle sample between busy ones raises
nothing.

The readings of a GPU window that the job's GPU rules share (memory-bound,
busy without tensor cores, low utilization) are defined here once, with one
threshold set from :mod:`gputui.analysis.thresholds`: the monitor and the job
view say the same thing of the same numbers.  Nothing here loads the job's
evidence, the wire protocol or Rich.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import compress, repeat
from operator import attrgetter, contains
from typing import TYPE_CHECKING

from gputui import fmt
from gputui.analysis import thresholds, throttle
from gputui.analysis.finding import Finding
from gputui.analysis.gpu_window import GpuWindow
from gputui.analysis.registry import REGISTRY, rule
from gputui.analysis.severity import CRIT, INFO, WARN, Severity
from gputui.protocol.value import ValueBase, value_class

if TYPE_CHECKING:  # the model loads with the monitor, not with a trace's analysis
    from gputui.snapshot.model import DeviceSnapshot, ProcessSnapshot, Snapshot, XidEvent

#: GPU utilization below this is "low" (TensorBoard)
LOW_UTIL_PCT = thresholds.value("gpu.low_util_pct")
#: device memory above this share of the total is "nearly full" (TensorBoard: 90%)
MEM_FULL_PCT = thresholds.value("gpu.mem_full_pct")
#: "busy": plain utilization at or above this ...
BUSY_UTIL_PCT = thresholds.value("gpu.busy_util_pct")
#: ... while tensor cores do less than this and the FP32 pipes at least FP32_PIPE_PCT:
#: matrix work on the CUDA cores
NO_TENSOR_PCT = thresholds.value("gpu.no_tensor_pct")
FP32_PIPE_PCT = thresholds.value("gpu.fp32_pipe_pct")
#: DRAM activity at or above this (about 80% is the practical maximum) with tensor
#: activity under TENSOR_BUSY_PCT: bound by memory bandwidth
DRAM_BOUND_PCT = thresholds.value("gpu.dram_bound_pct")
TENSOR_BUSY_PCT = thresholds.value("gpu.tensor_busy_pct")


@value_class
class Said(ValueBase):
    """What a reading of a GPU window says, for a device or a job finding."""

    title: str
    evidence: str
    fix: str
    confirm: str


def memory_bound_in(w: GpuWindow) -> Said | None:
    """The GPU is bound by memory bandwidth: DRAM activity at the practical
    ceiling while the tensor cores are not what keeps it busy (an elementwise
    chain reads DRAM 88%, SM 99%, tensor 0%: memory-bound, not "no tensor-core
    work")."""
    if w.dram_pct is None or w.dram_pct < DRAM_BOUND_PCT:
        return None
    if (w.tensor_pct or 0.0) >= TENSOR_BUSY_PCT:
        return None
    return Said(
        "the GPU is limited by memory bandwidth",
        f"DRAM activity {w.dram_pct:.0f}% (about 80% is the practical maximum), tensor "
        f"cores {w.tensor_pct or 0:.0f}%, SM activity {w.sm_active_pct or 0:.0f}%",
        "fewer passes over memory: fuse elementwise and normalization chains "
        "(torch.compile), use fused kernels (FlashAttention via "
        "F.scaled_dot_product_attention, fused optimizers), keep activations in bf16",
        "DRAM activity and step time fall; a capture's elementwise share shrinks",
    )


def no_tensor_work_in(w: GpuWindow) -> Said | None:
    """The GPU is busy on the FP32 pipes with its tensor cores idle (and is not
    memory-bound: that reading comes first)."""
    if not w.gpm or w.util_pct is None or w.tensor_pct is None:
        return None
    if w.util_pct < BUSY_UTIL_PCT or w.tensor_pct >= NO_TENSOR_PCT:
        return None
    fp32 = w.fp32_pct or 0.0
    if fp32 < FP32_PIPE_PCT or memory_bound_in(w) is not None:
        return None
    return Said(
        "busy GPU, idle tensor cores",
        f"GPU util {w.util_pct:.0f}%, SM activity {w.sm_active_pct or 0:.0f}%, "
        f"FP32 pipes {fp32:.0f}% but tensor cores {w.tensor_pct:.0f}%",
        "matrix work in full FP32 runs on the CUDA cores: enable TF32 "
        "(torch.set_float32_matmul_precision('high')) or train in bf16 with "
        "torch.autocast('cuda', dtype=torch.bfloat16)",
        "GPM tensor activity rises on the monitor; step time falls",
    )


def low_util_in(w: GpuWindow) -> bool:
    """GPU utilization under the TensorBoard profiler's 50%."""
    return w.util_pct is not None and w.util_pct < LOW_UTIL_PCT


#: the triggers the device and the job rules share
MEMORY_BOUND_TRIGGER = (
    "GPM: DRAM activity >= {gpu.dram_bound_pct} with tensor activity < {gpu.tensor_busy_pct}"
)
NO_TENSOR_TRIGGER = (
    "GPM: utilization >= {gpu.busy_util_pct}, tensor activity < {gpu.no_tensor_pct}, "
    "FP32 pipes >= {gpu.fp32_pipe_pct}, and not memory-bound"
)


@value_class
class DeviceEvidence(ValueBase):
    """What the device rules read about one GPU."""

    device: DeviceSnapshot  # the newest snapshot of the GPU
    window: GpuWindow | None  # means over the recent snapshots
    has_compute: bool  # a compute process is on the GPU
    #: when the newest snapshot was taken (Unix time; None: not known)
    time_s: float | None = None


def device_evidence(snapshot: Snapshot, recent: Sequence[Snapshot]) -> list[DeviceEvidence]:
    """One DeviceEvidence per GPU of ``snapshot``, averaged over ``recent``."""
    by_uuid: dict[str, list[DeviceSnapshot]] = {d.uuid: [] for d in snapshot.devices}
    for snap in recent:
        for d in snap.devices:
            series = by_uuid.get(d.uuid)
            if series is not None and not d.lost:
                series.append(d)
    computing = _computing(snapshot)
    return [
        DeviceEvidence(
            device,
            GpuWindow.of(by_uuid[device.uuid]),
            device.index in computing,
            snapshot.timestamp_s,
        )
        for device in snapshot.devices
    ]


_TYPE = attrgetter("type")
_GPU = attrgetter("gpu_index")


def _computing(snapshot: Snapshot) -> set[int]:
    """The GPUs with a compute process.  The monitor asks at every sample, and a
    node may list thousands of processes, most of them the objects of the last
    sample: the count of compute processes per GPU is carried over from the last
    list asked about, with only the places that hold another process counted
    again (the first list, or one that changed in more than a quarter of its
    places, is counted in one pass in C)."""
    from gputui.snapshot.model import replaced  # loaded already: the snapshot is its

    processes = snapshot.processes
    last, counts = _COUNTED[0]
    changed = replaced(processes, last) if type(processes) is tuple else None
    if changed is None or len(changed) > len(processes) // 4:
        counts = _compute_gpus(processes)
    elif changed:
        counts = counts + _compute_gpus(list(map(processes.__getitem__, changed)))
        counts.subtract(_compute_gpus(list(map(last.__getitem__, changed))))
    if type(processes) is tuple:
        _COUNTED[0] = (processes, counts)
    return {gpu for gpu, n in counts.items() if n > 0}


def _compute_gpus(processes: Sequence[ProcessSnapshot]) -> Counter[int]:
    """How many of ``processes`` compute on each GPU (one pass in C)."""
    compute = map(contains, map(_TYPE, processes), repeat("compute"))
    return Counter(compress(map(_GPU, processes), compute))


#: the last process list :func:`_computing` counted, and its counts per GPU
_COUNTED: list[tuple[tuple[ProcessSnapshot, ...], Counter[int]]] = [((), Counter())]


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


def _said(ev: DeviceEvidence, rule_id: str, severity: Severity, said: Said) -> Finding:
    return _finding(ev, rule_id, severity, said.title, said.evidence, said.fix, said.confirm)


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
    "device.xid",
    "gpu",
    "NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors): each code's meaning and "
    "resolution; gputui: the errors NVML's critical Xid events and the kernel log report",
    ("snapshot",),
    scope="device",
    trigger="the driver reported an Xid error for the GPU: crit for a fault of the GPU (79 "
    "fell off the bus, 48 double-bit ECC, 95 uncontained ECC, ...), warn for a job's fault "
    "(13, 31, 43) or a contained ECC error (94); info when the newest is over a day old",
)
def xid(ev: DeviceEvidence) -> Iterable[Finding]:
    from gputui.analysis.xid import RECENT_S, meaning_of

    d = ev.device
    out: list[Finding] = []
    for counted in d.xid_counts:
        meaning = meaning_of(counted.xid)
        newest = next((e for e in reversed(d.xid_errors) if e.xid == counted.xid), None)
        severity = meaning.severity
        now = ev.time_s
        if newest is not None and now is not None and now - newest.time_s > RECENT_S:
            severity = INFO
        times = "once" if counted.count == 1 else f"{counted.count} times"
        evidence = f"Xid {counted.xid} reported {times}: {meaning.meaning}"
        if newest is not None:
            evidence += f"; the newest {_xid_said(newest)}"
        out.append(
            _finding(
                ev,
                "device.xid",
                severity,
                f"Xid {counted.xid}: {meaning.short}",
                evidence,
                meaning.action,
                f"no new Xid {counted.xid} on GPU {d.index} (gputui's GPU panel, or "
                "dmesg | grep Xid)",
            )
        )
    return out


def _xid_said(event: XidEvent) -> str:
    """When, for which process and in the driver's words (cleaned: the kernel
    log's line names another user's process)."""
    said = f"at {fmt.clock(event.time_s, with_date=True)}"
    if event.pid is not None:
        name = f" {fmt.clean(event.process_name, 64)}" if event.process_name else ""
        said += f", pid {event.pid}{name}"
    if event.detail:
        said += f": {fmt.clean(event.detail, 160)}"
    return said


@rule(
    "device.no_tensor_work",
    "precision",
    "TensorBoard profiler: tensor-core-eligible work without tensor cores (GPM tensor "
    "activity is the witness); gputui: busy GPU with idle tensor cores",
    ("snapshot",),
    scope="device",
    trigger=NO_TENSOR_TRIGGER + " (means over the last 10 samples)",
)
def no_tensor_work(ev: DeviceEvidence) -> Iterable[Finding]:
    w, d = ev.window, ev.device
    said = None if d.lost or w is None or not d.gpm_supported else no_tensor_work_in(w)
    return [] if said is None else [_said(ev, "device.no_tensor_work", WARN, said)]


@rule(
    "device.low_util",
    "data",
    "TensorBoard profiler: GPU utilization under 50%; bottleneck tables: GPU utilization "
    "under 70% means data loading or CPU preprocessing",
    ("snapshot",),
    scope="device",
    trigger=(
        "the last 10 samples: utilization < {gpu.low_util_pct} while a compute process is on "
        "the GPU"
    ),
)
def low_util(ev: DeviceEvidence) -> Iterable[Finding]:
    w, d = ev.window, ev.device
    if d.lost or w is None or not ev.has_compute or not low_util_in(w):
        return []
    assert w.util_pct is not None
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
    trigger="memory used > {gpu.mem_full_pct} of the device",
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
    trigger=MEMORY_BOUND_TRIGGER + " (means over the last 10 samples)",
)
def memory_bound(ev: DeviceEvidence) -> Iterable[Finding]:
    w = ev.window
    said = None if ev.device.lost or w is None else memory_bound_in(w)
    return [] if said is None else [_said(ev, "device.memory_bound", WARN, said)]
