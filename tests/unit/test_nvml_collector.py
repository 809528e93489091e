"""The NVML collector against a fake pynvml: decoding, cadence and failsafe behaviour."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from gputui.errors import NvmlUnavailable
from gputui.nvml import collector as nvml_module
from gputui.nvml.collector import GpuSample, NvmlCollector, probe
from gputui.nvml.fields import (
    CounterRate,
    cuda_version_string,
    decode_throttle_reasons,
)
from tests.helpers.fake_nvml import (
    DRIVER_NOT_LOADED,
    FUNCTION_NOT_FOUND,
    GIB,
    GPU_IS_LOST,
    INVALID_ARGUMENT,
    LIBRARY_NOT_FOUND,
    NO_PERMISSION,
    NOT_SUPPORTED,
    UNKNOWN,
    FakeGpu,
    FakeNvml,
    FakeProcess,
    a100,
    a100_mig,
    h100,
    real,
    v100,
)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make(
    devices: list[FakeGpu], clock: Clock | None = None, **kwargs: int
) -> tuple[FakeNvml, NvmlCollector]:
    fake = FakeNvml(devices)
    collector = NvmlCollector(fake, clock=clock or Clock(), **kwargs)
    return fake, collector


@pytest.fixture
def h100_rig(clock: Clock) -> Iterator[tuple[FakeNvml, NvmlCollector, Clock]]:
    fake, collector = make([h100(processes=[FakeProcess(4242, used_gpu_memory=3 * GIB)])], clock)
    yield fake, collector, clock
    collector.close()


# ------------------------------------------------------------------ decoding


def test_h100_sample_decodes_every_field(h100_rig: tuple[FakeNvml, NvmlCollector, Clock]) -> None:
    _, collector, _ = h100_rig
    sample = collector.sample()
    assert isinstance(sample, GpuSample)
    assert sample.error is None
    assert (sample.driver_version, sample.cuda_driver_version) == ("580.65.06", "13.0")
    assert sample.nvml_version == "13.580.65.06"
    (gpu,) = sample.devices
    assert (gpu.index, gpu.name, gpu.bus_id) == (0, "NVIDIA H100 80GB HBM3", "00000000:19:00.0")
    assert gpu.uuid.startswith("GPU-")
    assert (gpu.util_gpu_pct, gpu.util_mem_pct) == (97.0, 40.0)
    assert (gpu.mem_used_bytes, gpu.mem_total_bytes) == (10 * GIB, 80 * GIB)
    assert gpu.mem_reserved_bytes == 500 * 1024**2
    assert (gpu.bar1_used_bytes, gpu.bar1_total_bytes) == (2 * 1024**2, 128 * GIB)
    assert (gpu.temp_gpu_c, gpu.temp_mem_c, gpu.fan_pct) == (61.0, 70.0, None)
    assert (gpu.power_w, gpu.power_limit_w) == (350.0, 700.0)
    assert gpu.energy_j == pytest.approx(123_456.789)
    assert (gpu.clock_sm_mhz, gpu.clock_mem_mhz, gpu.clock_gfx_mhz) == (1980, 2619, 1980)
    assert (gpu.clock_sm_max_mhz, gpu.clock_mem_max_mhz, gpu.clock_gfx_max_mhz) == (
        1980,
        2619,
        1980,
    )
    assert gpu.pstate == 0
    assert gpu.throttle_reasons == ("sw_power_cap",)
    assert (gpu.pcie_gen, gpu.pcie_gen_max, gpu.pcie_width, gpu.pcie_width_max) == (5, 5, 16, 16)
    assert gpu.nvlink_links_active == 16
    assert (gpu.ecc_enabled, gpu.ecc_errors_corrected, gpu.ecc_errors_uncorrected) == (True, 3, 0)
    assert (gpu.remapped_rows_correctable, gpu.remapped_rows_uncorrectable) == (2, 0)
    assert (gpu.remapped_rows_pending, gpu.remapped_rows_failed) == (False, False)
    assert (gpu.mig_enabled, gpu.mig_instances) == (False, ())
    assert (gpu.compute_mode, gpu.persistence_mode) == ("default", True)
    assert gpu.gpm_supported is True
    assert gpu.lost is False


def test_throttle_reasons_decode_to_names() -> None:
    assert decode_throttle_reasons(0) == ()
    assert decode_throttle_reasons(real.nvmlClocksEventReasonSwPowerCap) == ("sw_power_cap",)
    every = decode_throttle_reasons(real.nvmlClocksEventReasonAll)
    assert every == (
        "gpu_idle",
        "applications_clocks_setting",
        "sw_power_cap",
        "hw_slowdown",
        "sync_boost",
        "sw_thermal_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
        "display_clock_setting",
    )


def test_cuda_version_string() -> None:
    assert cuda_version_string(13000) == "13.0"
    assert cuda_version_string(12080) == "12.8"
    assert cuda_version_string(None) is None


def test_counter_rate_ignores_a_counter_that_went_backwards() -> None:
    rate = CounterRate()
    assert rate.update(100, 1.0) is None
    assert rate.update(300, 3.0) == 100.0
    assert rate.update(50, 4.0) is None  # wrapped or reset
    assert rate.update(150, 5.0) == 100.0


def test_counter_rate_too_soon_keeps_the_baseline() -> None:
    rate = CounterRate(min_interval_s=0.5)
    assert rate.update(0, 0.0) is None
    assert rate.update(10, 0.1) is None
    assert rate.update(100, 1.0) == 100.0


# ------------------------------------------------------------ counters, GPM


def test_pcie_and_nvlink_rates_come_from_counter_deltas(clock: Clock) -> None:
    # Without GPM the byte counters are the only source of PCIe/NVLink rates.
    fake, collector = make([h100(gpm=False)], clock)
    gpu = fake.devices[0]
    first = collector.sample().devices[0]
    # primed at construction at the same instant: no time has passed, no rate yet
    assert first.pcie_tx_bytes_per_s is None
    assert first.nvlink_tx_bytes_per_s is None

    clock.t += 2.0
    assert gpu.pcie_tx_bytes is not None and gpu.pcie_rx_bytes is not None
    gpu.pcie_tx_bytes += 1_000_000_000
    gpu.pcie_rx_bytes += 4_000_000_000
    assert gpu.nvlink_tx_kib is not None
    gpu.nvlink_tx_kib += 2048  # KiB
    second = collector.sample().devices[0]
    assert second.pcie_tx_bytes_per_s == 500_000_000.0
    assert second.pcie_rx_bytes_per_s == 2_000_000_000.0
    assert second.nvlink_tx_bytes_per_s == 1024 * 1024.0
    assert second.nvlink_rx_bytes_per_s == 0.0
    assert "nvmlDeviceGetPcieThroughput" not in fake.missing_lookups


def test_first_sample_has_rates_since_construction(clock: Clock) -> None:
    fake, collector = make([h100()], clock)
    clock.t += 1.0
    fake.devices[0].pcie_tx_bytes = (fake.devices[0].pcie_tx_bytes or 0) + 300
    assert collector.sample().devices[0].pcie_tx_bytes_per_s == 300.0


def test_gpm_nan_becomes_none(clock: Clock) -> None:
    # Seen on an H100: DRAM bandwidth came back NaN over a short idle window.
    gpu = h100()
    gpu.gpm_metrics[real.NVML_GPM_METRIC_DRAM_BW_UTIL] = float("nan")
    _, collector = make([gpu], clock)
    clock.t += 1
    gpm = collector.sample().devices[0].gpm
    assert gpm is not None and gpm.dram_bw_util_pct is None
    assert gpm.sm_activity_pct == 96.0


def test_gpm_metrics_are_computed_between_consecutive_samples(
    h100_rig: tuple[FakeNvml, NvmlCollector, Clock],
) -> None:
    fake, collector, clock = h100_rig
    clock.t += 1
    gpm = collector.sample().devices[0].gpm
    assert gpm is not None
    assert gpm.sm_activity_pct == 96.0
    assert gpm.sm_occupancy_pct == 14.0
    assert gpm.tensor_activity_pct == 93.0
    assert gpm.dram_bw_util_pct == 24.0
    assert (gpm.fp16_activity_pct, gpm.fp32_activity_pct, gpm.fp64_activity_pct) == (1.0, 2.0, 0.0)
    assert gpm.pcie_tx_bytes_per_s == 10 * 1024**2
    assert gpm.nvlink_rx_bytes_per_s == 200 * 1024**2

    fake.devices[0].gpm_metrics[real.NVML_GPM_METRIC_SM_UTIL] = 12.5
    clock.t += 1
    gpm = collector.sample().devices[0].gpm
    assert gpm is not None and gpm.sm_activity_pct == 12.5
    clock.t += 1
    collector.sample()
    # each metrics call pairs the previous sample with the one just taken
    assert fake.gpm_pairs == [(1, 2), (2, 3), (3, 4)]
    # two buffers alternate: no allocation per sample
    assert fake.calls["nvmlGpmSampleAlloc"] == 2


def test_gpm_falls_back_for_missing_pcie_counters(clock: Clock) -> None:
    _fake, collector = make([h100(pcie_tx_bytes=None, pcie_rx_bytes=None)], clock)
    clock.t += 1
    gpu = collector.sample().devices[0]
    assert gpu.pcie_tx_bytes_per_s == 10 * 1024**2
    assert gpu.pcie_rx_bytes_per_s == 20 * 1024**2


def test_gpm_unsupported_on_older_gpus(clock: Clock) -> None:
    fake, collector = make([a100(), v100()], clock)
    for _ in range(3):
        sample = collector.sample()
    assert [d.gpm_supported for d in sample.devices] == [False, False]
    assert [d.gpm for d in sample.devices] == [None, None]
    assert fake.calls["nvmlGpmSampleGet"] == 0
    assert fake.calls["nvmlGpmMetricsGet"] == 0


def test_gpm_support_unknown_when_binding_lacks_it(clock: Clock) -> None:
    fake = FakeNvml([h100()])
    fake.remove("nvmlGpmQueryDeviceSupport")
    gpu = NvmlCollector(fake, clock=clock).sample().devices[0]
    assert gpu.gpm_supported is None
    assert gpu.gpm is None


def test_gpm_transient_failure_gives_none_then_recovers(
    h100_rig: tuple[FakeNvml, NvmlCollector, Clock],
) -> None:
    fake, collector, clock = h100_rig
    fake.fail("nvmlGpmSampleGet", UNKNOWN, times=1)
    clock.t += 1
    assert collector.sample().devices[0].gpm is None
    # the sample before the failure is still the baseline
    clock.t += 1
    assert collector.sample().devices[0].gpm is not None
    assert fake.gpm_pairs == [(1, 2)]


def test_gpm_too_soon_keeps_the_baseline(h100_rig: tuple[FakeNvml, NvmlCollector, Clock]) -> None:
    fake, collector, clock = h100_rig
    clock.t += 0.05
    # 50 ms after the baseline: GPM counters refresh every 100 ms, so no reading
    assert collector.sample().devices[0].gpm is None
    clock.t += 0.06  # 0.11 s after the baseline, which was kept
    measured = collector.sample().devices[0].gpm
    assert measured is not None
    assert fake.gpm_pairs == [(1, 2)]
    # too soon again: the last whole-window metrics, not N/A, and no new pair
    clock.t += 0.099
    assert collector.sample().devices[0].gpm == measured
    assert fake.gpm_pairs == [(1, 2)]


def test_close_frees_gpm_samples_and_shuts_down_once(
    h100_rig: tuple[FakeNvml, NvmlCollector, Clock],
) -> None:
    fake, collector, clock = h100_rig
    for _ in range(3):
        clock.t += 1
        collector.sample()
    assert fake.live_gpm_samples == 2
    collector.close()
    collector.close()
    assert fake.live_gpm_samples == 0
    assert (fake.init_count, fake.shutdown_count) == (1, 1)
    after = collector.sample()
    assert after.devices == () and after.error is not None


# ------------------------------------------------------------------ caching


def test_static_facts_are_read_once(h100_rig: tuple[FakeNvml, NvmlCollector, Clock]) -> None:
    fake, collector, _ = h100_rig
    for _ in range(10):
        collector.sample()
    assert fake.calls["nvmlDeviceGetName"] == 1
    assert fake.calls["nvmlDeviceGetUUID"] == 1
    assert fake.calls["nvmlDeviceGetPciInfo_v3"] == 1
    assert fake.calls["nvmlDeviceGetMaxClockInfo"] == 3
    assert fake.calls["nvmlDeviceGetMaxPcieLinkGeneration"] == 1
    assert fake.calls["nvmlDeviceGetEccMode"] == 1
    assert fake.calls["nvmlSystemGetDriverVersion"] == 1


def test_unsupported_query_is_not_asked_again(
    h100_rig: tuple[FakeNvml, NvmlCollector, Clock],
) -> None:
    fake, collector, _ = h100_rig
    for _ in range(5):
        assert collector.sample().devices[0].fan_pct is None
    assert fake.calls["nvmlDeviceGetFanSpeed"] == 1
    assert "fan" in collector.disabled_queries(0)


def test_slow_values_are_read_on_the_slow_cadence(clock: Clock) -> None:
    fake, collector = make([h100()], clock, slow_every=10)
    for _ in range(20):
        collector.sample()
    assert fake.calls["nvmlDeviceGetRemappedRows"] == 2
    assert fake.calls["nvmlDeviceGetTotalEccErrors"] == 4  # corrected + uncorrected, twice
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 20
    # measured at ~7 ms and ~0.6 ms per call on an H100: slow cadence only
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == 2
    assert fake.calls["nvmlDeviceGetBAR1MemoryInfo"] == 2
    # the link's width (~85 us a call) changes only when the link retrains; its
    # generation follows the power state and is read every time
    assert fake.calls["nvmlDeviceGetCurrPcieLinkWidth"] == 2
    assert fake.calls["nvmlDeviceGetCurrPcieLinkGeneration"] == 20


def test_the_pcie_width_read_on_the_slow_cadence_is_in_every_snapshot(clock: Clock) -> None:
    _fake, collector = make([h100()], clock, slow_every=10)
    widths = [collector.sample().devices[0].pcie_width for _ in range(12)]
    assert widths == [16] * 12


def test_gpm_devices_take_link_rates_from_gpm_and_skip_field_values(clock: Clock) -> None:
    fake, collector = make([h100()], clock, slow_every=10)
    collector.sample()
    before = fake.calls["nvmlDeviceGetFieldValues"]
    for _ in range(5):
        clock.t += 1.0
        device = collector.sample().devices[0]
        assert device.gpm is not None
        assert device.pcie_tx_bytes_per_s == device.gpm.pcie_tx_bytes_per_s
    assert fake.calls["nvmlDeviceGetFieldValues"] == before


def test_steady_state_call_count_is_small(h100_rig: tuple[FakeNvml, NvmlCollector, Clock]) -> None:
    fake, collector, _ = h100_rig
    collector.sample()
    collector.sample()
    before = sum(fake.calls.values())
    collector.sample()  # neither the slow nor the process-utilization cadence
    per_sample = sum(fake.calls.values()) - before
    # utilization, memory, temperature, power, 3 clocks, pstate, throttle,
    # the PCIe link's generation, 2 GPM, 2 process lists
    assert per_sample <= 15


# ------------------------------------------------------- fallbacks, failures


def test_old_driver_falls_back_to_older_functions(clock: Clock) -> None:
    fake, collector = make([v100()], clock)
    for _ in range(3):
        gpu = collector.sample().devices[0]
    assert gpu.throttle_reasons == ("sw_power_cap", "sw_thermal_slowdown")
    assert fake.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 1
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 3
    # v1 memory info: no reserved memory, but used and total
    assert (gpu.mem_used_bytes, gpu.mem_reserved_bytes) == (10 * GIB, None)
    assert gpu.remapped_rows_correctable is None
    assert gpu.pcie_tx_bytes_per_s is None
    assert gpu.temp_mem_c is None


def test_function_missing_from_pynvml_gives_none(clock: Clock) -> None:
    fake = FakeNvml([h100()])
    fake.remove("nvmlDeviceGetTotalEnergyConsumption")
    fake.remove("nvmlDeviceGetCurrentClocksEventReasons")
    collector = NvmlCollector(fake, clock=clock)
    gpu = collector.sample().devices[0]
    assert gpu.energy_j is None
    assert gpu.throttle_reasons == ("sw_power_cap",)  # through the older name
    assert gpu.power_w == 350.0


@pytest.mark.parametrize("code", [NOT_SUPPORTED, NO_PERMISSION, FUNCTION_NOT_FOUND])
def test_permanent_errors_give_none_and_stop_the_query(clock: Clock, code: int) -> None:
    fake = FakeNvml([h100()])
    fake.fail("nvmlDeviceGetPowerUsage", code)
    collector = NvmlCollector(fake, clock=clock)
    for _ in range(3):
        gpu = collector.sample().devices[0]
        assert gpu.power_w is None
        assert gpu.temp_gpu_c == 61.0
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 1


@pytest.mark.parametrize("code", [INVALID_ARGUMENT, UNKNOWN])
def test_transient_errors_give_none_once(clock: Clock, code: int) -> None:
    fake = FakeNvml([h100()])
    fake.fail("nvmlDeviceGetTemperature", code, times=1)
    collector = NvmlCollector(fake, clock=clock)
    assert collector.sample().devices[0].temp_gpu_c is None
    assert collector.sample().devices[0].temp_gpu_c == 61.0


def test_lost_gpu_keeps_identity_and_the_others_are_sampled(clock: Clock) -> None:
    fake, collector = make([h100(), a100()], clock)
    collector.sample()
    fake.fail("nvmlDeviceGetPowerUsage", GPU_IS_LOST, device=1)
    sample = collector.sample()
    healthy, lost = sample.devices
    assert healthy.lost is False and healthy.power_w == 350.0
    assert lost.lost is True
    assert (lost.index, lost.name, lost.uuid) == (1, "NVIDIA A100-SXM4-40GB", a100().uuid)
    assert lost.bus_id == "00000000:07:00.0"
    assert lost.power_w is None
    assert sample.error is not None
    assert "GPU 1" in sample.error and a100().uuid in sample.error and "lost" in sample.error
    # a lost GPU is not asked again, and stays reported
    calls = fake.calls["nvmlDeviceGetUtilizationRates"]
    again = collector.sample()
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == calls + 1
    assert again.devices[1].lost and again.error is not None


def test_gpu_lost_before_start_is_listed_as_lost(clock: Clock) -> None:
    _fake, collector = make([h100(), a100(lost=True)], clock)
    sample = collector.sample()
    assert [d.lost for d in sample.devices] == [False, True]
    assert sample.error is not None and "GPU 1" in sample.error


def test_gpu_without_permission_is_hidden(clock: Clock) -> None:
    fake = FakeNvml([h100(), a100()])
    fake.fail("nvmlDeviceGetHandleByIndex", NO_PERMISSION, times=1)
    sample = NvmlCollector(fake, clock=clock).sample()
    assert [d.name for d in sample.devices] == ["NVIDIA A100-SXM4-40GB"]
    assert sample.error is None


def test_unexpected_exception_is_reported_not_raised(
    h100_rig: tuple[FakeNvml, NvmlCollector, Clock], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, collector, _ = h100_rig

    def broken(handle: object) -> int:
        raise RuntimeError("boom")

    monkeypatch.setattr(fake, "nvmlDeviceGetPowerUsage", broken)
    sample = collector.sample()
    assert sample.devices[0].name == "NVIDIA H100 80GB HBM3"
    assert sample.error is not None and "boom" in sample.error


FAILING_CODES = [
    NOT_SUPPORTED,
    NO_PERMISSION,
    FUNCTION_NOT_FOUND,
    INVALID_ARGUMENT,
    UNKNOWN,
    GPU_IS_LOST,
]
DEVICE_FUNCTIONS = sorted(
    name
    for name in dir(FakeNvml)
    if name.startswith("nvml")
    and name not in ("nvmlInit", "nvmlShutdown", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex")
    and not name.startswith("nvmlSystem")
)


@pytest.mark.parametrize("function", DEVICE_FUNCTIONS)
def test_sample_never_raises_whatever_fails(clock: Clock, function: str) -> None:
    devices = [h100(processes=[FakeProcess(1), FakeProcess(2, kind="both")]), a100_mig()]
    for code in FAILING_CODES:
        fake = FakeNvml(devices=[d for d in devices])
        fake.fail(function, code)
        collector = NvmlCollector(fake, clock=clock)
        for _ in range(3):
            clock.t += 1
            sample = collector.sample()
            assert [d.index for d in sample.devices] == [0, 1]
            if function != "nvmlDeviceGetName":
                assert all(d.name.startswith("NVIDIA") for d in sample.devices)
        collector.close()
        if function != "nvmlGpmSampleFree":
            assert fake.live_gpm_samples == 0


# ---------------------------------------------------------------- processes


def test_processes_join_compute_and_graphics(clock: Clock) -> None:
    gpu = h100(
        processes=[
            FakeProcess(10, used_gpu_memory=2 * GIB, kind="compute"),
            FakeProcess(11, used_gpu_memory=None, kind="graphics", sm_util=None),
            FakeProcess(12, used_gpu_memory=GIB, kind="both", sm_util=70, mem_util=30),
        ]
    )
    _fake, collector = make([gpu], clock)
    processes = {p.pid: p for p in collector.sample().processes}
    assert processes[10].type == "compute" and processes[10].gpu_mem_bytes == 2 * GIB
    assert processes[11].type == "graphics" and processes[11].gpu_mem_bytes is None
    assert processes[12].type == "compute+graphics" and processes[12].gpu_mem_bytes == GIB
    assert (processes[10].sm_pct, processes[10].mem_bw_pct) == (50.0, 20.0)
    assert (processes[12].sm_pct, processes[12].mem_bw_pct) == (70.0, 30.0)
    # the query worked but had no sample for this pid: it did no work
    assert processes[11].sm_pct == 0.0
    assert {p.gpu_uuid for p in processes.values()} == {gpu.uuid}
    assert all(p.user is None and p.cmdline is None for p in processes.values())


def test_process_utilization_runs_on_its_own_cadence(clock: Clock) -> None:
    gpu = h100(processes=[FakeProcess(10, sm_util=40)])
    fake, collector = make([gpu], clock, process_util_every=5)
    seen = []
    for step in range(10):
        if step == 2:
            gpu.processes[0].sm_util = 90
        seen.append(collector.sample().processes[0].sm_pct)
    assert fake.calls["nvmlDeviceGetProcessUtilization"] == 2
    # reused between reads, refreshed on the 6th sample
    assert seen == [40.0] * 5 + [90.0] * 5


def test_process_utilization_without_new_samples_means_idle(clock: Clock) -> None:
    gpu = h100(processes=[FakeProcess(10, sm_util=40), FakeProcess(11, sm_util=None)])
    _, collector = make([gpu], clock)
    processes = {p.pid: p for p in collector.sample().processes}
    assert processes[10].sm_pct == 40.0
    # the query gave samples, none of this pid: it did no work
    assert (processes[11].sm_pct, processes[11].mem_bw_pct) == (0.0, 0.0)


def test_process_utilization_before_any_sample_is_not_measured(clock: Clock) -> None:
    """NVML's first read has no per-process sample yet: not 0% (a busy job read 0%
    on the first snapshot), but N/A, and the next sample reads again."""
    gpu = h100(processes=[FakeProcess(10, sm_util=None)])
    fake, collector = make([gpu], clock, process_util_every=5)
    (process,) = collector.sample().processes
    assert (process.sm_pct, process.mem_bw_pct) == (None, None)
    gpu.processes[0].sm_util = 80
    clock.t += 1
    (process,) = collector.sample().processes
    assert process.sm_pct == 80.0
    assert fake.calls["nvmlDeviceGetProcessUtilization"] == 2


def test_process_utilization_unsupported_gives_none(clock: Clock) -> None:
    gpu = h100(processes=[FakeProcess(10)], unsupported={"nvmlDeviceGetProcessUtilization"})
    _, collector = make([gpu], clock)
    (process,) = collector.sample().processes
    assert (process.sm_pct, process.mem_bw_pct) == (None, None)
    assert process.gpu_mem_bytes == GIB


def test_processes_on_two_gpus_give_two_rows(clock: Clock) -> None:
    _fake, collector = make(
        [h100(processes=[FakeProcess(5)]), a100(processes=[FakeProcess(5)])], clock
    )
    rows = collector.sample().processes
    assert sorted((p.gpu_index, p.pid) for p in rows) == [(0, 5), (1, 5)]
    assert len({p.key for p in rows}) == 2


# ---------------------------------------------------------------------- MIG


def test_mig_instances_per_gpu_instance(clock: Clock) -> None:
    gpu = a100_mig(processes=[FakeProcess(7, gpu_instance_id=1), FakeProcess(7, gpu_instance_id=2)])
    _, collector = make([gpu], clock)
    sample = collector.sample()
    device = sample.devices[0]
    assert device.mig_enabled is True
    assert device.util_gpu_pct is None  # NVML does not report it in MIG mode
    first, second = device.mig_instances
    assert (first.gpu_instance_id, first.sm_count) == (1, 42)  # two compute instances
    assert (first.mem_used_bytes, first.mem_total_bytes) == (5 * GIB, 20 * GIB)
    assert first.name is not None and first.name.endswith("3g.20gb")
    assert (second.gpu_instance_id, second.sm_count, second.uuid) == (2, 28, "MIG-bbbb")
    # one process on two GPU instances: one row, memory summed
    (process,) = sample.processes
    assert process.gpu_mem_bytes == 2 * GIB
    assert process.sm_pct is None


# -------------------------------------------------------------- start-up


def _single_line_with_demo_hint(message: str) -> None:
    assert "\n" not in message
    assert message.endswith("try 'gputui --demo'")


def test_library_not_found() -> None:
    fake = FakeNvml()
    fake.fail("nvmlInit", LIBRARY_NOT_FOUND)
    with pytest.raises(NvmlUnavailable) as caught:
        NvmlCollector(fake)
    assert str(caught.value) == (
        "no NVIDIA driver found: libnvidia-ml.so is missing; try 'gputui --demo'"
    )
    assert probe(fake) == str(caught.value)


def test_driver_not_loaded() -> None:
    fake = FakeNvml()
    fake.fail("nvmlInit", DRIVER_NOT_LOADED)
    with pytest.raises(NvmlUnavailable) as caught:
        NvmlCollector(fake)
    _single_line_with_demo_hint(str(caught.value))
    assert "driver is not loaded" in str(caught.value)


def test_other_init_failure() -> None:
    fake = FakeNvml()
    fake.fail("nvmlInit", UNKNOWN)
    with pytest.raises(NvmlUnavailable) as caught:
        NvmlCollector(fake)
    _single_line_with_demo_hint(str(caught.value))
    assert "NVML failed to initialise" in str(caught.value)


def test_pynvml_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(NvmlUnavailable) as caught:
        NvmlCollector()
    _single_line_with_demo_hint(str(caught.value))
    assert "nvidia-ml-py is not installed" in str(caught.value)
    assert probe() == str(caught.value)


def test_probe() -> None:
    fake = FakeNvml([h100()])
    assert probe(fake) is None
    assert fake.init_count == fake.shutdown_count == 1
    empty = probe(FakeNvml([]))
    assert empty is not None
    _single_line_with_demo_hint(empty)


def test_no_gpus_is_not_an_error() -> None:
    sample = NvmlCollector(FakeNvml([])).sample()
    assert sample.devices == () and sample.error is None


def test_real_pynvml_without_a_driver() -> None:
    """On a machine without libnvidia-ml the real binding fails cleanly."""
    if probe() is None:
        pytest.skip("this machine has a working NVIDIA driver")
    with pytest.raises(NvmlUnavailable) as caught:
        NvmlCollector()
    _single_line_with_demo_hint(str(caught.value))
    assert nvml_module.probe() == str(caught.value)
