"""MIG instances and GPU processes of one device, from what NVML returns.

The device reader makes the NVML calls (failsafe, see ``nvml_device``); these
functions turn their results into snapshot values.
"""

from __future__ import annotations

import ctypes
import dataclasses
from collections.abc import Callable
from typing import Any

from gputui.nvml.fields import as_text, layout_of, max_known, sum_by_pid, to_int
from gputui.snapshot.model import MigInstance, ProcessSnapshot

Call = Callable[..., Any]
Bound = Callable[..., Callable[[], Any]]


def read_mig(
    call: Call,
    bound: Bound,
    handle: Any,
    slots: int,
    cache: dict[str, tuple[int | None, str | None, int | None]],
) -> tuple[MigInstance, ...]:
    """One MigInstance per GPU instance; its compute instances' SMs summed.
    ``cache`` keeps each MIG device's static facts by UUID between samples."""
    h = handle
    by_gi: dict[int, MigInstance] = {}
    for slot in range(slots):
        mig = call("mig_handle", bound("nvmlDeviceGetMigDeviceHandleByIndex", h, slot))
        if mig is None:
            continue
        uuid = as_text(call("mig_uuid", bound("nvmlDeviceGetUUID", mig)))
        static = cache.get(uuid or "")
        if static is None:
            gi = call("mig_gi", bound("nvmlDeviceGetGpuInstanceId", mig))
            name = as_text(call("mig_name", bound("nvmlDeviceGetName", mig)))
            attrs = call(
                "mig_attrs",
                bound("nvmlDeviceGetAttributes_v2", mig),
                bound("nvmlDeviceGetAttributes", mig),
            )
            sms = getattr(attrs, "multiprocessorCount", None)
            static = (to_int(gi), name, to_int(sms))
            if uuid:
                cache[uuid] = static
        gi_id, name, sms = static
        if gi_id is None:
            continue
        mem = call("mig_memory", bound("nvmlDeviceGetMemoryInfo", mig))
        known = by_gi.get(gi_id)
        if known is None:
            by_gi[gi_id] = MigInstance(
                gpu_instance_id=gi_id,
                name=name,
                uuid=uuid,
                mem_used_bytes=to_int(getattr(mem, "used", None)),
                mem_total_bytes=to_int(getattr(mem, "total", None)),
                sm_count=sms,
            )
        elif sms is not None and known.sm_count is not None:
            # compute instances of one GPU instance share its memory, not its SMs
            by_gi[gi_id] = dataclasses.replace(known, sm_count=known.sm_count + sms)
    return tuple(by_gi[gi] for gi in sorted(by_gi))


#: what pynvml passes NVML's process-list functions, by function (its own wrappers' structs)
RAW_LISTS = {
    "nvmlDeviceGetComputeRunningProcesses_v3": "c_nvmlProcessInfo_v3_t",
    "nvmlDeviceGetGraphicsRunningProcesses_v3": "c_nvmlProcessInfo_v3_t",
}
_INFO_FIELDS = ("pid", "usedGpuMemory")


def raw_memory_by_pid(
    nv: Any, handle: Any, function: str, sizes: dict[str, int] | None = None
) -> dict[int, int | None]:
    """pid -> GPU memory from NVML's ``function`` (a process list), called as
    pynvml's wrapper calls it (once for the count, again with an array twice as
    long and five more), the array unpacked in C.  pynvml's wrapper makes a
    Python object of each entry, field by field: about 5 µs a process, 10 ms a
    refresh on a node of 2,000 GPU processes.  AttributeError where this pynvml
    has no such function pointer or structure (the caller then asks pynvml's
    wrapper); NVML's errors raised as the wrapper raises them.

    ``sizes`` (kept by the caller between reads, per function) holds the array
    size the last read ended with: a read then makes one call, not two, while
    the list still fits (a list that outgrew it is read again as above)."""
    info_type = getattr(nv, RAW_LISTS[function])
    layout = layout_of(info_type, _INFO_FIELDS)
    if layout is None:
        raise AttributeError(f"{RAW_LISTS[function]}: not a structure of plain integers")
    fn = nv._nvmlGetFunctionPointer(function)
    count = ctypes.c_uint(0)
    hint = sizes.get(function, 0) if sizes is not None else 0
    array: Any = None
    ret = nv.NVML_ERROR_INSUFFICIENT_SIZE
    if hint:
        count.value = hint
        array = (info_type * hint)()
        ret = fn(handle, ctypes.byref(count), array)
    if ret == nv.NVML_ERROR_INSUFFICIENT_SIZE:
        count.value = 0
        ret = fn(handle, ctypes.byref(count), None)
        if ret == nv.NVML_SUCCESS:
            if sizes is not None:
                sizes[function] = 5
            return {}  # no process
        if ret != nv.NVML_ERROR_INSUFFICIENT_SIZE:
            raise nv.NVMLError(ret)
        count.value = count.value * 2 + 5
        array = (info_type * count.value)()
        ret = fn(handle, ctypes.byref(count), array)
    if ret != nv.NVML_SUCCESS:
        raise nv.NVMLError(ret)
    entries = min(count.value, len(array))
    if sizes is not None:
        sizes[function] = entries * 2 + 5
    data = ctypes.string_at(array, entries * ctypes.sizeof(info_type))
    return sum_by_pid(list(layout.iter_unpack(data)))


def list_queries(
    nv: Any, handle: Any, kind: str, sizes: dict[str, int] | None = None
) -> tuple[Callable[[], Any], ...]:
    """The ways to read a device's ``kind`` ("Compute" or "Graphics") process
    list, newest first: NVML's v3 function called directly, then pynvml's
    wrappers of v3, v2 and the first version (``DeviceReader.call`` keeps to
    the first that this pynvml and driver have)."""
    name = f"nvmlDeviceGet{kind}RunningProcesses"
    return (
        lambda: raw_memory_by_pid(nv, handle, f"{name}_v3", sizes),
        lambda: getattr(nv, f"{name}_v3")(handle),
        lambda: getattr(nv, f"{name}_v2")(handle),
        lambda: getattr(nv, name)(handle),
    )


def processes_of(
    compute_mem: dict[int, int | None],
    graphics_mem: dict[int, int | None],
    util: dict[int, tuple[float, float]] | None,
    index: int,
    uuid: str,
    previous: dict[int, ProcessSnapshot] | None = None,
) -> list[ProcessSnapshot]:
    """The device's processes from its compute and graphics lists (pid -> memory)
    and the process utilization samples (None when that query does not work).

    ``previous``: the processes of the device's last read by pid, made these
    processes' on return; one whose values are all the same is that value
    again, not a new one (an idle process of a node's thousands: the views
    downstream read only the processes that are new objects)."""
    processes: list[ProcessSnapshot] = []
    if previous is None:
        previous = {}
    for pid in sorted(compute_mem.keys() | graphics_mem.keys()):
        in_compute, in_graphics = pid in compute_mem, pid in graphics_mem
        if in_compute and in_graphics:
            kind = "compute+graphics"
            # the same allocation is reported in both lists: not a sum
            memory = max_known(compute_mem[pid], graphics_mem[pid])
        elif in_compute:
            kind, memory = "compute", compute_mem[pid]
        else:
            kind, memory = "graphics", graphics_mem[pid]
        sm_pct = mem_bw_pct = None
        if util is not None:
            # the query worked: a process without a sample did no work
            sm_pct, mem_bw_pct = util.get(pid, (0.0, 0.0))
        old = previous.get(pid)
        if (
            old is not None
            and old.gpu_mem_bytes == memory
            and old.sm_pct == sm_pct
            and old.mem_bw_pct == mem_bw_pct
            and old.type == kind
            and old.gpu_index == index
            and old.gpu_uuid == uuid
        ):
            processes.append(old)
            continue
        processes.append(
            ProcessSnapshot(
                pid=pid,
                gpu_index=index,
                gpu_uuid=uuid,
                type=kind,
                gpu_mem_bytes=memory,
                sm_pct=sm_pct,
                mem_bw_pct=mem_bw_pct,
            )
        )
    previous.clear()
    previous.update((p.pid, p) for p in processes)
    return processes


class DeviceProcesses:
    """A device's processes read after read: the list of the last read again
    when NVML's lists and the utilization samples are those of then (most
    refreshes of a node whose processes hold their memory), else
    :func:`processes_of` with the last read's values to reuse."""

    def __init__(self) -> None:
        self._inputs: tuple[Any, ...] | None = None
        self._by_pid: dict[int, ProcessSnapshot] = {}
        self._last: list[ProcessSnapshot] = []

    def read(
        self,
        compute_mem: dict[int, int | None],
        graphics_mem: dict[int, int | None],
        util: dict[int, tuple[float, float]] | None,
        index: int,
        uuid: str,
    ) -> list[ProcessSnapshot]:
        inputs = self._inputs
        if (
            inputs is not None
            and inputs[2] is util
            and inputs[0] == compute_mem
            and inputs[1] == graphics_mem
            and inputs[3:] == (index, uuid)
        ):
            return list(self._last)
        self._last = processes_of(compute_mem, graphics_mem, util, index, uuid, self._by_pid)
        self._inputs = (compute_mem, graphics_mem, util, index, uuid)
        return list(self._last)
