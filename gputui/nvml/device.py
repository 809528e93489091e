"""One GPU as the NVML collector sees it: handle, cached facts, failsafe reads.

Every NVML call goes through :meth:`DeviceReader.call`, which turns the ways a
query can fail into one of three outcomes:

* the query can never work here (NotSupported, NoPermission, FunctionNotFound,
  a function missing from an older pynvml): ``None`` now, and the query is
  never made again on this device, so steady-state sampling stays cheap;
* the device is gone (GpuIsLost, ResetRequired, GpuNotFound): :class:`DeviceLost`
  propagates to the collector, which marks the device lost and samples the rest;
* anything else NVML reports (Unknown, InvalidArgument, Timeout, ...): ``None``
  for this sample only.

A query may list alternatives (the newer API first, the older one after): the
first that works is remembered and used from then on.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any

from gputui.nvml.fields import (
    ALL_LINKS_SCOPE,
    GPM_METRICS,
    KIB,
    MIN_GPM_INTERVAL_S,
    MIN_RATE_INTERVAL_S,
    NVLINK_UP_STATES,
    PSTATE_UNKNOWN,
    CounterRate,
    ErrorCodes,
    as_text,
    compute_mode_name,
    decode_throttle_reasons,
    field_number,
    latest_process_util,
    memory_by_pid,
    to_float,
    to_int,
)
from gputui.nvml.procs import DeviceProcesses, list_queries, read_mig
from gputui.snapshot.model import DeviceSnapshot, GpmMetrics, MigInstance, ProcessSnapshot

Query = Callable[[], Any]

#: NVML_ERROR_NOT_FOUND: e.g. no process-utilization samples since the timestamp
_NOT_FOUND = 6


class DeviceLost(Exception):
    """The device stopped answering; ``reason`` completes "GPU n (uuid) ..."."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class DeviceReader:
    """Reads one GPU.  Not thread-safe: the collector serialises calls."""

    def __init__(
        self,
        nvml: Any,
        errors: ErrorCodes,
        index: int,
        handle: Any,
        skip: frozenset[str] = frozenset(),
    ) -> None:
        self.nvml = nvml
        self.errors = errors
        self.index = index
        self.handle = handle
        self.name = "N/A"
        self.uuid = f"GPU-N/A-{index}"
        self.bus_id: str | None = None
        self.lost_reason: str | None = None
        #: queries that can never work on this device
        self.disabled: set[str] = set()
        #: queries not to make (values nobody reads here): None, never disabled
        self.skip = skip
        #: query -> index of the alternative that worked
        self._choice: dict[str, int] = {}
        self._static: dict[str, Any] = {}
        self._slow: dict[str, Any] = {}
        self._static_done = False
        # cumulative counters read through nvmlDeviceGetFieldValues
        self._fields: list[tuple[str, int | tuple[int, int]]] = []
        self._rates: dict[str, CounterRate] = {}
        # GPM: the previous sample, a spare buffer, one reusable metrics request
        self.gpm_supported: bool | None = None
        self._last_fields: dict[str, float | None] | None = None
        self._gpm_prev: Any = None
        self._gpm_spare: Any = None
        self._gpm_request: Any = None
        self._gpm_prev_t = 0.0
        #: the last metrics over a whole window, repeated by a reading that came too
        #: soon (a poller at 0.1 s lands a hair under it about half the time)
        self._gpm_last: GpmMetrics | None = None
        # process utilization: last NVML timestamp seen and the last values
        self._proc_util_ts = 0
        self._proc_util: dict[int, tuple[float, float]] | None = None
        #: the processes of the last read (unchanged ones are reused)
        self._processes = DeviceProcesses()
        #: the process lists' array sizes, kept between reads (one NVML call a list)
        self._list_sizes: dict[str, int] = {}
        self._mig_static: dict[str, tuple[int | None, str | None, int | None]] = {}
        #: the GPU's Xid errors, their counts and where they are watched, as its
        #: snapshots hold them: ``xid_errors``, ``xid_counts``, ``xid_sources``
        #: (a dict made anew by the collector when they change)
        self.xid_fields: dict[str, Any] = {}
        if handle is not None:
            self._load_identity()

    # ------------------------------------------------------------------ calls

    def call(self, key: str, *alternatives: Query) -> Any:
        """The first alternative's result that works, None when none does now."""
        if key in self.disabled or key in self.skip:
            return None
        start = self._choice.get(key, 0)
        for position in range(start, len(alternatives)):
            try:
                result = alternatives[position]()
            except AttributeError:
                # this pynvml has no such function (or constant): try the older API
                self._choice[key] = position + 1
                continue
            except self.errors.base as exc:
                code = self.errors.code_of(exc)
                if code in self.errors.lost:
                    raise DeviceLost(self.errors.lost[code]) from exc
                if code in self.errors.permanent:
                    self._choice[key] = position + 1
                    continue
                return None
            except getattr(self.nvml, "NVMLLibraryMismatchError", _Never):
                self._choice[key] = position + 1
                continue
            return result
        self.disabled.add(key)
        return None

    def _bound(self, function: str, *args: Any) -> Query:
        """A query calling ``nvml.<function>(*args)``, looked up when it runs (so a
        function missing from this pynvml is caught by :meth:`call`)."""
        nvml = self.nvml
        return lambda: getattr(nvml, function)(*args)

    def _call_allow_not_found(self, key: str, query: Query, empty: Any) -> Any:
        """Like :meth:`call` but NVML's NotFound means "nothing", not "unavailable"."""
        if key in self.disabled or key in self.skip:
            return None
        try:
            return query()
        except AttributeError:
            self.disabled.add(key)
        except self.errors.base as exc:
            code = self.errors.code_of(exc)
            if code in self.errors.lost:
                raise DeviceLost(self.errors.lost[code]) from exc
            if code == _NOT_FOUND or code == 0:
                # pynvml raises NVMLError(SUCCESS) when the buffer was empty
                return empty
            if code in self.errors.permanent:
                self.disabled.add(key)
        return None

    # --------------------------------------------------------------- identity

    def _load_identity(self) -> None:
        nv, h = self.nvml, self.handle
        try:
            # kept as each arrives: a device lost half-way still shows what was read
            self.name = as_text(self.call("name", lambda: nv.nvmlDeviceGetName(h))) or self.name
            self.uuid = as_text(self.call("uuid", lambda: nv.nvmlDeviceGetUUID(h))) or self.uuid
            pci = self.call(
                "pci", lambda: nv.nvmlDeviceGetPciInfo_v3(h), lambda: nv.nvmlDeviceGetPciInfo(h)
            )
            self.bus_id = as_text(getattr(pci, "busId", None)) if pci is not None else None
        except DeviceLost as lost:
            self.lost_reason = lost.reason

    def _load_static(self) -> None:
        """Facts that do not change while the driver is loaded: read once."""
        nv, h, s = self.nvml, self.handle, self._static
        for key, clock, default in (
            ("sm", "NVML_CLOCK_SM", 1),
            ("mem", "NVML_CLOCK_MEM", 2),
            ("gfx", "NVML_CLOCK_GRAPHICS", 0),
        ):
            s[f"clock_{key}_max"] = self.call(
                f"max_clock_{key}",
                self._bound("nvmlDeviceGetMaxClockInfo", h, getattr(nv, clock, default)),
            )
        s["pcie_gen_max"] = self.call(
            "pcie_gen_max", lambda: nv.nvmlDeviceGetMaxPcieLinkGeneration(h)
        )
        s["pcie_width_max"] = self.call(
            "pcie_width_max", lambda: nv.nvmlDeviceGetMaxPcieLinkWidth(h)
        )
        # ECC and MIG modes change only after a reboot / GPU reset
        ecc = self.call("ecc_mode", lambda: nv.nvmlDeviceGetEccMode(h))
        s["ecc_enabled"] = bool(ecc[0]) if ecc is not None else None
        mig = self.call("mig_mode", lambda: nv.nvmlDeviceGetMigMode(h))
        s["mig_enabled"] = (mig[0] == getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1)) if mig else None
        s["mig_max"] = (
            self.call("mig_max", lambda: nv.nvmlDeviceGetMaxMigDeviceCount(h))
            if s["mig_enabled"]
            else 0
        )
        support = self.call("gpm_support", lambda: nv.nvmlGpmQueryDeviceSupport(h))
        if support is not None:
            self.gpm_supported = bool(support.isSupportedDevice)
        elif "gpm_support" in self.disabled:
            # NotSupported means "no GPM here"; a missing function means "cannot tell"
            self.gpm_supported = None if not hasattr(nv, "nvmlGpmQueryDeviceSupport") else False
        s["nvlink_count"] = self._read_nvlink_count()
        self._fields = self._field_batch()
        self._static_done = True

    def _read_nvlink_count(self) -> int | None:
        field = getattr(self.nvml, "NVML_FI_DEV_NVLINK_LINK_COUNT", None)
        if field is None:
            return None
        values = self.call(
            "nvlink_count", lambda: self.nvml.nvmlDeviceGetFieldValues(self.handle, [field])
        )
        if values is None:
            return None
        count = field_number(values[0])
        return int(count) if count is not None else None

    def _field_batch(self) -> list[tuple[str, int | tuple[int, int]]]:
        """Cumulative counters and gauges read with one nvmlDeviceGetFieldValues call."""
        nv = self.nvml
        wanted: list[tuple[str, str, int | None]] = [
            ("pcie_tx", "NVML_FI_DEV_PCIE_COUNT_TX_BYTES", None),
            ("pcie_rx", "NVML_FI_DEV_PCIE_COUNT_RX_BYTES", None),
            ("temp_mem", "NVML_FI_DEV_MEMORY_TEMP", None),
        ]
        if self._static.get("nvlink_count"):
            wanted += [
                ("nvlink_tx", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", ALL_LINKS_SCOPE),
                ("nvlink_rx", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", ALL_LINKS_SCOPE),
            ]
        batch: list[tuple[str, int | tuple[int, int]]] = []
        for key, constant, scope in wanted:
            field_id = getattr(nv, constant, None)
            if isinstance(field_id, int):
                batch.append((key, field_id if scope is None else (field_id, scope)))
        return batch

    # ---------------------------------------------------------------- priming

    def prime(self, now: float) -> None:
        """Take the first counter and GPM readings so the first sample has rates."""
        if self.lost_reason is not None:
            return
        try:
            if not self._static_done:
                self._load_static()
            self._read_fields(now)
            self._read_gpm(now)
        except DeviceLost as lost:
            self.lost_reason = lost.reason

    # ---------------------------------------------------------------- sample

    def sample(
        self, now: float, slow: bool, process_util: bool
    ) -> tuple[DeviceSnapshot, list[ProcessSnapshot]]:
        """One snapshot of this device and its processes; raises DeviceLost."""
        if self.lost_reason is not None:
            raise DeviceLost(self.lost_reason)
        if not self._static_done:
            self._load_static()
        nv, h, s = self.nvml, self.handle, self._static
        if slow or not self._slow:
            self._read_slow()
        slow_values = self._slow

        util = self.call("util", lambda: nv.nvmlDeviceGetUtilizationRates(h))
        mem = self.call(
            "memory",
            lambda: nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2),
            lambda: nv.nvmlDeviceGetMemoryInfo(h),
        )
        bar1 = slow_values.get("bar1")
        temp = self.call(
            "temp",
            lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
            lambda: nv.nvmlDeviceGetTemperatureV(h, nv.NVML_TEMPERATURE_GPU),
        )
        fan = self.call("fan", lambda: nv.nvmlDeviceGetFanSpeed(h))
        power_mw = self.call("power", lambda: nv.nvmlDeviceGetPowerUsage(h))
        energy_mj = slow_values.get("energy_mj")
        clock_sm, clock_mem, clock_gfx = self._read_clocks()
        pstate = self.call("pstate", lambda: nv.nvmlDeviceGetPerformanceState(h))
        reasons = self.call(
            "throttle",
            lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h),
            lambda: nv.nvmlDeviceGetCurrentClocksThrottleReasons(h),
        )
        pcie_gen = self.call("pcie_gen", lambda: nv.nvmlDeviceGetCurrPcieLinkGeneration(h))
        pcie_width = slow_values.get("pcie_width")
        # The field-values call costs ~1 ms on an H100.  Where GPM measures the same
        # PCIe/NVLink traffic, read the fields (memory temperature) on the slow cadence.
        if slow or not self.gpm_supported or self._last_fields is None:
            self._last_fields = self._read_fields(now)
        fields = self._last_fields
        gpm = self._read_gpm(now)
        mig_instances = self._read_mig() if s.get("mig_enabled") else ()
        processes = self._read_processes(process_util)

        pcie_tx, pcie_rx, nvlink_tx, nvlink_rx = self._traffic(fields, gpm, slow)

        device = DeviceSnapshot(
            index=self.index,
            name=self.name,
            uuid=self.uuid,
            bus_id=self.bus_id,
            util_gpu_pct=to_float(getattr(util, "gpu", None)),
            util_mem_pct=to_float(getattr(util, "memory", None)),
            mem_used_bytes=to_int(getattr(mem, "used", None)),
            mem_total_bytes=to_int(getattr(mem, "total", None)),
            mem_reserved_bytes=to_int(getattr(mem, "reserved", None)),
            bar1_used_bytes=to_int(getattr(bar1, "bar1Used", None)),
            bar1_total_bytes=to_int(getattr(bar1, "bar1Total", None)),
            temp_gpu_c=to_float(temp),
            temp_mem_c=to_float(fields.get("temp_mem")),
            fan_pct=to_float(fan),
            power_w=power_mw / 1000.0 if power_mw is not None else None,
            power_limit_w=slow_values.get("power_limit_w"),
            energy_j=energy_mj / 1000.0 if energy_mj is not None else None,
            clock_sm_mhz=clock_sm,
            clock_mem_mhz=clock_mem,
            clock_gfx_mhz=clock_gfx,
            clock_sm_max_mhz=to_int(s.get("clock_sm_max")),
            clock_mem_max_mhz=to_int(s.get("clock_mem_max")),
            clock_gfx_max_mhz=to_int(s.get("clock_gfx_max")),
            pstate=pstate if pstate is not None and pstate != PSTATE_UNKNOWN else None,
            throttle_reasons=decode_throttle_reasons(reasons) if reasons is not None else None,
            pcie_gen=to_int(pcie_gen),
            pcie_gen_max=to_int(s.get("pcie_gen_max")),
            pcie_width=to_int(pcie_width),
            pcie_width_max=to_int(s.get("pcie_width_max")),
            pcie_tx_bytes_per_s=pcie_tx,
            pcie_rx_bytes_per_s=pcie_rx,
            nvlink_links_active=slow_values.get("nvlink_active"),
            nvlink_tx_bytes_per_s=nvlink_tx,
            nvlink_rx_bytes_per_s=nvlink_rx,
            ecc_enabled=s.get("ecc_enabled"),
            ecc_errors_corrected=slow_values.get("ecc_corrected"),
            ecc_errors_uncorrected=slow_values.get("ecc_uncorrected"),
            remapped_rows_correctable=slow_values.get("remap_correctable"),
            remapped_rows_uncorrectable=slow_values.get("remap_uncorrectable"),
            remapped_rows_pending=slow_values.get("remap_pending"),
            remapped_rows_failed=slow_values.get("remap_failed"),
            mig_enabled=s.get("mig_enabled"),
            mig_instances=mig_instances,
            compute_mode=slow_values.get("compute_mode"),
            persistence_mode=slow_values.get("persistence_mode"),
            gpm_supported=self.gpm_supported,
            gpm=gpm,
            **self.xid_fields,
        )
        return device, processes

    def _read_clocks(self) -> tuple[int | None, int | None, int | None]:
        """The SM, memory and graphics clocks now, in MHz."""
        nv, h = self.nvml, self.handle
        clock_sm = self.call("clock_sm", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
        clock_mem = self.call("clock_mem", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM))
        clock_gfx = self.call(
            "clock_gfx", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_GRAPHICS)
        )
        return to_int(clock_sm), to_int(clock_mem), to_int(clock_gfx)

    def _traffic(
        self, fields: dict[str, Any], gpm: GpmMetrics | None, slow: bool
    ) -> tuple[float | None, float | None, float | None, float | None]:
        """PCIe TX, RX and NVLink TX, RX in bytes per second: the byte counters'
        rates, or GPM's where it measures the same traffic."""
        pcie_tx = fields.get("pcie_tx")
        pcie_rx = fields.get("pcie_rx")
        nvlink_tx = fields.get("nvlink_tx")
        nvlink_rx = fields.get("nvlink_rx")
        if gpm is not None:
            # GPM measures the same traffic where the byte counters are unsupported
            # (not merely without a baseline yet: one source per device keeps graphs honest)
            if "pcie_tx" not in fields or not slow:
                pcie_tx, pcie_rx = gpm.pcie_tx_bytes_per_s, gpm.pcie_rx_bytes_per_s
            if ("nvlink_tx" not in fields or not slow) and self._static.get("nvlink_count"):
                nvlink_tx, nvlink_rx = gpm.nvlink_tx_bytes_per_s, gpm.nvlink_rx_bytes_per_s
        return pcie_tx, pcie_rx, nvlink_tx, nvlink_rx

    def lost_snapshot(self) -> DeviceSnapshot:
        return self.identity_snapshot(lost=True)

    def identity_snapshot(self, lost: bool = False) -> DeviceSnapshot:
        """The GPU's identity and Xid errors alone (``lost``: it stopped answering)."""
        return DeviceSnapshot(
            index=self.index,
            name=self.name,
            uuid=self.uuid,
            bus_id=self.bus_id,
            lost=lost,
            **self.xid_fields,
        )

    # ------------------------------------------------------------ slow reads

    def _read_slow(self) -> None:
        """Values that change rarely: read on the slow cadence, reused in between."""
        nv, h, s = self.nvml, self.handle, self._slow
        limit = self.call(
            "power_limit",
            lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h),
            lambda: nv.nvmlDeviceGetPowerManagementLimit(h),
        )
        s["power_limit_w"] = limit / 1000.0 if limit is not None else None
        s["compute_mode"] = compute_mode_name(
            self.call("compute_mode", lambda: nv.nvmlDeviceGetComputeMode(h))
        )
        persistence = self.call("persistence", lambda: nv.nvmlDeviceGetPersistenceMode(h))
        s["persistence_mode"] = bool(persistence) if persistence is not None else None
        if self._static.get("ecc_enabled"):
            s["ecc_corrected"] = self._ecc_count("NVML_MEMORY_ERROR_TYPE_CORRECTED")
            s["ecc_uncorrected"] = self._ecc_count("NVML_MEMORY_ERROR_TYPE_UNCORRECTED")
        rows = self.call("remapped_rows", lambda: nv.nvmlDeviceGetRemappedRows(h))
        if rows is not None:
            correctable, uncorrectable, pending, failed = rows
            s["remap_correctable"] = int(correctable)
            s["remap_uncorrectable"] = int(uncorrectable)
            s["remap_pending"] = bool(pending)
            s["remap_failed"] = bool(failed)
        s["nvlink_active"] = self._read_nvlink_active()
        # The link's width changes only when it retrains (a fault, a reset); reading it
        # took ~85 us of CPU against ~6 us for its generation, which follows power
        # states and is read at every sample (H100, driver 580).
        s["pcie_width"] = self.call("pcie_width", lambda: nv.nvmlDeviceGetCurrPcieLinkWidth(h))
        # Measured on an H100 (driver 580): the energy counter takes ~7 ms and BAR1
        # ~0.6 ms per call, too slow for every sample; both change slowly.
        s["bar1"] = self.call("bar1", lambda: nv.nvmlDeviceGetBAR1MemoryInfo(h))
        s["energy_mj"] = self.call("energy", lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h))

    def _ecc_count(self, error_type: str) -> int | None:
        nv, h = self.nvml, self.handle
        count = self.call(
            f"ecc_{error_type}",
            lambda: nv.nvmlDeviceGetTotalEccErrors(
                h, getattr(nv, error_type), nv.NVML_VOLATILE_ECC
            ),
        )
        return to_int(count)

    def _read_nvlink_active(self) -> int | None:
        count = self._static.get("nvlink_count")
        if not count:
            return None
        nv, h = self.nvml, self.handle
        state_field = getattr(nv, "NVML_FI_DEV_NVLINK_GET_STATE", None)
        if isinstance(state_field, int) and "nvlink_state_fields" not in self.disabled:
            values = self.call(
                "nvlink_state_fields",
                lambda: nv.nvmlDeviceGetFieldValues(
                    h, [(state_field, link) for link in range(count)]
                ),
            )
            if values is not None:
                states = [field_number(values[i]) for i in range(count)]
                if any(state is not None for state in states):
                    return sum(1 for state in states if state in NVLINK_UP_STATES)
                self.disabled.add("nvlink_state_fields")
        # older drivers: one call per link
        active = 0
        for link in range(count):
            state = self.call("nvlink_state", self._bound("nvmlDeviceGetNvLinkState", h, link))
            if state is None:
                return None
            active += 1 if state == 1 else 0
        return active

    # ------------------------------------------------------ counters and GPM

    def _read_fields(self, now: float) -> dict[str, float | None]:
        """Gauges as read; cumulative counters turned into per-second rates."""
        if not self._fields:
            return {}
        nv, h = self.nvml, self.handle
        ids = [field_id for _, field_id in self._fields]
        values = self.call("fields", lambda: nv.nvmlDeviceGetFieldValues(h, ids))
        if values is None:
            return {}
        out: dict[str, float | None] = {}
        dropped: list[str] = []
        for position, (key, _) in enumerate(self._fields):
            value = values[position]
            number = field_number(value)
            if number is None and value.nvmlReturn in self.errors.permanent:
                dropped.append(key)
            if key == "temp_mem":
                out[key] = number
                continue
            scale = KIB if key.startswith("nvlink") else 1
            rate = self._rates.get(key)
            if rate is None:
                rate = self._rates[key] = CounterRate(MIN_RATE_INTERVAL_S)
            out[key] = rate.update(number, now, scale)
        if dropped:
            self._fields = [entry for entry in self._fields if entry[0] not in dropped]
        return out

    def _read_gpm(self, now: float) -> GpmMetrics | None:
        """Metrics between the previous GPM sample and one taken now."""
        if not self.gpm_supported:
            return None
        if self._gpm_prev is not None and now - self._gpm_prev_t < MIN_GPM_INTERVAL_S:
            # too soon after the baseline to mean anything: keep the baseline
            return self._gpm_last
        nv, h = self.nvml, self.handle
        sample = self._gpm_spare
        if sample is None:
            sample = self.call("gpm_alloc", lambda: nv.nvmlGpmSampleAlloc())
            if sample is None:
                return None
            # owned from here on, so close() frees it whatever happens next
            self._gpm_spare = sample
        taken = self.call("gpm_sample", lambda: nv.nvmlGpmSampleGet(h, sample))
        if taken is None:
            return None
        previous, self._gpm_prev, self._gpm_spare = self._gpm_prev, sample, self._gpm_prev
        self._gpm_prev_t = now
        if previous is None:
            return None
        request = self._gpm_request
        if request is None:
            request = self._gpm_request = self._new_gpm_request()
            if request is None:
                return None
        request.sample1 = previous
        request.sample2 = sample
        if self.call("gpm_metrics", lambda: nv.nvmlGpmMetricsGet(request)) is None:
            return None
        values: dict[str, float | None] = {}
        for position, (attr, _, _, scale) in enumerate(GPM_METRICS):
            metric = request.metrics[position]
            value = float(metric.value) if metric.nvmlReturn == 0 else math.nan
            # Seen on an H100: DRAM bandwidth came back NaN over an idle 50 ms window.
            values[attr] = value * scale if math.isfinite(value) else None
        self._gpm_last = GpmMetrics(**values)
        return self._gpm_last

    def _new_gpm_request(self) -> Any:
        nv = self.nvml
        try:
            request = nv.c_nvmlGpmMetricsGet_t()
            request.version = nv.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = len(GPM_METRICS)
            for position, (_, constant, number, _) in enumerate(GPM_METRICS):
                request.metrics[position].metricId = getattr(nv, constant, number)
        except AttributeError:
            self.gpm_supported = None
            return None
        return request

    def close(self) -> None:
        """Free the GPM sample buffers (NVML allocates them)."""
        free = getattr(self.nvml, "nvmlGpmSampleFree", None)
        for sample in (self._gpm_prev, self._gpm_spare):
            if sample is not None and free is not None:
                with contextlib.suppress(Exception):  # best effort while shutting down
                    free(sample)
        self._gpm_prev = self._gpm_spare = self._gpm_request = None

    # ------------------------------------------------------- MIG, processes

    def _read_mig(self) -> tuple[MigInstance, ...]:
        return read_mig(
            self.call,
            self._bound,
            self.handle,
            int(self._static.get("mig_max") or 0),
            self._mig_static,
        )

    def _read_processes(self, process_util: bool) -> list[ProcessSnapshot]:
        nv, h = self.nvml, self.handle
        sizes = self._list_sizes
        compute = self.call("compute_procs", *list_queries(nv, h, "Compute", sizes))
        graphics = self.call("graphics_procs", *list_queries(nv, h, "Graphics", sizes))
        compute_mem = memory_by_pid(compute)
        graphics_mem = memory_by_pid(graphics)
        if (compute_mem or graphics_mem) and (process_util or self._proc_util is None):
            self._proc_util = self._read_process_util()
        util = self._proc_util
        return self._processes.read(compute_mem, graphics_mem, util, self.index, self.uuid)

    def _read_process_util(self) -> dict[int, tuple[float, float]] | None:
        """Latest SM% and memory% per pid since the last read (~2 ms: slow cadence);
        None when the query does not work or has given no sample yet."""
        nv, h, since = self.nvml, self.handle, self._proc_util_ts
        samples = self._call_allow_not_found(
            "process_util", lambda: nv.nvmlDeviceGetProcessUtilization(h, since), []
        )
        if samples is None:
            return None
        values, newest = latest_process_util(samples)
        if not values and not since:
            # NVML's first read holds no per-process sample yet: nothing was
            # measured (not "idle"); read again on the next sample
            return None
        self._proc_util_ts = max(self._proc_util_ts, newest)
        return values


class _Never(Exception):
    """Matches nothing: stands in for an exception class a pynvml lacks."""
