"""The GPU collector: one typed, failsafe wrapper over nvidia-ml-py (pynvml).

One NVML session per collector: ``nvmlInit`` in :meth:`NvmlCollector.open`
(called by the constructor), ``nvmlShutdown`` in :meth:`NvmlCollector.close`.
:meth:`NvmlCollector.sample` never raises: an unsupported query, a missing
function, a vanished process or a lost GPU becomes ``None`` (or ``lost=True``)
in the snapshot, and a problem worth showing goes to :attr:`GpuSample.error`.

Cost: what never changes is read once; what rarely changes (power limit, modes,
ECC counts, remapped rows, NVLink link states, the PCIe link width, BAR1, the
energy counter) every ``slow_every`` samples;
per-process utilization (~2 ms per call) every ``process_util_every`` samples.
The blocking ``nvmlDeviceGetPcieThroughput`` (~20 ms) is never called: PCIe and
NVLink rates come from cumulative byte counters and from GPM.  Critical Xid
events are read at every sample without waiting (:mod:`gputui.nvml.xid_events`):
one call that answers "none" in the common case.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from gputui.errors import NvmlUnavailable
from gputui.nvml import startup as nvml_open
from gputui.nvml.device import DeviceLost, DeviceReader
from gputui.nvml.fields import ErrorCodes, as_text, cuda_version_string
from gputui.nvml.kernel_log import KMSG, KernelLog, bus_key
from gputui.nvml.xid_events import RawXid, XidEvents
from gputui.nvml.xid_log import KERNEL_LOG, NVML, XidLog
from gputui.protocol.value import ValueBase, value_class
from gputui.snapshot.model import DeviceSnapshot, ProcessSnapshot

_TRY_DEMO = nvml_open.TRY_DEMO


@value_class
class GpuSample(ValueBase):
    """What one pass over NVML saw: devices and the GPU side of their processes."""

    devices: tuple[DeviceSnapshot, ...] = ()
    #: GPU-side fields only; the host collector adds user, command line, CPU, RSS
    processes: tuple[ProcessSnapshot, ...] = ()
    driver_version: str | None = None
    #: e.g. "13.0"
    cuda_driver_version: str | None = None
    nvml_version: str | None = None
    #: e.g. "GPU 1 (GPU-5e1c...) is lost (fell off the bus?)"; None when all is well
    error: str | None = None
    #: the critical Xid events NVML reported since the last sample
    xids: tuple[RawXid, ...] = ()


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc) or type(exc).__name__
    except Exception:  # NVMLError.__str__ may call into a broken library
        return type(exc).__name__


def init_failure_message(nvml: Any, exc: BaseException) -> str:
    """One line saying why NVML would not start, ending with what to try."""
    code = getattr(exc, "value", None)

    def is_code(name: str, default: int) -> bool:
        return code == getattr(nvml, name, default)

    if is_code("NVML_ERROR_LIBRARY_NOT_FOUND", 12):
        return f"no NVIDIA driver found: libnvidia-ml.so is missing; {_TRY_DEMO}"
    if is_code("NVML_ERROR_DRIVER_NOT_LOADED", 9):
        return (
            "the NVIDIA driver is not loaded (no GPU, or its kernel module is not running); "
            f"{_TRY_DEMO}"
        )
    if is_code("NVML_ERROR_LIB_RM_VERSION_MISMATCH", 18):
        return (
            "the NVML library and the NVIDIA kernel driver have different versions "
            f"(reboot or reload the driver); {_TRY_DEMO}"
        )
    if is_code("NVML_ERROR_NO_PERMISSION", 4):
        return f"no permission to use the NVIDIA driver (check /dev/nvidia*); {_TRY_DEMO}"
    return f"NVML failed to initialise: {_safe_str(exc)}; {_TRY_DEMO}"


def probe(nvml: Any | None = None) -> str | None:
    """None when NVML works and sees a GPU, else the reason (one line).

    Cheap (init, count, shutdown); used by ``make run`` to fall back to the demo.
    """
    try:
        nv = nvml if nvml is not None else nvml_open.import_pynvml()
    except NvmlUnavailable as exc:
        return str(exc)
    try:
        nv.nvmlInit()
    except Exception as exc:  # every init failure becomes a reason
        return init_failure_message(nv, exc)
    try:
        count = int(nv.nvmlDeviceGetCount())
    except Exception as exc:
        return f"NVML could not count the GPUs: {_safe_str(exc)}; {_TRY_DEMO}"
    finally:
        with contextlib.suppress(Exception):  # nothing useful to do about it
            nv.nvmlShutdown()
    if count < 1:
        return f"NVML sees no NVIDIA GPU; {_TRY_DEMO}"
    return None


class NvmlCollector:
    """Samples every GPU NVML can see.  Thread-safe: calls are serialised.

    ``started``: a session :func:`nvml_open.start` began (NVML initialised, the
    handles open), taken over instead of opening one.  ``skip``: device queries
    never made (their values stay None), e.g. :data:`nvml_open.TEXT_ONE_SHOT_SKIPS`.
    ``kernel_log``: the file the driver's ``NVRM: Xid`` lines are read from
    (``/dev/kmsg``), or its reader; None: not read.  ``wall_clock``: the time
    an NVML event is stamped with.
    """

    def __init__(
        self,
        nvml: Any | None = None,
        *,
        process_util_every: int = 5,
        slow_every: int = 10,
        clock: Callable[[], float] = time.monotonic,
        started: nvml_open.Started | None = None,
        skip: frozenset[str] = frozenset(),
        kernel_log: str | KernelLog | None = KMSG,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._nvml = nvml if started is None else started.nvml
        self._started = started
        self._skip = skip
        self._clock = clock
        self.process_util_every = max(1, process_util_every)
        self.slow_every = max(1, slow_every)
        self._lock = threading.Lock()
        self._open = False
        self._readers: list[DeviceReader] = []
        #: the critical Xid events' set (None: not asked, or closed)
        self._xids: XidEvents | None = None
        #: the kernel log's Xid lines (opened at the first sample)
        self._kernel = KernelLog(kernel_log) if isinstance(kernel_log, str) else kernel_log
        self._xid_log = XidLog()
        self._wall_clock = wall_clock
        #: what the readers' xid_sources were last set from
        self._xid_watch: tuple[frozenset[int] | None, bool | None] | None = None
        self._samples = 0
        self.driver_version: str | None = None
        self.cuda_driver_version: str | None = None
        self.nvml_version: str | None = None
        self.open()

    # ------------------------------------------------------------- lifecycle

    def open(self) -> None:
        """Start the NVML session; raises NvmlUnavailable with one clear line."""
        with self._lock:
            if self._open:
                return
            started, self._started = self._started, None
            if started is not None:
                self._take_over(started)
            else:
                nv = self._nvml if self._nvml is not None else nvml_open.import_pynvml()
                self._nvml = nv
                try:
                    nv.nvmlInit()
                except Exception as exc:  # every init failure is one line for the user
                    raise NvmlUnavailable(init_failure_message(nv, exc)) from exc
            nv = self._nvml
            self._open = True
            try:
                self._discover(nv, started)
            except Exception as exc:
                self._shutdown()
                raise NvmlUnavailable(
                    f"NVML started but could not list the GPUs: {_safe_str(exc)}; {_TRY_DEMO}"
                ) from exc

    def _take_over(self, started: nvml_open.Started) -> None:
        """The session ``started`` began, or its error as the one line."""
        error = started.error
        if isinstance(error, NvmlUnavailable):
            raise error  # pynvml is not installed: already worded
        if error is not None:
            raise NvmlUnavailable(init_failure_message(started.nvml, error)) from error
        self._nvml = started.nvml

    def _discover(self, nv: Any, started: nvml_open.Started | None = None) -> None:
        errors = ErrorCodes.of(nv)
        self.driver_version = as_text(_quiet(nv, "nvmlSystemGetDriverVersion"))
        cuda = _quiet(nv, "nvmlSystemGetCudaDriverVersion_v2")
        if cuda is None:
            cuda = _quiet(nv, "nvmlSystemGetCudaDriverVersion")
        self.cuda_driver_version = cuda_version_string(cuda)
        if "nvml_version" not in self._skip:
            self.nvml_version = as_text(_quiet(nv, "nvmlSystemGetNVMLVersion"))
        if started is not None and started.count_error is not None:
            raise started.count_error
        count = len(started.handles) if started is not None else int(nv.nvmlDeviceGetCount())
        now = self._clock()
        for index in range(count):
            try:
                if started is not None:
                    handle = started.handle(index)
                else:
                    handle = nv.nvmlDeviceGetHandleByIndex(index)
            except errors.base as exc:
                code = errors.code_of(exc)
                if code in (getattr(nv, "NVML_ERROR_NO_PERMISSION", 4),):
                    # a GPU this process may not use (cgroups, CUDA_VISIBLE_DEVICES
                    # enforced by the container runtime): nvidia-smi hides it too
                    continue
                reader = DeviceReader(nv, errors, index, None, self._skip)
                reader.lost_reason = errors.lost.get(
                    code if code is not None else -1, f"cannot be opened ({_safe_str(exc)})"
                )
                self._readers.append(reader)
                continue
            reader = DeviceReader(nv, errors, index, handle, self._skip)
            # first counter and GPM readings now, so the first sample has rates
            reader.prime(now)
            self._readers.append(reader)
        if "xid_events" not in self._skip:
            live = [(r.index, r.handle) for r in self._readers if r.lost_reason is None]
            self._xids = XidEvents(nv, errors, live)

    @property
    def xid_unwatched(self) -> dict[int | None, str]:
        """Why a GPU's (by index; None: every GPU's) Xid events are not read
        from NVML here."""
        if self._xids is None:
            return {None: "Xid events were not asked for"}
        return dict(self._xids.unwatched)

    def close(self) -> None:
        """End the NVML session and free GPM buffers; safe to call twice.  (A
        process about to leave need not: the kernel ends the session and frees the
        buffers with the process, and ``nvmlShutdown`` takes milliseconds.)"""
        with self._lock:
            self._shutdown()

    def _shutdown(self) -> None:
        if not self._open:
            return
        self._open = False
        if self._xids is not None:
            self._xids.close()
        if self._kernel is not None:
            self._kernel.close()
        for reader in self._readers:
            reader.close()
        self._readers = []
        nv: Any = self._nvml
        with contextlib.suppress(Exception):  # the session is over either way
            nv.nvmlShutdown()

    def __enter__(self) -> NvmlCollector:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def device_count(self) -> int:
        return len(self._readers)

    # ---------------------------------------------------------------- sample

    def sample(self) -> GpuSample:
        """Every device and its processes now.  Never raises."""
        with self._lock:
            if not self._open:
                return GpuSample(error="the NVML session is closed")
            ordinal = self._samples
            self._samples += 1
            slow = ordinal % self.slow_every == 0
            process_util = ordinal % self.process_util_every == 0
            now = self._clock()
            devices: list[DeviceSnapshot] = []
            processes: list[ProcessSnapshot] = []
            problems: list[str] = []
            xid_events = self._xids
            xids = xid_events.poll() if xid_events is not None else []
            self._watch_xids(xids)
            for reader in self._readers:
                try:
                    device, device_processes = reader.sample(now, slow, process_util)
                except DeviceLost as lost:
                    reader.lost_reason = lost.reason
                    devices.append(reader.lost_snapshot())
                    problems.append(f"GPU {reader.index} ({reader.uuid}) {lost.reason}")
                    continue
                except Exception as exc:  # one device must not hide the others
                    devices.append(reader.identity_snapshot())
                    problems.append(f"GPU {reader.index}: {type(exc).__name__}: {_safe_str(exc)}")
                    continue
                devices.append(device)
                processes.extend(device_processes)
            return GpuSample(
                devices=tuple(devices),
                processes=tuple(processes),
                driver_version=self.driver_version,
                cuda_driver_version=self.cuda_driver_version,
                nvml_version=self.nvml_version,
                error="; ".join(problems) if problems else None,
                xids=tuple(xids),
            )

    def _watch_xids(self, events: list[RawXid]) -> None:
        """The kernel log's new Xid lines and NVML's ``events`` into each GPU's
        errors, and where each GPU's are watched (the readers hand both to their
        snapshots, so a sample without a new error makes nothing new)."""
        lines = self._kernel.read() if self._kernel is not None else []
        if events or lines:
            gpu_of = {}
            for reader in self._readers:
                key = bus_key(reader.bus_id)
                if key is not None:
                    gpu_of[key] = reader.index
            changed = self._xid_log.add(events, lines, gpu_of, self._wall_clock())
            for reader in self._readers:
                if reader.index in changed:
                    errors, counts = self._xid_log.values(reader.index)
                    reader.xid_fields = {
                        **reader.xid_fields,
                        "xid_errors": errors,
                        "xid_counts": counts,
                    }
        watched = self._xids.watched if self._xids is not None else None
        readable = self._kernel.readable if self._kernel is not None else False
        if (watched, readable) != self._xid_watch:
            self._xid_watch = (watched, readable)
            for reader in self._readers:
                sources = [NVML] if watched is not None and reader.index in watched else []
                if readable:
                    sources.append(KERNEL_LOG)
                reader.xid_fields = {**reader.xid_fields, "xid_sources": tuple(sources)}

    def disabled_queries(self, index: int) -> frozenset[str]:
        """Queries found unsupported on one device (for diagnostics and tests)."""
        for reader in self._readers:
            if reader.index == index:
                return frozenset(reader.disabled)
        return frozenset()


def _quiet(nv: Any, name: str) -> Any:
    """A system-level query with no arguments; None when it fails in any way."""
    try:
        return getattr(nv, name)()
    except Exception:  # versions are nice to have, never fatal
        return None
