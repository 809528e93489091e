"""Each monitor finding rule, positive and negative."""

from __future__ import annotations

import dataclasses

from gputui.analysis.monitor_findings import Finding, findings
from gputui.snapshot.model import (
    DeviceSnapshot,
    GpmMetrics,
    ProcessSnapshot,
    Snapshot,
    XidCount,
)

GIB = 2**30
UUID = "GPU-test-0"


def device(**kw: object) -> DeviceSnapshot:
    base: dict[str, object] = dict(
        index=0,
        name="NVIDIA H100 80GB HBM3",
        uuid=UUID,
        util_gpu_pct=95.0,
        mem_used_bytes=20 * GIB,
        mem_total_bytes=80 * GIB,
        power_w=400.0,
        power_limit_w=700.0,
        temp_gpu_c=60.0,
        throttle_reasons=(),
        gpm_supported=True,
        gpm=GpmMetrics(
            sm_activity_pct=90.0,
            sm_occupancy_pct=20.0,
            tensor_activity_pct=60.0,
            dram_bw_util_pct=30.0,
        ),
    )
    base.update(kw)
    return DeviceSnapshot(**base)  # type: ignore[arg-type]


def proc(type_: str = "compute", gpu: int = 0) -> ProcessSnapshot:
    return ProcessSnapshot(pid=1234, gpu_index=gpu, gpu_uuid=UUID, type=type_)


def snap(dev: DeviceSnapshot, procs: tuple[ProcessSnapshot, ...] = (proc(),)) -> Snapshot:
    return Snapshot(timestamp_s=0.0, devices=(dev,), processes=procs)


def rules(items: list[Finding]) -> set[str]:
    return {f.rule for f in items}


def test_healthy_gpu_has_no_findings() -> None:
    assert findings(snap(device())) == []


def test_low_utilization_with_compute_process() -> None:
    items = findings(snap(device(util_gpu_pct=30.0)))
    low = [f for f in items if f.rule == "device.low_util"]
    assert len(low) == 1
    assert low[0].severity == "warn" and low[0].gpu_index == 0
    assert "30%" in low[0].evidence
    assert "DataLoader" in low[0].fix and "pin_memory" in low[0].fix


def test_low_utilization_needs_a_compute_process() -> None:
    assert "device.low_util" not in rules(findings(snap(device(util_gpu_pct=10.0), procs=())))
    graphics_only = (proc("graphics"),)
    assert "device.low_util" not in rules(findings(snap(device(util_gpu_pct=10.0), graphics_only)))


def test_low_utilization_threshold_is_50_percent() -> None:
    assert "device.low_util" not in rules(findings(snap(device(util_gpu_pct=50.0))))
    assert "device.low_util" in rules(findings(snap(device(util_gpu_pct=49.0))))


def test_low_utilization_uses_the_history_average() -> None:
    busy = [snap(device(util_gpu_pct=95.0)) for _ in range(9)]
    one_dip = snap(device(util_gpu_pct=5.0))
    assert "device.low_util" not in rules(findings(one_dip, [*busy, one_dip]))
    idle = [snap(device(util_gpu_pct=5.0)) for _ in range(9)]
    assert "device.low_util" in rules(findings(one_dip, idle))


def test_power_cap_throttling_is_a_warning() -> None:
    items = findings(snap(device(throttle_reasons=("sw_power_cap",), power_w=699.0)))
    throttle = [f for f in items if f.rule == "device.throttled"]
    assert len(throttle) == 1 and throttle[0].severity == "warn"
    assert "power cap" in throttle[0].evidence and "699/700 W" in throttle[0].evidence


def test_hardware_and_thermal_throttling_is_critical() -> None:
    for reason in ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"):
        items = findings(snap(device(throttle_reasons=(reason,))))
        assert [f.severity for f in items if f.rule == "device.throttled"] == ["crit"], reason
    thermal = findings(snap(device(throttle_reasons=("sw_thermal_slowdown",))))
    assert any(f.rule == "device.throttled" and "cooling" in f.fix for f in thermal)


def test_harmless_clock_reasons_are_not_throttling() -> None:
    for reasons in ((), ("gpu_idle",), ("applications_clocks_setting",), None):
        assert "device.throttled" not in rules(findings(snap(device(throttle_reasons=reasons))))


def test_memory_nearly_full_above_90_percent() -> None:
    items = findings(snap(device(mem_used_bytes=int(76 * GIB))))  # 95%
    full = [f for f in items if f.rule == "device.memory_full"]
    assert len(full) == 1 and "95%" in full[0].evidence


def test_memory_at_90_percent_or_unknown_is_fine() -> None:
    assert "device.memory_full" not in rules(findings(snap(device(mem_used_bytes=72 * GIB))))
    assert "device.memory_full" not in rules(findings(snap(device(mem_used_bytes=None))))
    assert "device.memory_full" not in rules(findings(snap(device(mem_total_bytes=0))))


def test_busy_without_tensor_work_on_gpm_gpu() -> None:
    gpm = GpmMetrics(
        sm_activity_pct=97.0, tensor_activity_pct=4.0, dram_bw_util_pct=30.0, fp32_activity_pct=60.0
    )
    items = findings(snap(device(util_gpu_pct=100.0, gpm=gpm)))
    assert items[0].rule == "device.no_tensor_work"  # the headline finding comes first
    assert "util 100%" in items[0].evidence and "tensor cores 4%" in items[0].evidence
    assert "autocast" in items[0].fix and "TF32" in items[0].fix


def test_tensor_rule_negatives() -> None:
    gpm_low = GpmMetrics(sm_activity_pct=97.0, tensor_activity_pct=4.0)
    # not busy
    assert "device.no_tensor_work" not in rules(
        findings(snap(device(util_gpu_pct=70.0, gpm=gpm_low)))
    )
    # tensor cores in use
    gpm_ok = GpmMetrics(sm_activity_pct=97.0, tensor_activity_pct=5.0)
    assert "device.no_tensor_work" not in rules(
        findings(snap(device(util_gpu_pct=100.0, gpm=gpm_ok)))
    )
    # an older GPU without GPM: no claim either way
    old = device(util_gpu_pct=100.0, gpm_supported=False, gpm=None)
    assert "device.no_tensor_work" not in rules(findings(snap(old)))


def test_memory_bound_hint() -> None:
    gpm = GpmMetrics(sm_activity_pct=40.0, tensor_activity_pct=0.0, dram_bw_util_pct=78.0)
    items = findings(snap(device(util_gpu_pct=70.0, gpm=gpm)))
    assert [f.severity for f in items if f.rule == "device.memory_bound"] == ["warn"]
    gemm = dataclasses.replace(gpm, tensor_activity_pct=60.0)
    assert "device.memory_bound" not in rules(findings(snap(device(util_gpu_pct=70.0, gpm=gemm))))


def test_an_elementwise_job_reads_memory_bound_not_no_tensor_work() -> None:
    """DRAM 88%, SM 99%, tensor cores idle, FP32 pipes busy: an elementwise chain
    is bound by memory bandwidth; the tensor cores have nothing to do with it."""
    gpm = GpmMetrics(
        sm_activity_pct=99.0, tensor_activity_pct=0.0, dram_bw_util_pct=88.0, fp32_activity_pct=35.0
    )
    said = rules(findings(snap(device(util_gpu_pct=100.0, gpm=gpm))))
    assert "device.memory_bound" in said and "device.no_tensor_work" not in said


def test_ecc_and_lost_gpu_are_critical() -> None:
    items = findings(snap(device(ecc_errors_uncorrected=2)))
    assert any(f.rule == "device.ecc" and f.severity == "crit" for f in items)
    assert "device.ecc" not in rules(findings(snap(device(ecc_errors_corrected=5))))
    lost = findings(snap(device(lost=True)))
    assert [f.rule for f in lost] == ["device.lost"]


def test_findings_are_sorted_most_severe_first() -> None:
    dev = device(
        util_gpu_pct=100.0,
        throttle_reasons=("hw_slowdown",),
        gpm=GpmMetrics(sm_activity_pct=40.0, tensor_activity_pct=0.0, dram_bw_util_pct=80.0),
        mem_used_bytes=int(76 * GIB),
    )
    severities = [f.severity for f in findings(snap(dev))]
    order = {"crit": 0, "warn": 1, "info": 2}
    assert severities == sorted(severities, key=order.__getitem__)
    assert severities[0] == "crit" and severities[-1] == "warn"


#: one snapshot that fires each device rule (docs/analyzer.md shows what it says)
DEVICE_CASES = {
    "device.lost": lambda: snap(device(lost=True)),
    "device.ecc": lambda: snap(device(ecc_errors_uncorrected=2)),
    # counted, its events not kept: the doc's row carries no local clock time
    "device.xid": lambda: snap(device(xid_counts=(XidCount(79, 2),))),
    "device.no_tensor_work": lambda: snap(
        device(
            util_gpu_pct=100.0,
            gpm=GpmMetrics(
                sm_activity_pct=97.0,
                tensor_activity_pct=2.0,
                dram_bw_util_pct=30.0,
                fp32_activity_pct=70.0,
            ),
        )
    ),
    "device.low_util": lambda: snap(device(util_gpu_pct=30.0)),
    "device.memory_full": lambda: snap(device(mem_used_bytes=int(76 * GIB))),
    "device.throttled": lambda: snap(device(throttle_reasons=("sw_power_cap",), power_w=699.0)),
    "device.memory_bound": lambda: snap(
        device(
            util_gpu_pct=70.0,
            gpm=GpmMetrics(sm_activity_pct=40.0, tensor_activity_pct=0.0, dram_bw_util_pct=78.0),
        )
    ),
}


def test_every_device_rule_has_a_case_that_fires_it() -> None:
    from gputui.analysis.registry import REGISTRY

    device_rules = {r for r, rule in REGISTRY.items() if rule.scope == "device"}
    assert set(DEVICE_CASES) == device_rules
    for rule_id, case in DEVICE_CASES.items():
        assert rule_id in rules(findings(case())), rule_id
