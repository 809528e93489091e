"""Snapshot values: what collectors produce and every view consumes.

Frozen dataclasses with units in field names.  ``None`` always means "not
available" (unsupported by the GPU or driver, not permitted, process gone); views
show it as N/A.  Nothing here holds a live handle: a snapshot can be pickled,
recorded as JSON and replayed without NVML.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import compress, count
from operator import attrgetter, is_not
from typing import Any, TypeVar

from gputui.protocol.value import ValueBase, value_class

#: Version of the snapshot schema written to recordings and ``--json`` output.
SCHEMA_VERSION = 2

#: The valid range of every number a snapshot may hold, by the unit its field's
#: name ends with; ``FIELD_RANGES`` overrides it for one field.  Decoding (a
#: recording is untrusted input) turns a value outside its range into N/A
#: (None) where the field allows it and refuses it otherwise; the bounds are
#: wide enough for any real machine, tight enough that every view can show them.
#: Unix times: up to 2^33 s (the year 2242), so that clocks and dates always format.
UNIX_TIME_MAX_S = float(2**33)
UNIT_RANGES: dict[str, tuple[float, float]] = {
    # a device's own counters (GPM) may overshoot 100% by a little: not N/A
    "_pct": (0.0, 110.0),
    "_bytes": (0.0, float(2**60)),
    "_bytes_per_s": (0.0, float(2**50)),
    "_mhz": (0.0, 1e5),
    "_c": (-100.0, 300.0),
    "_w": (0.0, 1e5),
    "_j": (0.0, 1e15),
    "_ms": (0.0, 1e9),
    "_s": (0.0, UNIX_TIME_MAX_S),
}
#: numbers without a unit in their name, and exceptions to the units' ranges
FIELD_RANGES: dict[str, tuple[float, float]] = {
    # NVML may report a fan above 100% of its rated speed
    "DeviceSnapshot.fan_pct": (0.0, 255.0),
    # a process's CPU time over the interval, summed over its threads: many cores
    "ProcessSnapshot.cpu_pct": (0.0, 100.0 * 2**16),
    "HostSnapshot.uptime_s": (0.0, 1e10),
    "HostSnapshot.cpu_count": (1, 2**16),
    "HostSnapshot.load_1": (0.0, 1e7),
    "HostSnapshot.load_5": (0.0, 1e7),
    "HostSnapshot.load_15": (0.0, 1e7),
    "DeviceSnapshot.index": (0, 2**16),
    "DeviceSnapshot.pstate": (0, 32),
    "DeviceSnapshot.pcie_gen": (0, 64),
    "DeviceSnapshot.pcie_gen_max": (0, 64),
    "DeviceSnapshot.pcie_width": (0, 64),
    "DeviceSnapshot.pcie_width_max": (0, 64),
    "DeviceSnapshot.nvlink_links_active": (0, 1024),
    "DeviceSnapshot.ecc_errors_corrected": (0, 2**63),
    "DeviceSnapshot.ecc_errors_uncorrected": (0, 2**63),
    "DeviceSnapshot.remapped_rows_correctable": (0, 2**32),
    "DeviceSnapshot.remapped_rows_uncorrectable": (0, 2**32),
    "MigInstance.gpu_instance_id": (0, 2**32),
    "MigInstance.sm_count": (0, 2**20),
    "ProcessSnapshot.pid": (0, 2**31 - 1),
    "ProcessSnapshot.ppid": (0, 2**31 - 1),
    "ProcessSnapshot.host_pid": (0, 2**31 - 1),
    "ProcessSnapshot.gpu_index": (0, 2**16),
    # Slurm's job ids and uids are 32-bit unsigned numbers
    "SlurmJob.job_id": (0, 2**32 - 1),
    "SlurmJob.uid": (0, 2**32 - 1),
    "SlurmJob.array_job_id": (0, 2**32 - 1),
    "SlurmJob.array_task_id": (0, 2**32 - 1),
    # NVIDIA's Xid codes are small numbers; a count is a count
    "XidEvent.xid": (0, 2**16),
    "XidEvent.pid": (0, 2**31 - 1),
    "XidCount.xid": (0, 2**16),
    "XidCount.count": (0, 2**63),
}
#: any other number (a test checks that every numeric field has a range above)
INT_RANGE: tuple[float, float] = (0, 2**63)
FLOAT_RANGE: tuple[float, float] = (-1e15, 1e15)
#: the longest string a snapshot may hold (a command-line argument: Linux allows 128 KiB)
MAX_STR_CHARS = 2**17
#: the most items a list may hold (devices, processes, per-core CPU, command-line words)
MAX_ITEMS: dict[str, int] = {
    "Snapshot.devices": 4096,
    "Snapshot.processes": 2**17,
    "HostSnapshot.cpu_per_core_pct": 2**16,
    "DeviceSnapshot.throttle_reasons": 64,
    "DeviceSnapshot.mig_instances": 1024,
    "DeviceSnapshot.xid_errors": 64,
    "DeviceSnapshot.xid_counts": 1024,
    "DeviceSnapshot.xid_sources": 8,
    "ProcessSnapshot.cmdline": 2**16,
}


#: equality, hashing and repr over the dataclass fields, for every class here
#: and for other rooms' frozen value classes on ``--once``'s path (written once
#: in ``gputui.snapshot.value``, not compiled per class)
_Value = ValueBase

_V = TypeVar("_V", bound=_Value)


def evolve(value: _V, **changes: Any) -> _V:
    """A copy of ``value`` with ``changes``: ``dataclasses.replace`` without the
    call of ``__init__`` (no class here checks its fields there), a few times
    cheaper; for the collectors' per-process, per-refresh joins."""
    copy = object.__new__(type(value))
    fields = copy.__dict__
    fields.update(value.__dict__)
    for name in changes:
        if name not in value.__dataclass_fields__:
            raise TypeError(f"{type(value).__name__} has no field {name!r}")
    fields.update(changes)
    return copy


@value_class
class GpmMetrics(_Value):
    """Hopper+ GPU performance monitoring, averaged over one sampling interval."""

    sm_activity_pct: float | None = None
    sm_occupancy_pct: float | None = None
    tensor_activity_pct: float | None = None
    dram_bw_util_pct: float | None = None
    fp16_activity_pct: float | None = None
    fp32_activity_pct: float | None = None
    fp64_activity_pct: float | None = None
    pcie_tx_bytes_per_s: float | None = None
    pcie_rx_bytes_per_s: float | None = None
    nvlink_tx_bytes_per_s: float | None = None
    nvlink_rx_bytes_per_s: float | None = None


@value_class
class MigInstance(_Value):
    """One MIG GPU instance on a device in MIG mode."""

    gpu_instance_id: int
    name: str | None = None
    uuid: str | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    sm_count: int | None = None


@value_class
class XidEvent(_Value):
    """One Xid error the NVIDIA driver reported for a GPU: from NVML's critical
    Xid events, the kernel log's ``NVRM: Xid`` line, or both (one event)."""

    #: the Xid code (79: fallen off the bus, 48: double-bit ECC, ...)
    xid: int
    #: when it was reported (Unix time: the kernel log's, else when gputui read it)
    time_s: float
    #: the process the driver names in its kernel log line (NVML's event names none)
    pid: int | None = None
    #: that process's name, and the driver's words after the code; both None for
    #: another user's process (its pid alone, as for other processes gputui may
    #: not read) or where the kernel log is not readable (untrusted text)
    process_name: str | None = None
    detail: str | None = None
    #: where it was read: "nvml", "kernel log" or "nvml+kernel log"
    source: str = "nvml"


@value_class
class XidCount(_Value):
    """How many Xid errors of one code a GPU reported since gputui started
    watching (the kernel log's since boot, where it is read)."""

    xid: int
    count: int


@dataclass(frozen=True, eq=False, repr=False)
class DeviceSnapshot(_Value):
    """One GPU at one moment."""

    index: int
    name: str
    uuid: str
    bus_id: str | None = None
    # utilization (percent of the last sample period)
    util_gpu_pct: float | None = None
    util_mem_pct: float | None = None
    # memory
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    mem_reserved_bytes: int | None = None
    bar1_used_bytes: int | None = None
    bar1_total_bytes: int | None = None
    # thermals and power
    temp_gpu_c: float | None = None
    temp_mem_c: float | None = None
    fan_pct: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    energy_j: float | None = None
    # clocks
    clock_sm_mhz: int | None = None
    clock_mem_mhz: int | None = None
    clock_gfx_mhz: int | None = None
    clock_sm_max_mhz: int | None = None
    clock_mem_max_mhz: int | None = None
    clock_gfx_max_mhz: int | None = None
    pstate: int | None = None
    #: decoded clock-event (throttle) reasons, e.g. ("sw_power_cap",); () = none active
    throttle_reasons: tuple[str, ...] | None = None
    # PCIe
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    pcie_tx_bytes_per_s: float | None = None
    pcie_rx_bytes_per_s: float | None = None
    # NVLink
    nvlink_links_active: int | None = None
    nvlink_tx_bytes_per_s: float | None = None
    nvlink_rx_bytes_per_s: float | None = None
    # reliability
    ecc_enabled: bool | None = None
    ecc_errors_corrected: int | None = None
    ecc_errors_uncorrected: int | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failed: bool | None = None
    #: the newest Xid errors, oldest first (at most a few); () = none seen
    xid_errors: tuple[XidEvent, ...] = ()
    #: every Xid error seen, counted by code (ascending); () = none seen
    xid_counts: tuple[XidCount, ...] = ()
    #: where Xid errors are watched for this GPU ("nvml", "kernel log"); () when
    #: neither can be read here; None when not known (a recording, an old gputui)
    xid_sources: tuple[str, ...] | None = None
    # modes
    mig_enabled: bool | None = None
    mig_instances: tuple[MigInstance, ...] = ()
    compute_mode: str | None = None
    persistence_mode: bool | None = None
    #: True/False once known; None when the query itself is unavailable
    gpm_supported: bool | None = None
    gpm: GpmMetrics | None = None
    #: set when the device fell off the bus or stopped answering
    lost: bool = False

    @property
    def mem_used_pct(self) -> float | None:
        if self.mem_used_bytes is None or not self.mem_total_bytes:
            return None
        return 100.0 * self.mem_used_bytes / self.mem_total_bytes


@value_class
class PodInfo(_Value):
    """The Kubernetes pod a container belongs to: its UID and QoS class (from
    the cgroup), its name and namespace (when gputui may read them)."""

    uid: str
    name: str | None = None
    namespace: str | None = None
    #: "guaranteed", "burstable" or "besteffort"
    qos: str | None = None


@value_class
class ContainerInfo(_Value):
    """The container, and the Kubernetes pod, a process runs in (from its cgroup).

    Names come from the runtime's API and the process's own files when gputui
    may read them; other users choose them (untrusted text)."""

    #: "docker", "containerd", "cri-o", "podman", or "kubernetes" (a pod's
    #: container whose cgroup path does not name its runtime)
    runtime: str
    #: the runtime's container id; None for a pod's process outside its
    #: containers (CRI-O's conmon)
    id: str | None = None
    #: the runtime's name for it (a pod's container: its Kubernetes name)
    name: str | None = None
    pod: PodInfo | None = None
    #: why a name is missing, in words (None: nothing is)
    note: str | None = None


@value_class
class SlurmJob(_Value):
    """The Slurm job step a process runs in, from its cgroup path (Slurm's
    ``job_<id>/step_<step>`` directories, cgroup v1 or v2).

    The name comes from the process's own ``SLURM_JOB_NAME`` where gputui may
    read its environment, else from ``scontrol show job``; users choose it
    (untrusted text)."""

    #: the job's own id (a job array's task has one of its own)
    job_id: int
    #: the step: "0", "1", ... (srun), "batch", "extern", "interactive", "0+1"
    #: (a heterogeneous job's component); None where the path names none
    step: str | None = None
    #: the job's owner, from a cgroup v1 path (``uid_<uid>``); None under v2
    uid: int | None = None
    name: str | None = None
    #: a job array's task: the array's job id and the task's index
    array_job_id: int | None = None
    array_task_id: int | None = None
    #: why the name is missing, in words (None: nothing is)
    note: str | None = None


@dataclass(frozen=True, eq=False, repr=False)
class ProcessSnapshot(_Value):
    """One process using one GPU (a process on two GPUs gives two rows)."""

    pid: int
    gpu_index: int
    gpu_uuid: str
    #: "compute", "graphics" or "compute+graphics"
    type: str
    #: gputui in another PID namespace (a container): the host's pid that NVML
    #: reported, where it differs from ``pid``, or equals it because gputui's
    #: namespace does not show that process (``pid_is_host``)
    host_pid: int | None = None
    gpu_mem_bytes: int | None = None
    #: from NVML process utilization (slower cadence); None when not sampled
    sm_pct: float | None = None
    mem_bw_pct: float | None = None
    # host side (psutil); None when the process vanished or access is denied
    user: str | None = None
    name: str | None = None
    cmdline: tuple[str, ...] | None = None
    cpu_pct: float | None = None
    rss_bytes: int | None = None
    start_time_s: float | None = None
    ppid: int | None = None
    #: the process carries a gputui hook and can be attached to
    hooked: bool = False
    #: the container (and pod) it runs in; None on the host or when unknown
    container: ContainerInfo | None = None
    #: the Slurm job step it runs in; None outside Slurm or when unknown
    slurm: SlurmJob | None = None

    @property
    def pid_is_host(self) -> bool:
        """``pid`` is the host's, and gputui's PID namespace does not show that
        process: no host details, signals or attach for it."""
        return self.host_pid is not None and self.host_pid == self.pid

    @property
    def key(self) -> tuple[str, int]:
        # a host pid may share its number with a process of gputui's namespace
        return (self.gpu_uuid, -self.pid if self.pid_is_host else self.pid)

    @property
    def command(self) -> str:
        if self.cmdline:
            return " ".join(self.cmdline)
        return self.name or "N/A"


_PLACES = attrgetter("container", "host_pid")
_NOWHERE = frozenset(((None, None),))


def any_placed(processes: Sequence[ProcessSnapshot]) -> bool:
    """Whether one of ``processes`` runs in a container or is a host pid (the
    views show a container column then); the common answer, none, is found in C
    (a node may have thousands of processes)."""
    if _NOWHERE.issuperset(map(_PLACES, processes)):
        return False
    return any(p.container is not None or p.pid_is_host for p in processes)


_SLURM = attrgetter("slurm")


def any_in_job(processes: Sequence[ProcessSnapshot]) -> bool:
    """Whether one of ``processes`` runs in a Slurm job (the views show a job
    column then); the common answer, none, is found in C."""
    return any(map(_SLURM, processes))


def replaced(new: Sequence[object], old: Sequence[object]) -> list[int] | None:
    """The positions where ``new`` holds another object than ``old`` (by
    identity: no object is read, so thousands cost a pass over two arrays of
    pointers), or None when their lengths differ.  A replay reuses each process
    that did not change, so most positions hold the same object."""
    if len(new) != len(old):
        return None
    last_new, last_old, last_changed = _REPLACED[0]  # one read: one question's answer
    if last_new is new and last_old is old:
        return list(last_changed)  # the views of one refresh ask the same question
    changed = list(compress(count(), map(is_not, new, old)))
    if type(new) is tuple and type(old) is tuple:  # the same objects: the same answer
        _REPLACED[0] = (new, old, changed)
    return list(changed)


#: the last question to :func:`replaced` and its answer, as one tuple
_REPLACED: list[tuple[Any, Any, list[int]]] = [(None, None, [])]


class PlacedMemo:
    """:func:`any_placed` (or ``test``, e.g. :func:`any_in_job`) of successive
    process lists, reading only the processes that are not the ones at their
    place in the previous list while none was placed (the common case, on
    every refresh)."""

    def __init__(self, test: Callable[[Sequence[ProcessSnapshot]], bool] | None = None) -> None:
        self._test = any_placed if test is None else test
        self._processes: tuple[ProcessSnapshot, ...] = ()
        self._placed = False

    def __call__(self, processes: Sequence[ProcessSnapshot]) -> bool:
        processes = tuple(processes)
        changed = replaced(processes, self._processes)
        if changed is None or self._placed or not self._processes:
            placed = self._test(processes)
        else:
            placed = self._test([processes[i] for i in changed])
        self._processes, self._placed = processes, placed
        return placed


@dataclass(frozen=True, eq=False, repr=False)
class HostSnapshot(_Value):
    """The host: CPU, memory, swap, load, uptime."""

    hostname: str = ""
    cpu_count: int | None = None
    cpu_pct: float | None = None
    cpu_per_core_pct: tuple[float, ...] = ()
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    mem_available_bytes: int | None = None
    swap_used_bytes: int | None = None
    swap_total_bytes: int | None = None
    load_1: float | None = None
    load_5: float | None = None
    load_15: float | None = None
    uptime_s: float | None = None


@dataclass(frozen=True, eq=False, repr=False)
class Snapshot(_Value):
    """Everything one sampling pass saw."""

    timestamp_s: float
    host: HostSnapshot = field(default_factory=HostSnapshot)
    devices: tuple[DeviceSnapshot, ...] = ()
    processes: tuple[ProcessSnapshot, ...] = ()
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    nvml_version: str | None = None
    #: how long the sampling pass took on the poller thread
    sample_latency_ms: float | None = None
    #: a problem worth showing (e.g. "GPU 1 lost"), None when all is well
    error: str | None = None

    def processes_on(self, gpu_index: int) -> tuple[ProcessSnapshot, ...]:
        return tuple(p for p in self.processes if p.gpu_index == gpu_index)
