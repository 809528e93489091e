"""A fake pynvml module for tests: configurable GPUs, injectable NVML errors.

It mirrors nvidia-ml-py's API: the same function names and signatures, the
real ctypes structs (``c_nvmlFieldValue_t``, ``c_nvmlGpmMetricsGet_t``, ...),
the real ``NVMLError`` hierarchy and constants (everything that is not a
function is borrowed from the installed pynvml).  So the collector's real code
path runs against it; only libnvidia-ml is replaced.

* ``FakeNvml(devices=[h100(), a100()])`` - a driver with those GPUs
  (described in ``fake_gpus``, re-exported here).
* ``fake.fail("nvmlDeviceGetPowerUsage", NOT_SUPPORTED, device=0)`` - raise that
  NVML error from that function (on one device or all, forever or ``times``).
* ``fake.remove("nvmlGpmSampleGet")`` - the binding lacks the function
  (an older pynvml): looking it up raises AttributeError.
* ``fake.calls["nvmlDeviceGetProcessUtilization"]`` - how often each was called.
* ``FakeGpu.lost = True`` - every call on that GPU raises GpuIsLost.
* ``fake.xid(0, 79)`` - a critical Xid event on GPU 0, read by the next
  ``nvmlEventSetWait_v2`` of an event set registered for it (``fake.event_sets``:
  the sets made, with what each registered and whether it was freed).
"""

from __future__ import annotations

import ctypes
import functools
import inspect
import struct
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import pynvml as real  # type: ignore[import-untyped]

from tests.helpers.fake_gpus import (
    GIB,
    MIB,
    FakeGpu,
    FakeMig,
    FakeProcess,
    a100,
    a100_mig,
    h100,
    v100,
)

NOT_SUPPORTED = real.NVML_ERROR_NOT_SUPPORTED
NO_PERMISSION = real.NVML_ERROR_NO_PERMISSION
FUNCTION_NOT_FOUND = real.NVML_ERROR_FUNCTION_NOT_FOUND
GPU_IS_LOST = real.NVML_ERROR_GPU_IS_LOST
LIBRARY_NOT_FOUND = real.NVML_ERROR_LIBRARY_NOT_FOUND
DRIVER_NOT_LOADED = real.NVML_ERROR_DRIVER_NOT_LOADED
INVALID_ARGUMENT = real.NVML_ERROR_INVALID_ARGUMENT
UNKNOWN = real.NVML_ERROR_UNKNOWN
NOT_FOUND = real.NVML_ERROR_NOT_FOUND
UNINITIALIZED = real.NVML_ERROR_UNINITIALIZED

#: pid, usedGpuMemory, gpuInstanceId, computeInstanceId of a c_nvmlProcessInfo_v3_t
_PROCESS_INFO = struct.Struct("=I4xQII")
assert _PROCESS_INFO.size == ctypes.sizeof(real.c_nvmlProcessInfo_v3_t)
#: pid, timeStamp, smUtil, memUtil of a c_nvmlProcessUtilizationSample_t, at their offsets
_UTIL_SAMPLE = struct.Struct("=I4xQII")
assert [
    getattr(real.c_nvmlProcessUtilizationSample_t, f).offset
    for f in ("pid", "timeStamp", "smUtil", "memUtil")
] == [0, 8, 16, 20]

__all__ = [
    "DRIVER_NOT_LOADED",
    "FUNCTION_NOT_FOUND",
    "GIB",
    "GPU_IS_LOST",
    "INVALID_ARGUMENT",
    "LIBRARY_NOT_FOUND",
    "MIB",
    "NOT_FOUND",
    "NOT_SUPPORTED",
    "NO_PERMISSION",
    "UNKNOWN",
    "FakeEventSet",
    "FakeGpu",
    "FakeHandle",
    "FakeMig",
    "FakeNvml",
    "FakeProcess",
    "a100",
    "a100_mig",
    "h100",
    "real",
    "v100",
]


@dataclass(frozen=True)
class FakeHandle:
    index: int
    mig_slot: int | None = None


@dataclass
class _Failure:
    code: int
    device: int | None
    times: int | None


@dataclass
class FakeEventSet:
    """One nvmlEventSetCreate's set: the devices (by index) and event types
    registered, whether it was freed."""

    registered: dict[int, int] = field(default_factory=dict)
    freed: bool = False


@dataclass
class FakeEventData:
    """What nvmlEventSetWait_v2 returns (c_nvmlEventData_t's fields)."""

    device: FakeHandle
    eventType: int
    eventData: int
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


@dataclass
class _GpmRecord:
    device: int
    seq: int
    metrics: dict[int, float]
    freed: bool = False


F = TypeVar("F", bound=Callable[..., Any])


def _api(fn: F) -> F:
    """Count the call, then raise an injected or device-level error if one applies."""
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(self: FakeNvml, *args: Any, **kwargs: Any) -> Any:
        self.calls[name] += 1
        self._before(name, args[0] if args else None)
        return fn(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


class FakeNvml:
    """Stands in for the pynvml module."""

    def __init__(
        self,
        devices: list[FakeGpu] | None = None,
        *,
        driver_version: str = "580.65.06",
        cuda_version: int = 13000,
        nvml_version: str = "13.580.65.06",
    ) -> None:
        self.devices = devices if devices is not None else [h100()]
        self.driver_version = driver_version
        self.cuda_version = cuda_version
        self.nvml_version = nvml_version
        self.calls: Counter[str] = Counter()
        #: the process lists whose last call answered "too small" (a read under way)
        self._list_reading: dict[str, bool] = {}
        #: real pynvml functions the collector looked up that the fake lacks
        self.missing_lookups: Counter[str] = Counter()
        self.init_count = 0
        self.shutdown_count = 0
        self._failures: dict[str, list[_Failure]] = {}
        self._removed: set[str] = set()
        self._gpm: dict[int, _GpmRecord] = {}
        self._gpm_buffers: list[Any] = []
        self._gpm_seq = 0
        #: (seq of sample1, seq of sample2) for each nvmlGpmMetricsGet
        self.gpm_pairs: list[tuple[int, int]] = []
        self._util_clock_us = 1_000_000
        #: the event sets made, in order; the events waiting, oldest first
        self.event_sets: list[FakeEventSet] = []
        self._events: list[FakeEventData] = []

    # ------------------------------------------------------------ test API

    def xid(self, device: int, code: int, gpu_instance_id: int = 0xFFFFFFFF) -> None:
        """A critical Xid event on GPU ``device``, read by the next wait of an
        event set registered for it (as NVML queues them)."""
        self._events.append(
            FakeEventData(
                FakeHandle(device), real.nvmlEventTypeXidCriticalError, code, gpu_instance_id
            )
        )

    def fail(
        self, function: str, code: int, device: int | None = None, times: int | None = None
    ) -> None:
        self._failures.setdefault(function, []).append(_Failure(code, device, times))

    def remove(self, function: str) -> None:
        self._removed.add(function)

    @property
    def initialized(self) -> bool:
        return self.init_count > self.shutdown_count

    @property
    def live_gpm_samples(self) -> int:
        return sum(1 for record in self._gpm.values() if not record.freed)

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml") and name in object.__getattribute__(self, "_removed"):
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    def __getattr__(self, name: str) -> Any:
        # constants, structs and error classes come from the real binding; a real
        # function the fake does not implement looks missing, as in an old pynvml
        value = getattr(real, name)
        if inspect.isfunction(value):
            self.missing_lookups[name] += 1
            raise AttributeError(name)
        return value

    def _before(self, name: str, handle: Any) -> None:
        if name not in ("nvmlInit", "nvmlInitWithFlags") and not self.initialized:
            raise real.NVMLError(UNINITIALIZED)
        index = handle.index if isinstance(handle, FakeHandle) else None
        for failure in self._failures.get(name, []):
            if failure.device is not None and failure.device != index:
                continue
            if failure.times is not None:
                if failure.times <= 0:
                    continue
                failure.times -= 1
            raise real.NVMLError(failure.code)
        if index is not None:
            gpu = self.devices[index]
            if gpu.lost:
                raise real.NVMLError(GPU_IS_LOST)
            if name in gpu.unsupported:
                raise real.NVMLError(NOT_SUPPORTED)
            if name in gpu.not_in_driver:
                raise real.NVMLError(FUNCTION_NOT_FOUND)

    def _gpu(self, handle: FakeHandle) -> FakeGpu:
        return self.devices[handle.index]

    # -------------------------------------------------------------- system

    @_api
    def nvmlInit(self) -> None:
        self.init_count += 1

    @_api
    def nvmlShutdown(self) -> None:
        self.shutdown_count += 1

    @_api
    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver_version

    @_api
    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return self.cuda_version

    @_api
    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda_version

    @_api
    def nvmlSystemGetNVMLVersion(self) -> str:
        return self.nvml_version

    @_api
    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    @_api
    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        if self.devices[index].lost:
            raise real.NVMLError(GPU_IS_LOST)
        return FakeHandle(index)

    # ------------------------------------------------------------ identity

    @_api
    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        if handle.mig_slot is not None:
            return self._mig(handle).name
        return self._gpu(handle).name

    @_api
    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        if handle.mig_slot is not None:
            return self._mig(handle).uuid
        return self._gpu(handle).uuid

    @_api
    def nvmlDeviceGetPciInfo_v3(self, handle: FakeHandle) -> Any:
        info = real.nvmlPciInfo_t()
        info.busId = self._gpu(handle).bus_id.encode()
        return info

    # -------------------------------------------------------------- gauges

    @_api
    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> Any:
        gpu = self._gpu(handle)
        return real.c_nvmlUtilization_t(gpu=gpu.util_gpu, memory=gpu.util_mem)

    @_api
    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle, version: int | None = None) -> Any:
        if handle.mig_slot is not None:
            mig = self._mig(handle)
            return real.c_nvmlMemory_t(
                total=mig.mem_total, free=mig.mem_total - mig.mem_used, used=mig.mem_used
            )
        gpu = self._gpu(handle)
        free = gpu.mem_total - gpu.mem_used - gpu.mem_reserved
        if version:
            if "nvmlDeviceGetMemoryInfo_v2" in gpu.not_in_driver:
                raise real.NVMLError(FUNCTION_NOT_FOUND)
            return real.c_nvmlMemory_v2_t(
                version=version,
                total=gpu.mem_total,
                reserved=gpu.mem_reserved,
                free=free,
                used=gpu.mem_used,
            )
        return real.c_nvmlMemory_t(total=gpu.mem_total, free=free, used=gpu.mem_used)

    @_api
    def nvmlDeviceGetBAR1MemoryInfo(self, handle: FakeHandle) -> Any:
        gpu = self._gpu(handle)
        return real.c_nvmlBAR1Memory_t(
            bar1Total=gpu.bar1_total,
            bar1Free=gpu.bar1_total - gpu.bar1_used,
            bar1Used=gpu.bar1_used,
        )

    @_api
    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        if sensor != real.NVML_TEMPERATURE_GPU:
            raise real.NVMLError(INVALID_ARGUMENT)
        return self._gpu(handle).temp

    @_api
    def nvmlDeviceGetFanSpeed(self, handle: FakeHandle) -> int:
        fan = self._gpu(handle).fan
        if fan is None:
            raise real.NVMLError(NOT_SUPPORTED)
        return fan

    @_api
    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        return self._gpu(handle).power_mw

    @_api
    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeHandle) -> int:
        return self._gpu(handle).power_limit_mw

    @_api
    def nvmlDeviceGetPowerManagementLimit(self, handle: FakeHandle) -> int:
        return self._gpu(handle).power_limit_mw

    @_api
    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeHandle) -> int:
        return self._gpu(handle).energy_mj

    @_api
    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, clock_type: int) -> int:
        gpu = self._gpu(handle)
        return {
            real.NVML_CLOCK_SM: gpu.clock_sm,
            real.NVML_CLOCK_MEM: gpu.clock_mem,
            real.NVML_CLOCK_GRAPHICS: gpu.clock_gfx,
        }[clock_type]

    @_api
    def nvmlDeviceGetMaxClockInfo(self, handle: FakeHandle, clock_type: int) -> int:
        gpu = self._gpu(handle)
        return {
            real.NVML_CLOCK_SM: gpu.clock_sm_max,
            real.NVML_CLOCK_MEM: gpu.clock_mem_max,
            real.NVML_CLOCK_GRAPHICS: gpu.clock_gfx_max,
        }[clock_type]

    @_api
    def nvmlDeviceGetPerformanceState(self, handle: FakeHandle) -> int:
        return self._gpu(handle).pstate

    @_api
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeHandle) -> int:
        return self._gpu(handle).throttle

    @_api
    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: FakeHandle) -> int:
        return self._gpu(handle).throttle

    @_api
    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: FakeHandle) -> int:
        return self._gpu(handle).pcie_gen

    @_api
    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: FakeHandle) -> int:
        return self._gpu(handle).pcie_gen_max

    @_api
    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: FakeHandle) -> int:
        return self._gpu(handle).pcie_width

    @_api
    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: FakeHandle) -> int:
        return self._gpu(handle).pcie_width_max

    @_api
    def nvmlDeviceGetComputeMode(self, handle: FakeHandle) -> int:
        return self._gpu(handle).compute_mode

    @_api
    def nvmlDeviceGetPersistenceMode(self, handle: FakeHandle) -> int:
        return self._gpu(handle).persistence

    @_api
    def nvmlDeviceGetEccMode(self, handle: FakeHandle) -> list[int]:
        enabled = int(self._gpu(handle).ecc_enabled)
        return [enabled, enabled]

    @_api
    def nvmlDeviceGetTotalEccErrors(
        self, handle: FakeHandle, error_type: int, counter_type: int
    ) -> int:
        gpu = self._gpu(handle)
        if not gpu.ecc_enabled:
            raise real.NVMLError(NOT_SUPPORTED)
        if counter_type != real.NVML_VOLATILE_ECC:
            raise real.NVMLError(INVALID_ARGUMENT)
        if error_type == real.NVML_MEMORY_ERROR_TYPE_CORRECTED:
            return gpu.ecc_corrected
        return gpu.ecc_uncorrected

    @_api
    def nvmlDeviceGetRemappedRows(self, handle: FakeHandle) -> tuple[int, int, int, int]:
        rows = self._gpu(handle).remapped_rows
        if rows is None:
            raise real.NVMLError(NOT_SUPPORTED)
        return rows

    @_api
    def nvmlDeviceGetNvLinkState(self, handle: FakeHandle, link: int) -> int:
        states = self._gpu(handle).nvlink_states
        if states is None or link >= len(states):
            raise real.NVMLError(NOT_SUPPORTED)
        return 1 if states[link] == real.NVML_NVLINK_STATE_ACTIVE else 0

    # --------------------------------------------------------- field values

    @_api
    def nvmlDeviceGetFieldValues(self, handle: FakeHandle, fieldIds: list[Any]) -> Any:
        gpu = self._gpu(handle)
        values = (real.c_nvmlFieldValue_t * len(fieldIds))()
        for position, requested in enumerate(fieldIds):
            field_id, scope = requested if isinstance(requested, tuple) else (requested, 0)
            value = values[position]
            value.fieldId, value.scopeId = field_id, scope
            value.timestamp = self._util_clock_us
            number, value_type = self._field(gpu, field_id, scope)
            if number is None:
                value.nvmlReturn = NOT_SUPPORTED
                continue
            value.nvmlReturn = real.NVML_SUCCESS
            value.valueType = value_type
            if value_type == real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
                value.value.ullVal = number
            else:
                value.value.uiVal = number
        return values

    def _field(self, gpu: FakeGpu, field_id: int, scope: int) -> tuple[int | None, int]:
        ull, uint = real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, real.NVML_VALUE_TYPE_UNSIGNED_INT
        all_links = 0xFFFFFFFF
        if field_id == real.NVML_FI_DEV_PCIE_COUNT_TX_BYTES:
            return gpu.pcie_tx_bytes, ull
        if field_id == real.NVML_FI_DEV_PCIE_COUNT_RX_BYTES:
            return gpu.pcie_rx_bytes, ull
        if field_id == real.NVML_FI_DEV_MEMORY_TEMP:
            return gpu.temp_mem, uint
        links = gpu.nvlink_states
        if field_id == real.NVML_FI_DEV_NVLINK_LINK_COUNT:
            return (len(links) if links is not None else None), uint
        if field_id == real.NVML_FI_DEV_NVLINK_GET_STATE:
            if links is None or scope >= len(links):
                return None, uint
            return links[scope], uint
        if field_id == real.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX and scope == all_links:
            return gpu.nvlink_tx_kib, ull
        if field_id == real.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX and scope == all_links:
            return gpu.nvlink_rx_kib, ull
        return None, uint

    # ------------------------------------------------------------ processes

    def _process_infos(self, handle: FakeHandle, kinds: tuple[str, ...]) -> list[Any]:
        infos = []
        for process in self._gpu(handle).processes:
            if process.kind not in kinds:
                continue
            infos.append(
                real.nvmlFriendlyObject(
                    {
                        "pid": process.pid,
                        "usedGpuMemory": process.used_gpu_memory,
                        "gpuInstanceId": process.gpu_instance_id,
                        "computeInstanceId": 0xFFFFFFFF,
                    }
                )
            )
        return infos

    #: the process lists' C functions (as ``_nvmlGetFunctionPointer`` finds
    #: them) and the process kinds each lists
    _RAW_LISTS: ClassVar[dict[str, tuple[str, ...]]] = {
        "nvmlDeviceGetComputeRunningProcesses_v3": ("compute", "both"),
        "nvmlDeviceGetGraphicsRunningProcesses_v3": ("graphics", "both"),
    }

    def _nvmlGetFunctionPointer(self, name: str) -> Callable[..., int]:
        """NVML's C functions for the process lists, as pynvml's private lookup
        returns them: they fill the caller's array and return a status, as the
        library does (an injected failure is its status)."""
        if name not in self._RAW_LISTS or name in self._removed:
            raise real.NVMLError(FUNCTION_NOT_FOUND)
        kinds = self._RAW_LISTS[name]

        def function(handle: FakeHandle, count: Any, array: Any) -> int:
            # one read counted once (as pynvml's wrapper is): a call that follows one
            # that answered "too small" goes on with the same read
            if not self._list_reading.pop(name, False):
                self.calls[name] += 1
            try:
                self._before(name, handle)
            except real.NVMLError as exc:
                return int(exc.value)
            processes = [p for p in self._gpu(handle).processes if p.kind in kinds]
            wanted = len(processes)
            if array is None or len(array) < wanted:
                count._obj.value = wanted
                if not wanted:
                    return real.NVML_SUCCESS
                self._list_reading[name] = True
                return real.NVML_ERROR_INSUFFICIENT_SIZE
            for i, p in enumerate(processes):
                used = 2**64 - 1 if p.used_gpu_memory is None else p.used_gpu_memory
                _PROCESS_INFO.pack_into(
                    array, i * _PROCESS_INFO.size, p.pid, used, p.gpu_instance_id, 0xFFFFFFFF
                )
            count._obj.value = wanted
            return real.NVML_SUCCESS

        return function

    @_api
    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: FakeHandle) -> list[Any]:
        return self._process_infos(handle, ("compute", "both"))

    @_api
    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle: FakeHandle) -> list[Any]:
        return self._process_infos(handle, ("graphics", "both"))

    @_api
    def nvmlDeviceGetProcessUtilization(self, handle: FakeHandle, timeStamp: int) -> list[Any]:
        self._util_clock_us += 1_000_000
        stamp = self._util_clock_us
        rows = [
            (process.pid, stamp, process.sm_util, process.mem_util or 0)
            for process in self._gpu(handle).processes
            if process.sm_util is not None
        ]
        if not rows or stamp <= timeStamp:
            raise real.NVMLError(NOT_FOUND)
        # as pynvml returns them: a slice of the array NVML filled
        sample_type = real.c_nvmlProcessUtilizationSample_t
        array = (sample_type * (len(rows) + 1))()
        for i, (pid, when, sm, mem) in enumerate(rows):
            _UTIL_SAMPLE.pack_into(array, i * ctypes.sizeof(sample_type), pid, when, sm, mem)
        return array[0 : len(rows)]

    # --------------------------------------------------------------- events

    @_api
    def nvmlEventSetCreate(self) -> FakeEventSet:
        event_set = FakeEventSet()
        self.event_sets.append(event_set)
        return event_set

    @_api
    def nvmlDeviceGetSupportedEventTypes(self, handle: FakeHandle) -> int:
        return self._gpu(handle).event_types

    @_api
    def nvmlDeviceRegisterEvents(
        self, handle: FakeHandle, eventTypes: int, eventSet: FakeEventSet
    ) -> None:
        if not eventTypes & self._gpu(handle).event_types:
            raise real.NVMLError(NOT_SUPPORTED)
        eventSet.registered[handle.index] = eventSet.registered.get(handle.index, 0) | eventTypes

    @_api
    def nvmlEventSetWait_v2(self, eventSet: FakeEventSet, timeoutms: int) -> FakeEventData:
        if eventSet.freed:
            raise real.NVMLError(INVALID_ARGUMENT)
        for position, event in enumerate(self._events):
            types = eventSet.registered.get(event.device.index, 0)
            if types & event.eventType:
                del self._events[position]
                return event
        raise real.NVMLError(real.NVML_ERROR_TIMEOUT)

    @_api
    def nvmlEventSetFree(self, eventSet: FakeEventSet) -> None:
        eventSet.freed = True

    # ------------------------------------------------------------------ GPM

    @_api
    def nvmlGpmQueryDeviceSupport(self, handle: FakeHandle) -> Any:
        support = real.c_nvmlGpmSupport_t()
        support.version = real.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = int(self._gpu(handle).gpm)
        return support

    @_api
    def nvmlGpmSampleAlloc(self) -> Any:
        buffer = ctypes.create_string_buffer(16)
        self._gpm_buffers.append(buffer)  # keep the memory alive
        sample = ctypes.cast(buffer, real.c_nvmlGpmSample_t)
        self._gpm[_address(sample)] = _GpmRecord(device=-1, seq=-1, metrics={})
        return sample

    @_api
    def nvmlGpmSampleFree(self, gpmSample: Any) -> None:
        self._record(gpmSample).freed = True

    @_api
    def nvmlGpmSampleGet(self, device: FakeHandle, gpmSample: Any) -> Any:
        gpu = self._gpu(device)
        if not gpu.gpm:
            raise real.NVMLError(NOT_SUPPORTED)
        record = self._record(gpmSample)
        self._gpm_seq += 1
        record.device, record.seq, record.metrics = (
            device.index,
            self._gpm_seq,
            dict(gpu.gpm_metrics),
        )
        return gpmSample

    @_api
    def nvmlGpmMetricsGet(self, metricsGet: Any) -> Any:
        if metricsGet.version != real.NVML_GPM_METRICS_GET_VERSION:
            raise real.NVMLError(real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        first, second = self._record(metricsGet.sample1), self._record(metricsGet.sample2)
        if first.device != second.device or not 0 < first.seq < second.seq:
            raise real.NVMLError(INVALID_ARGUMENT)
        self.gpm_pairs.append((first.seq, second.seq))
        for position in range(metricsGet.numMetrics):
            metric = metricsGet.metrics[position]
            value = second.metrics.get(metric.metricId)
            if value is None:
                metric.nvmlReturn = NOT_SUPPORTED
                metric.value = 0.0
            else:
                metric.nvmlReturn = real.NVML_SUCCESS
                metric.value = value
        return metricsGet

    def _record(self, sample: Any) -> _GpmRecord:
        record = self._gpm.get(_address(sample))
        if record is None or record.freed:
            raise real.NVMLError(INVALID_ARGUMENT)
        return record

    # ------------------------------------------------------------------ MIG

    def _mig(self, handle: FakeHandle) -> FakeMig:
        migs = self._gpu(handle).mig or []
        assert handle.mig_slot is not None
        return migs[handle.mig_slot]

    @_api
    def nvmlDeviceGetMigMode(self, device: FakeHandle) -> list[int]:
        enabled = int(self._gpu(device).mig is not None)
        return [enabled, enabled]

    @_api
    def nvmlDeviceGetMaxMigDeviceCount(self, device: FakeHandle) -> int:
        return 7 if self._gpu(device).mig is not None else 0

    @_api
    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: FakeHandle, index: int) -> FakeHandle:
        migs = self._gpu(device).mig or []
        if index >= len(migs):
            raise real.NVMLError(NOT_FOUND)
        return FakeHandle(device.index, index)

    @_api
    def nvmlDeviceGetGpuInstanceId(self, device: FakeHandle) -> int:
        return self._mig(device).gpu_instance_id

    @_api
    def nvmlDeviceGetAttributes_v2(self, device: FakeHandle) -> Any:
        attributes = real.c_nvmlDeviceAttributes()
        attributes.multiprocessorCount = self._mig(device).sm_count
        return attributes


def _address(sample: Any) -> int:
    address = ctypes.cast(sample, ctypes.c_void_p).value
    return int(address or 0)
