"""Memory snapshots on demand: CUDA allocation history over N steps.

A viewer's request only arms the controller (I/O thread).  The training thread,
at the next step boundary, turns torch's allocation history on
(``torch.cuda.memory._record_memory_history``: every alloc and free with its
Python stack, in a ring of ``max_entries`` events), marks each step boundary in
that history, and after N steps takes the snapshot (``_snapshot()``) and turns
the history off again.  A worker thread then computes the summary
(:mod:`gputui.hook._memsummary`) and writes torch's snapshot file, the pickle
that ``torch.cuda.memory._dump_snapshot`` writes and pytorch.org/memory_viz
opens, into a private directory.  gputui never reads such a file back.
"""

from __future__ import annotations

import os
import sysconfig
import threading
import time
from collections.abc import Callable
from typing import Any

import gputui
from gputui.hook._memsummary import summarize
from gputui.hook._recorder import FLAG_PROFILED, Recorder
from gputui.hook._trace_export import prune_oldest
from gputui.hook._window import Post, WindowController, file_stem
from gputui.protocol import memsnap as ms
from gputui.protocol.memsnap import (
    MemorySnapshotRequest,
    MemorySnapshotResult,
    MemorySnapshotStatus,
)

KEEP_SNAPSHOTS = 20
#: the marker block allocated (and freed at once) at each step boundary
MARKER_BYTES = 512

NO_CUDA = "memory snapshots need a CUDA job: CUDA is not in use in this process"
OLD_TORCH = (
    "memory snapshots need torch 2.1 or newer (torch.cuda.memory._record_memory_history "
    "with string options); this job runs torch {version}"
)
USER_HISTORY = (
    "the job records its own allocation history (torch.cuda.memory._record_memory_history "
    "is on); gputui leaves it alone"
)


def snapshots_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(base, "gputui", "memory")
    os.makedirs(path, mode=0o700, exist_ok=True)
    try:
        # snapshots hold the job's stacks (file names, code lines): keep them private
        os.chmod(path, 0o700)
    except OSError:
        pass
    return path


def _step_marker(torch: Any, device: int) -> None:
    """Allocate and free a small block: the alloc event, with this function in its
    stack, marks a step boundary in the allocator's history."""
    ptr = torch.cuda.caching_allocator_alloc(MARKER_BYTES, device)
    torch.cuda.caching_allocator_delete(ptr)


_MARKER_FILE = _step_marker.__code__.co_filename
_MARKER_NAME = _step_marker.__name__


def is_marker(frames: Any) -> bool:
    """The frames of a marker allocation: ``_step_marker`` near their top."""
    for frame in frames[:4]:
        if (
            isinstance(frame, dict)
            and frame.get("name") == _MARKER_NAME
            and frame.get("filename") == _MARKER_FILE
        ):
            return True
    return False


def skip_roots(torch: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(always skipped, skipped outside site-packages): path prefixes whose frames
    are not allocation sites — torch and gputui; the standard library."""
    libs = []
    for module in (torch, gputui):
        path = getattr(module, "__file__", None)
        if path:
            libs.append(os.path.dirname(os.path.abspath(path)) + os.sep)
    stdlib = []
    for key in ("stdlib", "platstdlib"):
        try:
            stdlib.append(sysconfig.get_paths()[key].rstrip(os.sep) + os.sep)
        except (KeyError, AttributeError):
            pass
    return tuple(libs), tuple(dict.fromkeys(stdlib))


def unsupported(torch: Any, device: int | None) -> str | None:
    """Why this job cannot take a memory snapshot, or None."""
    cuda = getattr(torch, "cuda", None)
    try:
        in_use = cuda is not None and bool(cuda.is_initialized())
    except Exception:
        in_use = False
    if not in_use or device is None:
        return NO_CUDA
    memory = getattr(cuda, "memory", None)
    needed = (
        callable(getattr(memory, "_record_memory_history", None))
        and callable(getattr(memory, "_snapshot", None))
        and callable(getattr(cuda, "caching_allocator_alloc", None))
        and hasattr(getattr(torch, "_C", None), "_cuda_record_memory_history")
    )
    if not needed:
        return OLD_TORCH.format(version=str(getattr(torch, "__version__", "?"))[:32])
    return None


def history_enabled(torch: Any) -> bool:
    probe = getattr(getattr(torch, "_C", None), "_cuda_isHistoryEnabled", None)
    try:
        return bool(probe()) if callable(probe) else False
    except Exception:
        return False


class MemorySnapshotController(WindowController):
    """Runs memory snapshots for viewers.  ``recorder`` is the training thread's
    side (the controller is called from its step boundaries); ``post`` sends a
    message through the I/O thread; ``capture_busy`` says whether a profiler
    capture is armed or running (the two never overlap)."""

    def __init__(self, recorder: Recorder, post: Post, capture_busy: Callable[[], bool]) -> None:
        super().__init__(recorder, post)  # state: None, armed, recording, processing
        self.capture_busy = capture_busy
        self.active: MemorySnapshotRequest | None = None
        self.history_on = False
        self.start_ms: float | None = None
        self.marker_errors = 0

    # -- I/O thread -------------------------------------------------------------------
    def request(self, vid: int | None, req: MemorySnapshotRequest) -> MemorySnapshotStatus:
        """Arm a snapshot; the status says whether it will run (ranges were
        checked when the request was decoded)."""
        cid = req.id
        torch = self.recorder.torch
        if torch is None:
            return MemorySnapshotStatus(ms.UNSUPPORTED, cid, NO_CUDA + " (torch not imported)")
        if not self.recorder.enabled:
            return MemorySnapshotStatus(ms.REFUSED, cid, "the hook is disabled")
        if self.state is not None:
            return MemorySnapshotStatus(ms.BUSY, cid, "a memory snapshot is already in progress")
        if self.capture_busy() or self.recorder.on_boundary is not None:
            return MemorySnapshotStatus(ms.BUSY, cid, "a profiler capture is in progress")
        problem = unsupported(torch, self.recorder.device)
        if problem is not None:
            return MemorySnapshotStatus(ms.UNSUPPORTED, cid, problem)
        if history_enabled(torch):
            return MemorySnapshotStatus(ms.REFUSED, cid, USER_HISTORY)
        self.requester = vid
        self.active = req
        self.state = ms.ARMED
        # Arm last: from here the training thread picks it up at the end of the
        # step in progress (made a full step), or at worst of the next full one.
        self.recorder.on_boundary = self.on_boundary
        self.recorder.want_full()
        return MemorySnapshotStatus(ms.ARMED, cid, steps=req.steps)

    def stop(self) -> None:
        """Turn off a history this controller left on, without a result (the hook
        is being uninstalled: no step boundary will come)."""
        if self.state in (ms.ARMED, ms.RECORDING):
            self._history_off()
            self._clear()

    # -- training thread --------------------------------------------------------------
    def on_boundary(self, index: int) -> None:
        req = self.active
        if req is None:
            self.recorder.on_boundary = None
            return
        try:
            if self.state == ms.ARMED:
                self._begin(req, index)
            elif self.state == ms.RECORDING:
                self._mark()
                self.recorded += 1
                if self.recorded >= req.steps:
                    self._finish(req, index)
                else:
                    self.recorder.flags |= FLAG_PROFILED
        except Exception as exc:
            self._abort(req, exc)

    def _history(self, *args: Any, **kwargs: Any) -> None:
        self.recorder.torch.cuda.memory._record_memory_history(*args, **kwargs)

    def _mark(self) -> None:
        try:
            _step_marker(self.recorder.torch, self.recorder.device or 0)
        except Exception:
            # A missing boundary only narrows the growth verdict (the summary says so).
            self.marker_errors += 1

    def _begin(self, req: MemorySnapshotRequest, index: int) -> None:
        t0 = time.perf_counter()
        self.started_wall = time.time()
        # Python stacks only (C++ unwinding costs far more per allocation), and
        # stacks for allocations, not for frees.
        self._history("all", context="alloc", stacks="python", max_entries=req.max_entries)
        self.history_on = True
        self._mark()
        self.start_ms = round((time.perf_counter() - t0) * 1000.0, 3)
        self.state = ms.RECORDING
        self.recorded = 0
        self.first_step = index
        self.recorder.flags |= FLAG_PROFILED  # the history slows allocations down
        self.post(
            self.requester,
            MemorySnapshotStatus(ms.RECORDING, req.id, step=index, steps=req.steps).to_wire(),
        )

    def _finish(self, req: MemorySnapshotRequest, index: int) -> None:
        torch = self.recorder.torch
        t0 = time.perf_counter()
        # The snapshot first: turning the history off clears torch's trace.
        snapshot = torch.cuda.memory._snapshot()
        self._history(None)
        self.history_on = False
        t1 = time.perf_counter()
        meta: dict[str, Any] = {
            "id": req.id,
            "pid": os.getpid(),
            "device": self.recorder.device,
            "first_step": self.first_step,
            "last_step": index - 1,
            "steps": req.steps,
            "started": round(self.started_wall, 3),
            "window_end_wall": round(time.time(), 3),
            "max_entries": req.max_entries,
            "start_ms": self.start_ms,
            "stop_ms": round((t1 - t0) * 1000.0, 3),
        }
        requester = self.requester
        self.state = ms.PROCESSING
        self.active = None
        self.recorder.on_boundary = None
        # Posted before the worker starts, so that it always precedes the result.
        self.post(requester, MemorySnapshotStatus(ms.PROCESSING, req.id).to_wire())
        worker = threading.Thread(
            target=self._process,
            args=(snapshot, meta, requester, t1),
            name="gputui-memsnap",
            daemon=True,
        )
        worker.start()

    def _history_off(self) -> None:
        if self.history_on:
            try:
                self._history(None)
            except Exception:
                pass
            self.history_on = False

    def _abort(self, req: MemorySnapshotRequest, exc: BaseException) -> None:
        self._history_off()
        requester = self.requester
        self._clear()
        reason = f"{type(exc).__name__}: {exc}"[:1000]
        self.post(requester, MemorySnapshotStatus(ms.FAILED, req.id, reason).to_wire())

    def _clear(self) -> None:
        self.recorder.on_boundary = None
        self.active = None
        self.state = None
        self.requester = None

    # -- worker thread ----------------------------------------------------------------
    def _process(
        self, snapshot: Any, meta: dict[str, Any], requester: int | None, window_end: float
    ) -> None:
        fields: dict[str, Any] = {}
        try:
            t0 = time.perf_counter()
            libs, stdlib = skip_roots(self.recorder.torch)
            fields.update(
                summarize(
                    snapshot,
                    meta["device"],
                    is_marker,
                    skip_roots=libs,
                    stdlib_roots=stdlib,
                    max_entries=meta["max_entries"],
                )
            )
            if self.marker_errors:
                fields["notes"] = (
                    *fields.get("notes", ()),
                    f"{self.marker_errors} step boundary marker(s) could not be placed",
                )
            t1 = time.perf_counter()
            fields["summary_ms"] = round((t1 - t0) * 1000.0, 3)
            try:
                path = self._write(snapshot, meta)
                fields["snapshot_path"] = path
                fields["snapshot_bytes"] = os.path.getsize(path)
            except Exception as exc:
                fields["snapshot_error"] = f"{type(exc).__name__}: {exc}"[:1000]
            fields["dump_ms"] = round((time.perf_counter() - t1) * 1000.0, 3)
            fields["ready_after_ms"] = round((time.perf_counter() - window_end) * 1000.0, 3)
        except Exception as exc:
            fields["error"] = f"{type(exc).__name__}: {exc}"[:1000]
        finally:
            del snapshot
            fields.update(meta)
            result = MemorySnapshotResult(**fields).to_wire()
            self.marker_errors = 0
            self._sent(result)
        self.post(requester, result)

    @staticmethod
    def _write(snapshot: Any, meta: dict[str, Any]) -> str:
        # The same bytes torch.cuda.memory._dump_snapshot writes (it pickles the
        # dict _snapshot() returns), from the snapshot already taken at the
        # window's end: a second _snapshot() now would find the history off.
        import pickle

        name = file_stem(meta) + ".pickle"
        directory = snapshots_dir()
        path = os.path.join(directory, name)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(path, flags, 0o600)
        with os.fdopen(fd, "wb") as out:
            pickle.dump(snapshot, out)
        _prune(directory)
        return path


def _prune(directory: str) -> None:
    prune_oldest(directory, "*-steps*.pickle", KEEP_SNAPSHOTS)
