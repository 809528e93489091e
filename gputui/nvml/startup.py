"""NVML opened ahead of everything else: pynvml, ``nvmlInit`` and each GPU's handle.

Opening NVML is the longest wait of ``gputui --once`` (``nvmlInit`` and the first
handle: ~18 ms on an H200, in the driver, with the GIL released).  The sample
thread calls :func:`start` before it imports any other collector, so that wait
runs while the rest of the program imports; :class:`NvmlCollector` then takes
the session over (``NvmlCollector(started=...)``) instead of opening its own.

This module imports nothing but pynvml (and gputui's error class): whatever it
imported would be imported before NVML opens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gputui.errors import NvmlUnavailable

TRY_DEMO = "try 'gputui --demo'"

#: the device queries (:class:`DeviceReader` keys) whose values the text report
#: of ``gputui --once`` without ``--window`` neither prints nor gives to a device
#: rule: skipped there.  Maximum clocks and PCIe link, fan, P-state, the current
#: memory and graphics clocks and PCIe link, BAR1, energy, compute and persistence
#: modes, MIG, NVLink, the corrected ECC count, the PCI bus id, the NVML version;
#: GPM and the field counters (PCIe bytes, memory temperature) give rates, which
#: one reading does not have.  ``--json`` reads them all (its keys keep their
#: meaning: null is "unavailable"), and so does the monitor.
TEXT_ONE_SHOT_SKIPS = frozenset(
    {
        "max_clock_sm",
        "max_clock_mem",
        "max_clock_gfx",
        "pcie_gen_max",
        "pcie_width_max",
        "pcie_gen",
        "pcie_width",
        "fan",
        "pstate",
        "clock_mem",
        "clock_gfx",
        "bar1",
        "energy",
        "compute_mode",
        "persistence",
        "mig_mode",
        "nvlink_count",
        "ecc_NVML_MEMORY_ERROR_TYPE_CORRECTED",
        "gpm_support",
        "fields",
        "pci",
        "nvml_version",
    }
)


#: what the monitor's screen neither shows nor gives to a rule: the energy counter
#: (4.1 ms of CPU a call, 1.1-12 ms, on an H100 with driver 580: bench/nvml_calls.py)
#: and BAR1 memory (0.36 ms).  Both stay in ``--json``, recordings and the exporter,
#: which read every query.
MONITOR_SKIPS = frozenset({"energy", "bar1"})


def import_pynvml() -> Any:
    """The pynvml module; NvmlUnavailable (one line) when it is not installed."""
    try:
        import pynvml  # type: ignore[import-untyped]
    except ImportError:
        raise NvmlUnavailable(
            f"nvidia-ml-py is not installed (pip install nvidia-ml-py); {TRY_DEMO}"
        ) from None
    return pynvml


class Started:
    """An NVML session begun by :func:`start`: the module, and each GPU's handle
    or the error that opening it raised; or the error that stopped it."""

    def __init__(self) -> None:
        self.nvml: Any = None
        #: what import or nvmlInit raised (the collector words it); None when open
        self.error: BaseException | None = None
        #: nvmlDeviceGetCount failed with this (the collector words it)
        self.count_error: BaseException | None = None
        #: index -> handle, or the exception nvmlDeviceGetHandleByIndex raised
        self.handles: list[Any] = []

    def handle(self, index: int) -> Any:
        """The handle of GPU ``index``; raises what opening it raised."""
        handle = self.handles[index]
        if isinstance(handle, BaseException):
            raise handle
        return handle


def start(nvml: Any | None = None, starting: Callable[[], object] | None = None) -> Started:
    """Import pynvml, start NVML and open every GPU's handle.  Never raises:
    a failure is kept in the result for the collector to report.  ``starting``
    is called right before ``nvmlInit`` (or the failure that prevents it)."""
    started = Started()
    try:
        nv = nvml if nvml is not None else import_pynvml()
        started.nvml = nv
        if starting is not None:
            starting()
            starting = None
        nv.nvmlInit()
    except Exception as exc:  # worded by the collector, which knows the codes
        started.error = exc
        if starting is not None:
            starting()
        return started
    try:
        count = int(nv.nvmlDeviceGetCount())
    except Exception as exc:
        started.count_error = exc
        return started
    for index in range(count):
        try:
            started.handles.append(nv.nvmlDeviceGetHandleByIndex(index))
        except Exception as exc:  # the collector decides: hidden, or lost
            started.handles.append(exc)
    return started
