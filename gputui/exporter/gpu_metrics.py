"""A snapshot's GPU, MIG and process series, in base units.

Labels are dcgm-exporter's names and values (``gpu``, ``UUID``, ``pci_bus_id``,
``device`` = ``nvidia<index>``, ``modelName``, plus ``hostname``; MIG instances add
``GPU_I_PROFILE`` and ``GPU_I_ID``), so dashboards and joins written for it carry
over.  Percentages become ratios 0-1, MHz hertz, and cumulative readings (energy,
ECC errors) ``_total`` counters.  Clock-event ("throttle") reasons are integrated
into seconds per reason by :class:`ClockEventCounters` as snapshots arrive, so
``rate()`` of the counter is the fraction of time a reason held the clocks.

A GPU's gauges carry ``hpc_job``, the Slurm job with a process on it, as
dcgm-exporter's HPC job mapping labels them: one series per job where several
share the GPU, none without a job.  Its counters, info and lost series do not:
a counter whose labels changed with the job would start a new series, and a
fault at a job's end (an Xid that killed it) would be missed by ``increase()``.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Sequence
from dataclasses import dataclass

from gputui.analysis.throttle import THROTTLES
from gputui.analysis.xid import CATALOGUE as XID_CATALOGUE
from gputui.exporter.container_labels import (
    HPC_JOB,
    container_labels,
    host_pid_labels,
    job_labels,
    jobs_by_gpu,
)
from gputui.exporter.exposition import COUNTER, GAUGE, INFO, Family, Labels, labels
from gputui.snapshot.model import DeviceSnapshot, ProcessSnapshot, Snapshot

#: ``--processes`` exports at most this many processes (the most GPU memory first):
#: every pid is a new series in the TSDB, so a node with a churn of short jobs must
#: not be able to flood it
MAX_PROCESSES = 64
#: ``--cmdline``: a command line label is cut to this many characters
MAX_COMMAND_CHARS = 256

# (name, help, field, scale): gauges read straight from DeviceSnapshot
_DEVICE_GAUGES: tuple[tuple[str, str, str, float | None], ...] = (
    (
        "gputui_gpu_utilization_ratio",
        "Fraction of the last sample period in which a kernel ran (NVML GPU utilization).",
        "util_gpu_pct",
        0.01,
    ),
    (
        "gputui_gpu_memory_copy_utilization_ratio",
        "Fraction of the last sample period in which device memory was read or written.",
        "util_mem_pct",
        0.01,
    ),
    ("gputui_gpu_memory_used_bytes", "Device memory in use.", "mem_used_bytes", None),
    ("gputui_gpu_memory_total_bytes", "Device memory in total.", "mem_total_bytes", None),
    (
        "gputui_gpu_memory_reserved_bytes",
        "Device memory reserved by the driver.",
        "mem_reserved_bytes",
        None,
    ),
    ("gputui_gpu_temperature_celsius", "GPU core temperature.", "temp_gpu_c", None),
    ("gputui_gpu_memory_temperature_celsius", "Memory temperature.", "temp_mem_c", None),
    ("gputui_gpu_fan_speed_ratio", "Fan speed as a fraction of its maximum.", "fan_pct", 0.01),
    ("gputui_gpu_power_watts", "Power draw.", "power_w", None),
    ("gputui_gpu_power_limit_watts", "Enforced power limit.", "power_limit_w", None),
    ("gputui_gpu_sm_clock_hertz", "SM clock.", "clock_sm_mhz", 1e6),
    ("gputui_gpu_memory_clock_hertz", "Memory clock.", "clock_mem_mhz", 1e6),
    ("gputui_gpu_graphics_clock_hertz", "Graphics clock.", "clock_gfx_mhz", 1e6),
    ("gputui_gpu_sm_clock_max_hertz", "Maximum SM clock.", "clock_sm_max_mhz", 1e6),
    ("gputui_gpu_memory_clock_max_hertz", "Maximum memory clock.", "clock_mem_max_mhz", 1e6),
    ("gputui_gpu_performance_state", "Performance state (0 fastest, 15 slowest).", "pstate", None),
    (
        "gputui_gpu_pcie_tx_bytes_per_second",
        "PCIe bytes sent by the GPU per second.",
        "pcie_tx_bytes_per_s",
        None,
    ),
    (
        "gputui_gpu_pcie_rx_bytes_per_second",
        "PCIe bytes received by the GPU per second.",
        "pcie_rx_bytes_per_s",
        None,
    ),
    ("gputui_gpu_pcie_link_generation", "Current PCIe link generation.", "pcie_gen", None),
    ("gputui_gpu_pcie_link_width", "Current PCIe link width (lanes).", "pcie_width", None),
    (
        "gputui_gpu_nvlink_tx_bytes_per_second",
        "NVLink bytes sent per second, all links.",
        "nvlink_tx_bytes_per_s",
        None,
    ),
    (
        "gputui_gpu_nvlink_rx_bytes_per_second",
        "NVLink bytes received per second, all links.",
        "nvlink_rx_bytes_per_s",
        None,
    ),
    ("gputui_gpu_nvlink_links_active", "NVLink links up.", "nvlink_links_active", None),
)

# (name, help, GpmMetrics field): Hopper+ GPM activity, percent -> ratio
_GPM_GAUGES: tuple[tuple[str, str, str], ...] = (
    (
        "gputui_gpu_sm_active_ratio",
        "Fraction of time at least one warp was resident on an SM, averaged over SMs (GPM).",
        "sm_activity_pct",
    ),
    (
        "gputui_gpu_sm_occupancy_ratio",
        "Resident warps as a fraction of the SMs' maximum, averaged over time (GPM).",
        "sm_occupancy_pct",
    ),
    (
        "gputui_gpu_tensor_active_ratio",
        "Fraction of cycles the tensor cores were busy (GPM).",
        "tensor_activity_pct",
    ),
    (
        "gputui_gpu_dram_active_ratio",
        "Device memory bandwidth used, as a fraction of the peak (GPM).",
        "dram_bw_util_pct",
    ),
    (
        "gputui_gpu_fp16_active_ratio",
        "Fraction of cycles the FP16 pipe was busy (GPM).",
        "fp16_activity_pct",
    ),
    (
        "gputui_gpu_fp32_active_ratio",
        "Fraction of cycles the FP32 pipe was busy (GPM).",
        "fp32_activity_pct",
    ),
    (
        "gputui_gpu_fp64_active_ratio",
        "Fraction of cycles the FP64 pipe was busy (GPM).",
        "fp64_activity_pct",
    ),
)

_REASON_OK = re.compile(r"^[a-z0-9_]{1,64}$")


def device_labels(device: DeviceSnapshot, hostname: str) -> Labels:
    return labels(
        (
            ("gpu", str(device.index)),
            ("UUID", device.uuid),
            ("pci_bus_id", device.bus_id or ""),
            ("device", f"nvidia{device.index}"),
            ("modelName", device.name),
            ("hostname", hostname),
        )
    )


class ClockEventCounters:
    """Seconds each clock-event reason held each GPU's clocks, since start.

    Fed every snapshot with its arrival time (monotonic seconds, not the
    snapshot's own timestamp, which jumps back when a recording loops).  The
    reasons a snapshot reports are taken to have held for the interval before it,
    capped at ``max_gap_s`` so that a stalled poller does not book minutes.
    """

    def __init__(self, max_gap_s: float) -> None:
        self.max_gap_s = max_gap_s
        self._last: float | None = None
        self.seconds: dict[tuple[str, str], float] = {}

    def update(self, snapshot: Snapshot, now_s: float) -> None:
        last, self._last = self._last, now_s
        dt = 0.0 if last is None else min(max(0.0, now_s - last), self.max_gap_s)
        for device in snapshot.devices:
            if device.throttle_reasons is None:
                continue
            for reason in device.throttle_reasons:
                if not _REASON_OK.match(reason):
                    continue
                key = (device.uuid, reason)
                self.seconds[key] = self.seconds.get(key, 0.0) + dt

    def reasons_of(self, uuid: str) -> list[str]:
        """Every known reason, then any other reason this GPU has reported."""
        extra = sorted(r for (u, r) in self.seconds if u == uuid and r not in THROTTLES)
        return [*THROTTLES, *extra]


@dataclass(frozen=True)
class GpuOptions:
    hostname: str
    processes: bool = False
    cmdline: bool = False
    max_processes: int = MAX_PROCESSES


def gpu_families(
    snapshot: Snapshot, options: GpuOptions, clock_events: ClockEventCounters | None
) -> list[Family]:
    """The GPU series of one snapshot (and its processes with ``options.processes``)."""
    host = options.hostname
    info = Family("gputui_gpu_info", INFO, "GPU identity and driver; the value is 1.")
    lost = Family("gputui_gpu_lost", GAUGE, "1 when the GPU stopped answering (fell off the bus).")
    gauges = [Family(name, GAUGE, help_) for name, help_, _, _ in _DEVICE_GAUGES]
    gpm = [Family(name, GAUGE, help_) for name, help_, _ in _GPM_GAUGES]
    energy = Family(
        "gputui_gpu_energy_joules_total", COUNTER, "Energy used by the GPU since the driver loaded."
    )
    ecc = Family(
        "gputui_gpu_ecc_errors_total",
        COUNTER,
        "ECC errors since the driver loaded (volatile), by type corrected/uncorrected.",
    )
    events = Family(
        "gputui_gpu_clock_event_seconds_total",
        COUNTER,
        "Seconds a clock-event (throttle) reason held the GPU's clocks, since the exporter "
        "started; rate() is the fraction of time.",
    )
    xid_total = Family(
        "gputui_xid_errors_total",
        COUNTER,
        "Xid errors the driver reported for the GPU, by code: NVML's critical Xid events "
        "since the exporter started and the kernel log's since boot, one count an error. "
        "Every code of gputui's catalogue is served from 0 while the GPU is watched.",
    )
    xid_last = Family(
        "DCGM_FI_DEV_XID_ERRORS",
        GAUGE,
        "Value of the last XID error encountered (dcgm-exporter's name; 0: none since the "
        "exporter started, or in the kernel log since boot).",
    )
    mig_used = Family("gputui_gpu_mig_memory_used_bytes", GAUGE, "Memory used by a MIG instance.")
    mig_total = Family("gputui_gpu_mig_memory_total_bytes", GAUGE, "Memory of a MIG instance.")
    driver = snapshot.driver_version or ""
    cuda = snapshot.cuda_driver_version or ""
    jobs = jobs_by_gpu(snapshot.processes)
    for device in snapshot.devices:
        lab = device_labels(device, host)
        # the gauges: one series per Slurm job on the GPU (dcgm-exporter's mapping)
        gauge_labs = [lab.extend((HPC_JOB, job)) for job in jobs.get(device.index, ())] or [lab]
        info.add(
            lab.extend(
                ("driver_version", driver),
                ("cuda_version", cuda),
                ("mig_mode", _flag(device.mig_enabled)),
            ),
            1,
        )
        lost.add(lab, 1 if device.lost else 0)
        _xid_series(device, lab, xid_total, xid_last)
        if device.lost:
            continue
        for family, (_, _, attr, scale) in zip(gauges, _DEVICE_GAUGES, strict=True):
            value = getattr(device, attr)
            if value is not None:
                for gauge_lab in gauge_labs:
                    family.add(gauge_lab, _scaled(value, scale))
        if device.gpm is not None:
            for family, (_, _, attr) in zip(gpm, _GPM_GAUGES, strict=True):
                value = getattr(device.gpm, attr)
                if value is not None:
                    for gauge_lab in gauge_labs:
                        family.add(gauge_lab, value / 100.0)
        energy.add(lab, device.energy_j)
        ecc.add(lab.extend(("type", "corrected")), device.ecc_errors_corrected)
        ecc.add(lab.extend(("type", "uncorrected")), device.ecc_errors_uncorrected)
        if clock_events is not None and device.throttle_reasons is not None:
            seconds = clock_events.seconds
            for reason in clock_events.reasons_of(device.uuid):
                events.add(lab.extend(("reason", reason)), seconds.get((device.uuid, reason), 0.0))
        for mig in device.mig_instances:
            profile = (mig.name or "").removeprefix("MIG ").strip()
            mig_lab = lab.extend(("GPU_I_PROFILE", profile), ("GPU_I_ID", str(mig.gpu_instance_id)))
            mig_used.add(mig_lab, mig.mem_used_bytes)
            mig_total.add(mig_lab, mig.mem_total_bytes)
    families = [
        info,
        lost,
        *gauges,
        *gpm,
        energy,
        ecc,
        events,
        xid_total,
        xid_last,
        mig_used,
        mig_total,
    ]
    if options.processes:
        families.extend(process_families(snapshot, options))
    return families


def _xid_series(device: DeviceSnapshot, lab: Labels, total: Family, last: Family) -> None:
    """A watched GPU's Xid counters (every catalogue code from 0, so that
    ``increase()`` sees a first error) and its last Xid; nothing where the GPU's
    Xid errors are not watched (not known, or neither source readable)."""
    if not device.xid_sources and not device.xid_counts:
        return
    counts = {c.xid: c.count for c in device.xid_counts}
    for code in sorted(set(XID_CATALOGUE) | set(counts)):
        total.add(lab.extend(("xid", str(code))), counts.get(code, 0))
    newest = device.xid_errors[-1].xid if device.xid_errors else 0
    last.add(lab, newest)


def _flag(value: bool | None) -> str:
    return "" if value is None else ("1" if value else "0")


def process_families(snapshot: Snapshot, options: GpuOptions) -> list[Family]:
    """Per-process series, the ``max_processes`` biggest by GPU memory."""
    host = options.hostname
    mem = Family("gputui_process_gpu_memory_bytes", GAUGE, "GPU memory used by a process.")
    sm = Family(
        "gputui_process_sm_utilization_ratio",
        GAUGE,
        "Fraction of time a process had a kernel running on the GPU (NVML, slower cadence).",
    )
    cpu = Family(
        "gputui_process_cpu_ratio", GAUGE, "CPU time of a process per second (1 = one core)."
    )
    rss = Family("gputui_process_resident_memory_bytes", GAUGE, "Host memory (RSS) of a process.")
    dropped = Family(
        "gputui_exporter_processes_dropped",
        GAUGE,
        "GPU processes left out of the process series by the cap, in the last snapshot.",
    )
    kept = _biggest(snapshot.processes, options.max_processes)
    dropped.add(labels((("hostname", host),)), len(snapshot.processes) - len(kept))
    devices = {d.index: d for d in snapshot.devices}
    for proc in kept:
        device = devices.get(proc.gpu_index)
        pairs: tuple[tuple[str, str], ...] = (
            ("gpu", str(proc.gpu_index)),
            ("UUID", proc.gpu_uuid),
            ("device", f"nvidia{proc.gpu_index}"),
            ("modelName", device.name if device is not None else ""),
            ("hostname", host),
            ("pid", str(proc.pid)),
            ("process_name", proc.name or ""),
            *host_pid_labels(proc),
            *container_labels(proc.container),
            *job_labels(proc.slurm),
        )
        if options.cmdline:
            command = " ".join(proc.cmdline) if proc.cmdline else (proc.name or "")
            pairs += (("user", proc.user or ""), ("command", command[:MAX_COMMAND_CHARS]))
        lab = labels(pairs)
        mem.add(lab, proc.gpu_mem_bytes)
        sm.add(lab, None if proc.sm_pct is None else proc.sm_pct / 100.0)
        cpu.add(lab, None if proc.cpu_pct is None else proc.cpu_pct / 100.0)
        rss.add(lab, proc.rss_bytes)
    return [mem, sm, cpu, rss, dropped]


def _biggest(processes: Sequence[ProcessSnapshot], count: int) -> list[ProcessSnapshot]:
    """The ``count`` processes using the most GPU memory, biggest first: a selection,
    not a sort of all of them (a node may have thousands)."""
    return heapq.nsmallest(
        count, processes, key=lambda p: (-(p.gpu_mem_bytes or 0), p.pid, p.gpu_index)
    )


def _scaled(value: float, scale: float | None) -> float:
    if scale is None:
        return value
    # a percentage is divided, not multiplied by 0.01: 70% reads 0.7, not 0.7000000000000001
    return value / 100.0 if scale == 0.01 else value * scale
