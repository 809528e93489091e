"""GPU descriptions for the fake pynvml: what each fake GPU reports.

Presets for the driver generations the collector must handle: ``h100`` (GPM,
NVLink), ``a100`` (no GPM), ``v100`` on an old driver (older function names
only) and ``a100_mig`` (MIG mode).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pynvml as real  # type: ignore[import-untyped]

GIB = 1024**3
MIB = 1024**2


@dataclass
class FakeProcess:
    pid: int
    used_gpu_memory: int | None = 1 * GIB
    #: "compute", "graphics" or "both"
    kind: str = "compute"
    sm_util: int | None = 50
    mem_util: int | None = 20
    gpu_instance_id: int = 0xFFFFFFFF


@dataclass
class FakeMig:
    """One MIG device (a compute instance inside a GPU instance)."""

    gpu_instance_id: int
    name: str
    uuid: str
    mem_used: int
    mem_total: int
    sm_count: int


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    bus_id: str = "00000000:19:00.0"
    util_gpu: int = 97
    util_mem: int = 40
    mem_total: int = 80 * GIB
    mem_used: int = 10 * GIB
    mem_reserved: int = 500 * MIB
    bar1_total: int = 128 * GIB
    bar1_used: int = 2 * MIB
    temp: int = 61
    temp_mem: int | None = 70
    fan: int | None = None
    power_mw: int = 350_000
    power_limit_mw: int = 700_000
    energy_mj: int = 123_456_789
    clock_sm: int = 1980
    clock_mem: int = 2619
    clock_gfx: int = 1980
    clock_sm_max: int = 1980
    clock_mem_max: int = 2619
    clock_gfx_max: int = 1980
    pstate: int = 0
    throttle: int = 0x4  # SwPowerCap
    pcie_gen: int = 5
    pcie_gen_max: int = 5
    pcie_width: int = 16
    pcie_width_max: int = 16
    #: cumulative PCIe byte counters; None: field unsupported
    pcie_tx_bytes: int | None = 1_000_000
    pcie_rx_bytes: int | None = 2_000_000
    nvlink_states: list[int] | None = None
    #: cumulative NVLink data counters in KiB, all links summed
    nvlink_tx_kib: int | None = None
    nvlink_rx_kib: int | None = None
    ecc_enabled: bool = True
    ecc_corrected: int = 3
    ecc_uncorrected: int = 0
    remapped_rows: tuple[int, int, int, int] | None = (2, 0, 0, 0)
    compute_mode: int = 0
    persistence: int = 1
    gpm: bool = True
    #: NVML_GPM_METRIC_* number -> value the next GPM sample records
    gpm_metrics: dict[int, float] = field(default_factory=dict)
    mig: list[FakeMig] | None = None
    processes: list[FakeProcess] = field(default_factory=list)
    #: functions that answer NotSupported on this GPU
    unsupported: set[str] = field(default_factory=set)
    #: functions the driver's libnvidia-ml lacks (FunctionNotFound): an old driver
    not_in_driver: set[str] = field(default_factory=set)
    lost: bool = False
    #: the event types nvmlDeviceGetSupportedEventTypes reports (critical Xid
    #: errors, single- and double-bit ECC, power state changes, by default)
    event_types: int = 0x0000000000000001 | 0x2 | 0x4 | 0x8


def h100(**overrides: Any) -> FakeGpu:
    """Hopper: GPM, NVLink, HBM temperature, no fan."""
    gpu = FakeGpu(
        nvlink_states=[1] * 16 + [0, 0],
        nvlink_tx_kib=10_000,
        nvlink_rx_kib=20_000,
        gpm_metrics={
            real.NVML_GPM_METRIC_SM_UTIL: 96.0,
            real.NVML_GPM_METRIC_SM_OCCUPANCY: 14.0,
            real.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 93.0,
            real.NVML_GPM_METRIC_DRAM_BW_UTIL: 24.0,
            real.NVML_GPM_METRIC_FP16_UTIL: 1.0,
            real.NVML_GPM_METRIC_FP32_UTIL: 2.0,
            real.NVML_GPM_METRIC_FP64_UTIL: 0.0,
            real.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 10.0,
            real.NVML_GPM_METRIC_PCIE_RX_PER_SEC: 20.0,
            real.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: 100.0,
            real.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: 200.0,
        },
    )
    return _apply(gpu, overrides)


def a100(**overrides: Any) -> FakeGpu:
    """Ampere: no GPM (the query says unsupported), PCIe only, no memory temperature."""
    gpu = FakeGpu(
        name="NVIDIA A100-SXM4-40GB",
        uuid="GPU-11111111-1111-1111-1111-111111111111",
        bus_id="00000000:07:00.0",
        mem_total=40 * GIB,
        temp_mem=None,
        pcie_gen=4,
        pcie_gen_max=4,
        gpm=False,
        throttle=0x1,  # idle
    )
    return _apply(gpu, overrides)


def v100(**overrides: Any) -> FakeGpu:
    """Volta on an old driver: no clocks-event API, no memory-info v2, no row remapping."""
    gpu = FakeGpu(
        name="Tesla V100-SXM2-16GB",
        uuid="GPU-22222222-2222-2222-2222-222222222222",
        bus_id="00000000:08:00.0",
        mem_total=16 * GIB,
        mem_reserved=0,
        temp_mem=None,
        fan=None,
        pcie_gen=3,
        pcie_gen_max=3,
        pcie_tx_bytes=None,
        pcie_rx_bytes=None,
        gpm=False,
        remapped_rows=None,
        throttle=0x20 | 0x4,  # sw thermal + sw power cap
        unsupported={"nvmlDeviceGetRemappedRows"},
        not_in_driver={
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetMemoryInfo_v2",
            "nvmlGpmQueryDeviceSupport",
        },
    )
    return _apply(gpu, overrides)


def a100_mig(**overrides: Any) -> FakeGpu:
    """An A100 in MIG mode: two GPU instances, the first with two compute instances."""
    gpu = a100(
        uuid="GPU-33333333-3333-3333-3333-333333333333",
        mig=[
            FakeMig(1, "NVIDIA A100-SXM4-40GB MIG 3g.20gb", "MIG-aaaa", 5 * GIB, 20 * GIB, 14),
            FakeMig(1, "NVIDIA A100-SXM4-40GB MIG 3g.20gb", "MIG-aaab", 5 * GIB, 20 * GIB, 28),
            FakeMig(2, "NVIDIA A100-SXM4-40GB MIG 2g.10gb", "MIG-bbbb", 1 * GIB, 10 * GIB, 28),
        ],
        unsupported={"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetProcessUtilization"},
    )
    return _apply(gpu, overrides)


def _apply(gpu: FakeGpu, overrides: dict[str, Any]) -> FakeGpu:
    for key, value in overrides.items():
        if not hasattr(gpu, key):
            raise TypeError(f"FakeGpu has no field {key!r}")
        setattr(gpu, key, value)
    return gpu


def busy_node(pids: list[int], gpus: int = 8) -> list[FakeGpu]:
    """``gpus`` H100s sharing the processes ``pids`` evenly: the benches' node of
    many GPU processes (each with 0.25 GiB and its own %SM and %BW)."""
    return [
        h100(
            uuid=f"GPU-00000000-0000-0000-0000-{i:012d}",
            bus_id=f"00000000:{0x19 + i:02x}:00.0",
            processes=[
                FakeProcess(pid, used_gpu_memory=GIB // 4, sm_util=k % 100, mem_util=k % 37)
                for k, pid in enumerate(pids[i::gpus])
            ],
        )
        for i in range(gpus)
    ]


def churn(gpus: list[FakeGpu], step: int) -> None:
    """A tenth of the processes of ``gpus`` (which tenth: ``step``) get new %SM
    and %BW, as a busy node's do each second."""
    for gpu in gpus:
        for k, proc in enumerate(gpu.processes):
            if (k + step) % 10 == 0:
                proc.sm_util = (proc.sm_util or 0) * 7 % 101
                proc.mem_util = (proc.mem_util or 0) * 3 % 97
