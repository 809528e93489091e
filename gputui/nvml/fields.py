"""Pure decoding for the NVML collector: error classes, bit masks, enums, field values.

Nothing here calls NVML.  Every table is keyed by the numeric values NVML
documents, so decoding does not depend on which pynvml release is installed.
"""

from __future__ import annotations

import ctypes
import math
import struct
from collections.abc import Iterable, Iterator
from typing import Any

from gputui.protocol.value import ValueBase, value_class

#: clock-event ("throttle") reason bits, nvmlClocksEventReason* in pynvml
THROTTLE_REASON_BITS: tuple[tuple[int, str], ...] = (
    (0x0001, "gpu_idle"),
    (0x0002, "applications_clocks_setting"),
    (0x0004, "sw_power_cap"),
    (0x0008, "hw_slowdown"),
    (0x0010, "sync_boost"),
    (0x0020, "sw_thermal_slowdown"),
    (0x0040, "hw_thermal_slowdown"),
    (0x0080, "hw_power_brake_slowdown"),
    (0x0100, "display_clock_setting"),
)

#: NVML_COMPUTEMODE_*
COMPUTE_MODE_NAMES: dict[int, str] = {
    0: "default",
    1: "exclusive_thread",
    2: "prohibited",
    3: "exclusive_process",
}

#: NVML_PSTATE_UNKNOWN: the driver does not know the performance state
PSTATE_UNKNOWN = 32

#: NVML_NVLINK_STATE_ACTIVE and _SLEEP: the link is up (sleep is a low-power state
#: of a trained link); INACTIVE and ACTIVE_TRAFFIC_DISABLED carry no traffic.
NVLINK_UP_STATES = frozenset({0x1, 0x2})

#: scopeId meaning "all links summed" for the NVLink throughput counters
ALL_LINKS_SCOPE = 0xFFFFFFFF

MIB = 1024 * 1024
KIB = 1024

#: rates (counter deltas, GPM) need at least this long between readings; the
#: poller's shortest interval is 0.1 s, so this only guards back-to-back calls
MIN_RATE_INTERVAL_S = 0.02

#: GPM counters refresh every 100 ms: on the H100, two GPM samples less than
#: 0.1 s apart read SM activity 0% (or NaN) on a GPU that was 99% busy, while
#: every window of 0.1 s or more read the same as a 1 s window
#: (docs/benchmarks.md, "GPM windows")
MIN_GPM_INTERVAL_S = 0.1

#: GpmMetrics field -> (NVML_GPM_METRIC_* name, its number, scale to our unit).
#: Percentages pass through; PCIe and NVLink rates come in MiB/s.
GPM_METRICS: tuple[tuple[str, str, int, float], ...] = (
    ("sm_activity_pct", "NVML_GPM_METRIC_SM_UTIL", 2, 1.0),
    ("sm_occupancy_pct", "NVML_GPM_METRIC_SM_OCCUPANCY", 3, 1.0),
    ("tensor_activity_pct", "NVML_GPM_METRIC_ANY_TENSOR_UTIL", 5, 1.0),
    ("dram_bw_util_pct", "NVML_GPM_METRIC_DRAM_BW_UTIL", 10, 1.0),
    ("fp64_activity_pct", "NVML_GPM_METRIC_FP64_UTIL", 11, 1.0),
    ("fp32_activity_pct", "NVML_GPM_METRIC_FP32_UTIL", 12, 1.0),
    ("fp16_activity_pct", "NVML_GPM_METRIC_FP16_UTIL", 13, 1.0),
    ("pcie_tx_bytes_per_s", "NVML_GPM_METRIC_PCIE_TX_PER_SEC", 20, float(MIB)),
    ("pcie_rx_bytes_per_s", "NVML_GPM_METRIC_PCIE_RX_PER_SEC", 21, float(MIB)),
    ("nvlink_rx_bytes_per_s", "NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", 60, float(MIB)),
    ("nvlink_tx_bytes_per_s", "NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", 61, float(MIB)),
)


def decode_throttle_reasons(mask: int) -> tuple[str, ...]:
    """Names of the active clock-event reasons, in bit order; () when none."""
    return tuple(name for bit, name in THROTTLE_REASON_BITS if mask & bit)


def compute_mode_name(mode: int | None) -> str | None:
    if mode is None:
        return None
    return COMPUTE_MODE_NAMES.get(mode, f"unknown({mode})")


def cuda_version_string(version: int | None) -> str | None:
    """NVML's integer CUDA driver version (13000) as "13.0"."""
    if not version or version < 0:
        return None
    return f"{version // 1000}.{(version % 1000) // 10}"


def as_text(value: Any) -> str | None:
    """NVML strings arrive as str from pynvml 13 and as bytes from older releases."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


#: nvmlValueType_t -> member of the c_nvmlValue_t union holding the value
_VALUE_MEMBERS = {
    0: "dVal",
    1: "uiVal",
    2: "ulVal",
    3: "ullVal",
    4: "sllVal",
    5: "siVal",
    6: "usVal",
}


def field_number(field_value: Any) -> float | int | None:
    """The number inside one c_nvmlFieldValue_t, None if its read failed."""
    if field_value.nvmlReturn != 0:
        return None
    member = _VALUE_MEMBERS.get(field_value.valueType)
    if member is None:
        return None
    number: float | int = getattr(field_value.value, member)
    return number


@value_class
class ErrorCodes(ValueBase):
    """How one pynvml module's exceptions map to the collector's reactions."""

    #: NVMLError, the base of every error pynvml raises
    base: type[BaseException]
    #: the query can never work on this device/driver: stop asking
    permanent: frozenset[int]
    #: the function is missing from libnvidia-ml (library older than the binding)
    function_not_found: int
    #: code -> how the device is gone (the device is marked lost)
    lost: dict[int, str]

    @classmethod
    def of(cls, nvml: Any) -> ErrorCodes:
        def code(name: str, default: int) -> int:
            value = getattr(nvml, name, default)
            return value if isinstance(value, int) else default

        base = getattr(nvml, "NVMLError", None)
        if not (isinstance(base, type) and issubclass(base, BaseException)):
            base = _NeverRaised
        return cls(
            base=base,
            permanent=frozenset(
                {
                    code("NVML_ERROR_NOT_SUPPORTED", 3),
                    code("NVML_ERROR_NO_PERMISSION", 4),
                    code("NVML_ERROR_FUNCTION_NOT_FOUND", 13),
                    code("NVML_ERROR_ARGUMENT_VERSION_MISMATCH", 25),
                    code("NVML_ERROR_DEPRECATED", 26),
                }
            ),
            function_not_found=code("NVML_ERROR_FUNCTION_NOT_FOUND", 13),
            lost={
                code("NVML_ERROR_GPU_IS_LOST", 15): "is lost (fell off the bus?)",
                code("NVML_ERROR_RESET_REQUIRED", 16): "needs a reset",
                code("NVML_ERROR_GPU_NOT_FOUND", 28): "is no longer present",
            },
        )

    def code_of(self, exc: BaseException) -> int | None:
        value = getattr(exc, "value", None)
        return value if isinstance(value, int) else None


class _NeverRaised(Exception):
    """Stands in for NVMLError when a module lacks it, so ``except`` clauses stay valid."""


class CounterRate:
    """Turns a cumulative counter into a rate between successive readings.

    A counter that went backwards (wrapped, or reset by a driver reload) gives
    None for that interval rather than a huge negative rate.  A reading less
    than ``min_interval_s`` after the baseline gives None and keeps the
    baseline: a rate over a millisecond or two is noise.
    """

    __slots__ = ("_last_t", "_last_value", "min_interval_s")

    def __init__(self, min_interval_s: float = 0.0) -> None:
        self.min_interval_s = min_interval_s
        self._last_value: float | None = None
        self._last_t: float | None = None

    def update(self, value: float | None, t: float, scale: float = 1.0) -> float | None:
        if value is None:
            self._last_value = None
            return None
        last_value, last_t = self._last_value, self._last_t
        if last_value is not None and last_t is not None and t - last_t < self.min_interval_s:
            return None
        self._last_value, self._last_t = value, t
        if last_value is None or last_t is None:
            return None
        dt = t - last_t
        delta = value - last_value
        if dt <= 0 or delta < 0:
            return None
        return delta * scale / dt


def memory_by_pid(infos: Any) -> dict[int, int | None]:
    """pid -> GPU memory; MIG lists one entry per GPU instance, so entries sum.
    A dict is that already (``nvml_procs.raw_memory_by_pid``)."""
    if isinstance(infos, dict):
        return infos
    if not infos:
        return {}
    return sum_by_pid((int(info.pid), getattr(info, "usedGpuMemory", None)) for info in infos)


def sum_by_pid(entries: Iterable[tuple[int, int | None]]) -> dict[int, int | None]:
    """pid -> GPU memory from (pid, used memory) entries: NVML's "not available"
    (all ones) is None, and a pid's entries sum (one per MIG instance)."""
    not_available = 2**64 - 1
    if isinstance(entries, list):
        # the common case, each pid once and every amount known, built in C
        simple: dict[int, int | None] = dict(entries)
        amounts = simple.values()
        if len(simple) == len(entries) and not_available not in amounts and None not in amounts:
            return simple
    out: dict[int, int | None] = {}
    for pid, used in entries:
        memory = int(used) if used is not None and used != not_available else None
        if pid in out:
            known = out[pid]
            out[pid] = known + memory if known is not None and memory is not None else None
        else:
            out[pid] = memory
    return out


def max_known(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def to_int(value: Any) -> int | None:
    return int(value) if value is not None else None


def to_float(value: Any) -> float | None:
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


#: the fields of a process utilization sample the monitor reads, in this order
_UTIL_FIELDS = ("pid", "timeStamp", "smUtil", "memUtil")
_UNSIGNED = {4: "I", 8: "Q"}
_LAYOUTS: dict[tuple[type, tuple[str, ...]], struct.Struct | None] = {}


def layout_of(cls: type, fields: tuple[str, ...]) -> struct.Struct | None:
    """How to unpack ``fields`` (in their order in memory) from the bytes of
    ``cls``, a ctypes structure: None when it is not one, or those fields are
    not plain unsigned integers."""
    key = (cls, fields)
    if key in _LAYOUTS:
        return _LAYOUTS[key]
    layout = None
    try:
        types = dict(cls._fields_)  # type: ignore[attr-defined]
        size = ctypes.sizeof(cls)
        places = sorted(
            (getattr(cls, name).offset, getattr(cls, name).size, name) for name in fields
        )
        if [name for *_, name in places] == list(fields) and all(
            issubclass(types[name], ctypes._SimpleCData) and types[name]._type_ in "ILQ"  # type: ignore[attr-defined]
            for name in fields
        ):
            fmt, at = "=", 0
            for offset, width, _name in places:
                fmt += "x" * (offset - at) + _UNSIGNED[width]
                at = offset + width
            fmt += "x" * (size - at)
            layout = struct.Struct(fmt)
            if layout.size != size:
                layout = None
    except (AttributeError, KeyError, TypeError, ValueError):
        layout = None
    _LAYOUTS[key] = layout
    return layout


def _unpacked(samples: Any) -> Iterator[tuple[int, int, int, int]] | None:
    """(pid, timeStamp, smUtil, memUtil) of each sample, read from memory in
    one pass, when ``samples`` is the consecutive run of one ctypes array that
    pynvml returns (``c_samples[0:count]``); None otherwise.  Reading each
    field of each structure through pynvml's ``__getattribute__`` cost more
    than the NVML call on a node with thousands of processes."""
    if not isinstance(samples, list) or not samples:
        return None
    first, last = samples[0], samples[-1]
    cls = type(first)
    base = getattr(first, "_b_base_", None)
    if not isinstance(first, ctypes.Structure) or not isinstance(base, ctypes.Array):
        return None
    layout = layout_of(cls, _UTIL_FIELDS)
    if layout is None:
        return None
    size, count = layout.size, len(samples)
    start, bottom = ctypes.addressof(first), ctypes.addressof(base)
    if (
        start < bottom
        or start + count * size > bottom + ctypes.sizeof(base)
        or ctypes.addressof(last) != start + (count - 1) * size
        or not all(type(s) is cls and s._b_base_ is base for s in samples)
    ):
        return None
    return layout.iter_unpack(ctypes.string_at(start, count * size))


def latest_process_util(samples: Any) -> tuple[dict[int, tuple[float, float]], int]:
    """pid -> (SM %, memory %) from each pid's newest sample, and the newest timestamp."""
    latest: dict[int, tuple[int, float, float]] = {}
    newest = 0
    rows = _unpacked(samples)
    if rows is not None:
        for pid, stamp, sm, mem in rows:
            known = latest.get(pid)
            if known is None or stamp >= known[0]:
                latest[pid] = (stamp, float(sm), float(mem))
            if stamp > newest:
                newest = stamp
        return {pid: (sm, mem) for pid, (_, sm, mem) in latest.items()}, newest
    for sample in samples:
        stamp, pid = int(sample.timeStamp), int(sample.pid)
        known = latest.get(pid)
        if known is None or stamp >= known[0]:
            latest[pid] = (stamp, float(sample.smUtil), float(sample.memUtil))
        newest = max(newest, stamp)
    return {pid: (sm, mem) for pid, (_, sm, mem) in latest.items()}, newest
