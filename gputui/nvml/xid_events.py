"""NVML's critical Xid events: one event set, registered for
``nvmlEventTypeXidCriticalError`` on every GPU that reports it, read without
waiting (``nvmlEventSetWait_v2`` with a zero timeout) at every sample, on the
collector's (the poller's) thread.

NVML's event carries the GPU, the Xid code and, on a MIG device, the GPU and
compute instance; it names no process (the kernel log's line does:
:mod:`gputui.host.kernel_log`).  An event set that cannot be made or read, a
GPU that does not report Xid events, a lost GPU: each leaves the GPU unwatched
here and says why; nothing here raises.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterable
from typing import Any, NamedTuple

from gputui.nvml.fields import ErrorCodes

#: nvmlEventTypeXidCriticalError
XID_CRITICAL_ERROR = 0x0000000000000008
#: NVML_ERROR_TIMEOUT: no event waiting
TIMEOUT = 10
#: events read at most per sample (a storm of Xid 13s waits for the next one)
MAX_EVENTS_PER_POLL = 64
#: a read that fails this many times in a row (not a timeout) ends the watch
MAX_FAILURES = 3
#: gpuInstanceId of an event on a GPU not in MIG mode
NO_INSTANCE = 0xFFFFFFFF


class RawXid(NamedTuple):
    """One Xid event as NVML gives it: the GPU's index, the code, the MIG GPU
    instance (None: the whole GPU)."""

    gpu: int
    xid: int
    gpu_instance_id: int | None


def handle_key(handle: Any) -> Any:
    """A device handle as a dictionary key: NVML's handle is a pointer, and an
    event's ``device`` is another ctypes object holding the same address."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return handle


class XidEvents:
    """The event set of one NVML session.  Not thread-safe: the collector
    serialises calls."""

    def __init__(self, nvml: Any, errors: ErrorCodes, handles: Iterable[tuple[int, Any]]) -> None:
        self._nvml = nvml
        self._errors = errors
        self._set: Any = None
        self._failures = 0
        #: device handle (as a key) -> its index, for the GPUs registered
        self._index: dict[Any, int] = {}
        #: the GPUs whose Xid events are read here
        self.watched: frozenset[int] = frozenset()
        #: why a GPU (by index) is not watched here; None for the whole set
        self.unwatched: dict[int | None, str] = {}
        try:
            self._set = nvml.nvmlEventSetCreate()
        except AttributeError:
            self.unwatched[None] = "this NVML has no event sets"
            return
        except errors.base as exc:
            self.unwatched[None] = f"NVML could not make an event set ({_text(exc)})"
            return
        for index, handle in handles:
            self._register(index, handle)
        if not self._index:
            self.close()

    def _register(self, index: int, handle: Any) -> None:
        nv = self._nvml
        try:
            supported = nv.nvmlDeviceGetSupportedEventTypes(handle)
        except Exception:  # asking is optional: registering says the same
            supported = None
        if isinstance(supported, int) and not supported & XID_CRITICAL_ERROR:
            self.unwatched[index] = "the GPU reports no Xid events to NVML"
            return
        try:
            nv.nvmlDeviceRegisterEvents(handle, XID_CRITICAL_ERROR, self._set)
        except AttributeError:
            self.unwatched[index] = "this NVML cannot register for events"
            return
        except self._errors.base as exc:
            self.unwatched[index] = f"NVML refused Xid events for the GPU ({_text(exc)})"
            return
        self._index[handle_key(handle)] = index
        self.watched = frozenset(self._index.values())

    def poll(self) -> list[RawXid]:
        """The Xid events waiting now (at most :data:`MAX_EVENTS_PER_POLL`),
        without waiting for one."""
        if self._set is None:
            return []
        nv, out = self._nvml, []
        for _ in range(MAX_EVENTS_PER_POLL):
            try:
                data = nv.nvmlEventSetWait_v2(self._set, 0)
            except AttributeError:
                self._give_up("this NVML cannot read events")
                break
            except self._errors.base as exc:
                code = self._errors.code_of(exc)
                if code == TIMEOUT:  # nothing waiting: the common answer
                    self._failures = 0
                    break
                if code in self._errors.lost:
                    # the GPU is gone: the collector's reads say so; events may follow
                    break
                self._failures += 1
                if self._failures >= MAX_FAILURES:
                    self._give_up(f"NVML could not read its events ({_text(exc)})")
                break
            self._failures = 0
            if not int(getattr(data, "eventType", 0)) & XID_CRITICAL_ERROR:
                continue
            index = self._index.get(handle_key(getattr(data, "device", None)))
            if index is None:
                continue
            instance = int(getattr(data, "gpuInstanceId", NO_INSTANCE))
            out.append(
                RawXid(
                    index,
                    int(getattr(data, "eventData", 0)),
                    None if instance == NO_INSTANCE else instance,
                )
            )
        return out

    def _give_up(self, reason: str) -> None:
        for index in self._index.values():
            self.unwatched[index] = reason
        self._index = {}
        self.watched = frozenset()
        self.close()

    def close(self) -> None:
        """Free the event set; safe to call twice."""
        event_set, self._set = self._set, None
        if event_set is not None:
            with contextlib.suppress(Exception):  # the session ends it either way
                self._nvml.nvmlEventSetFree(event_set)


def _text(exc: BaseException) -> str:
    try:
        return str(exc) or type(exc).__name__
    except Exception:  # NVMLError.__str__ may call into a broken library
        return type(exc).__name__
