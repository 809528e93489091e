"""On-demand torch.profiler captures, started and stopped on the training thread.

A viewer's request only arms a flag (I/O thread).  The training thread, at the
next step boundary, starts the profiler (a profiler started from another thread
misses the training thread's ops), runs ``warmup`` + ``steps`` steps and stops
it.  The stopped profile is handed to a worker thread that reduces the raw events
and exports the Chrome trace, so the training thread pays only for torch's own
``stop`` plus a thread start.  ``key_averages()`` is never called: 4-7 s on a busy
trace.

torch.profiler's ``prepare_trace`` imports ``torch._inductor`` (it asks
``hasattr(torch, "_inductor")``): seconds in a job that has not imported it.  So
an armed capture first has a thread import it, and starts at the first step
boundary after that: the training thread shares the GIL meanwhile instead of
stopping for the import.  A synchronized capture (every rank from one step)
starts at its step whatever the import's progress, as before.
"""

from __future__ import annotations

import glob
import importlib
import os
import sys
import threading
import time
from typing import Any

from gputui.hook._recorder import FLAG_PROFILED, Recorder
from gputui.hook._reduce import reduce_events
from gputui.hook._trace_export import TraceNotWritten, export_trace, prune_oldest
from gputui.hook._window import Post, WindowController, file_stem
from gputui.protocol import messages, paths
from gputui.protocol.capture import CaptureOptions, CaptureResult, CaptureStatus
from gputui.protocol.op_rows import MAX_OP_ROWS
from gputui.protocol.schema import CaptureInfo, CaptureRequest

KEEP_TRACES = 50
#: what torch.profiler's prepare_trace imports where the job has not
PRELOAD = "torch._inductor.config"
#: an armed capture waits at most this long for that import (then starts anyway)
PRELOAD_WAIT_S = 60.0


def _needs_preload(torch: Any) -> bool:
    """Whether the profiler's start would import :data:`PRELOAD`: ``torch`` is
    the job's torch, which has not imported it."""
    return sys.modules.get("torch") is torch and PRELOAD not in sys.modules


def _preload() -> None:
    """Import what the profiler's start imports (thread ``gputui-capture-prep``)."""
    importlib.import_module(PRELOAD)


def traces_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(base, "gputui", "traces")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise TraceNotWritten(f"cannot create the trace directory {path}: {exc.strerror}") from None
    try:
        os.chmod(path, 0o700)  # traces hold the job's argv, shapes, stacks: keep them private
    except OSError:
        pass
    return path


def user_profiler_active(torch: Any) -> bool:
    """True if a torch profiler session (not ours) is running in this process."""
    autograd_profiler = getattr(torch.autograd, "profiler", None)
    if getattr(autograd_profiler, "_is_profiler_enabled", False):
        return True
    enabled = getattr(getattr(torch._C, "_autograd", None), "_profiler_enabled", None)
    try:
        return bool(enabled()) if callable(enabled) else False
    except Exception:
        return False


def _status(state: str, cid: str | None, **extra: Any) -> dict[str, Any]:
    return CaptureStatus(state, cid, **extra).to_wire()


class CaptureController(WindowController):
    """Runs captures for viewers.  ``recorder`` is the training thread's side (the
    controller is called from its step boundaries); ``post`` sends a message to a
    viewer through the I/O thread."""

    def __init__(self, recorder: Recorder, post: Post, every_s: float | None = None) -> None:
        super().__init__(recorder, post)
        self.every_s = every_s
        self.next_periodic: float | None = None
        self.armed: CaptureRequest | None = None  # request waiting for a step boundary
        self.active: CaptureRequest | None = None  # request being run (training thread)
        self.periodic_request = False  # the armed or active capture is a periodic one
        # requester: None for periodic captures; state: None, warmup, recording, processing
        self.prof: Any = None
        self.step_fn: Any = None  # the ProfilerStep#N record_function in progress
        self.warmup_left = 0
        #: what the profiler's start imports is imported (or failed to: the
        #: profiler then meets the error and the capture fails with it)
        self.preloaded = False
        self.preload_since = 0.0  # time.monotonic() of the last arming
        self._preloading = False
        #: the last capture is being processed (its steps after it are flagged)
        self.processing = False

    # -- I/O thread -----------------------------------------------------------------
    def request(self, vid: int | None, req: CaptureRequest) -> CaptureStatus:
        """Arm a capture (I/O thread); the status says whether it will run.  The
        request's ranges were checked when it was decoded."""
        cid = req.id
        torch = self.recorder.torch
        if torch is None:
            return CaptureStatus(messages.CAPTURE_REFUSED, cid, "torch is not imported yet")
        if not self.recorder.enabled:
            return CaptureStatus(messages.CAPTURE_REFUSED, cid, "the hook is disabled")
        if self.armed is not None or self.state is not None:
            return CaptureStatus(messages.CAPTURE_BUSY, cid, "a capture is already in progress")
        if self.recorder.on_boundary is not None:  # the step boundary is taken
            return CaptureStatus(messages.CAPTURE_BUSY, cid, "a memory snapshot is in progress")
        if user_profiler_active(torch):
            return CaptureStatus(messages.CAPTURE_REFUSED, cid, _USER_PROFILER)
        self.requester = vid
        self.periodic_request = vid is None
        self._preload()
        self.armed = req
        # Arm last: from here the training thread may pick the request up, at
        # the end of the step in progress (made a full step) or at worst of the
        # next full one (a fraction of a second).
        self.recorder.on_boundary = self.on_boundary
        self.recorder.want_full()
        return CaptureStatus(
            messages.CAPTURE_ARMED, cid, step=req.start_step, steps=req.steps, warmup=req.warmup
        )

    def _preload(self) -> None:
        """Have a thread import what the profiler's start imports, where the job
        has not imported it yet (once per process)."""
        self.preload_since = time.monotonic()
        if self.preloaded or self._preloading:
            return
        if not _needs_preload(self.recorder.torch):
            self.preloaded = True
            return
        self._preloading = True

        def run() -> None:
            try:
                _preload()
            except Exception:  # the profiler's start meets it again, and the capture says it
                pass
            finally:
                self.preloaded = True
                self._preloading = False

        try:
            threading.Thread(target=run, name="gputui-capture-prep", daemon=True).start()
        except RuntimeError:  # no thread to be had: the profiler imports it itself
            self._preloading = False
            self.preloaded = True

    def cancel(self, vid: int | None) -> CaptureStatus:
        armed = self.armed
        if armed is not None and self.state is None:
            self.recorder.on_boundary = None
            self.armed = None
            return CaptureStatus(messages.CAPTURE_CANCELLED, armed.id)
        return CaptureStatus(messages.CAPTURE_NOT_ARMED, None, "no armed capture to cancel")

    def periodic(self, now: float) -> None:
        if not self.every_s:
            return
        if self.next_periodic is None:
            self.next_periodic = now + self.every_s
        if now >= self.next_periodic and self.armed is None and self.state is None:
            self.next_periodic = now + self.every_s
            self.request(None, CaptureRequest(id=f"periodic-{self.count + 1}"))

    def info(self) -> CaptureInfo:
        """What the status says about captures."""
        armed = self.armed
        return CaptureInfo(
            state=self.state or (messages.CAPTURE_ARMED if armed else None),
            id=None if armed is None else armed.id,
            every_s=self.every_s,
            count=self.count,
        )

    # -- training thread --------------------------------------------------------------
    def on_boundary(self, index: int) -> None:
        t0 = time.perf_counter()
        if self.state is None:
            req = self.armed
            if req is None:  # cancelled before it started
                self.recorder.on_boundary = None
                return
            if req.start_step is not None and index < req.start_step - req.warmup:
                return  # a synchronized capture: not yet (it stays armed)
            if (
                req.start_step is None
                and not self.preloaded
                and time.monotonic() - self.preload_since < PRELOAD_WAIT_S
            ):
                return  # the profiler's import is still under way (it stays armed)
            self.active = req
        else:
            req = self.active
            assert req is not None
        try:
            if self.state is None:
                self._begin(req, index)
            elif self.state == messages.CAPTURE_WARMUP:
                self.warmup_left -= 1
                if self.warmup_left <= 0:
                    self._start_recording(req, index)
                else:
                    self.recorder.flags |= FLAG_PROFILED
            elif self.state == messages.CAPTURE_RECORDING:
                self._exit_step_fn()
                self.recorded += 1
                if self.recorded >= req.steps:
                    self._finish(req, index, t0)
                else:
                    self._enter_step_fn(index)
                    self.recorder.flags |= FLAG_PROFILED
        except Exception as exc:
            self._abort(req, exc)

    def _begin(self, req: CaptureRequest, index: int) -> None:
        torch = self.recorder.torch
        if user_profiler_active(torch):
            self._clear()
            self.post(
                self.requester, _status(messages.CAPTURE_REFUSED, req.id, reason=_USER_PROFILER)
            )
            return
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.prof = torch.profiler.profile(
            activities=activities,
            record_shapes=req.shapes or req.flops,
            with_stack=req.stacks,
            profile_memory=req.memory,
            with_flops=req.flops,
        )
        self.prof.prepare_trace()
        self.recorder.flags |= FLAG_PROFILED
        self.started_wall = time.time()
        warmup = req.warmup
        if req.start_step is not None:  # record from start_step on (or now, if late)
            warmup = max(0, min(warmup, req.start_step - index))
        if warmup > 0:
            self.state = messages.CAPTURE_WARMUP
            self.warmup_left = warmup
            self.post(self.requester, _status(messages.CAPTURE_WARMUP, req.id, step=index))
        else:
            self._start_recording(req, index)

    def _start_recording(self, req: CaptureRequest, index: int) -> None:
        self.prof.start_trace()
        self.state = messages.CAPTURE_RECORDING
        self.recorded = 0
        self.first_step = index
        self._enter_step_fn(index)
        self.recorder.flags |= FLAG_PROFILED
        self.post(
            self.requester,
            _status(messages.CAPTURE_RECORDING, req.id, step=index, steps=req.steps),
        )

    def _enter_step_fn(self, index: int) -> None:
        # The same range name torch.profiler's own schedule uses, so Perfetto and
        # HTA see step boundaries in our traces too.
        fn = self.recorder.torch.profiler.record_function(f"ProfilerStep#{index}")
        fn.__enter__()
        self.step_fn = fn

    def _exit_step_fn(self) -> None:
        fn, self.step_fn = self.step_fn, None
        if fn is not None:
            fn.__exit__(None, None, None)

    def _finish(self, req: CaptureRequest, index: int, t0: float) -> None:
        prof, self.prof = self.prof, None
        t_stop0 = time.perf_counter()
        prof.stop_trace()
        t_stop1 = time.perf_counter()
        meta = {
            "id": req.id,
            "requester": self.requester,
            "first_step": self.first_step,
            "last_step": index - 1,
            "steps": req.steps,
            "warmup": req.warmup,
            "options": CaptureOptions(req.shapes or req.flops, req.stacks, req.memory, req.flops),
            "periodic": self.periodic_request,
            "auto": req.auto,
            "started": round(self.started_wall, 3),
            "window_end_wall": time.time(),
            "window_end_perf": t_stop0,
            "stop_ms": round((t_stop1 - t_stop0) * 1000.0, 3),
        }
        self.state = messages.CAPTURE_PROCESSING
        self.armed = None
        self.active = None
        # The steps that run while the capture is processed are slowed by it
        # (the worker shares the GIL with them): flagged as profiled, as the
        # recorded ones are, they stay out of the step statistics
        self.processing = True
        self.recorder.flags |= FLAG_PROFILED
        self.recorder.on_boundary = self._processing_boundary
        stall_known = threading.Event()
        worker = threading.Thread(
            target=self._process,
            args=(prof, meta, stall_known),
            name="gputui-capture",
            daemon=True,
        )
        worker.start()
        self.post(self.requester, _status(messages.CAPTURE_PROCESSING, req.id))
        # What this boundary cost the training thread beyond torch's own stop().
        meta["hook_stall_ms"] = round(
            ((time.perf_counter() - t0) - (t_stop1 - t_stop0)) * 1000.0, 3
        )
        stall_known.set()

    def _processing_boundary(self, index: int) -> None:
        """A step boundary while the last capture is processed: the step that
        starts is flagged as profiled; the first one after the processing is
        not, and from it on the boundaries are free again."""
        if self.processing:
            self.recorder.flags |= FLAG_PROFILED
        elif self.recorder.on_boundary == self._processing_boundary:
            self.recorder.on_boundary = None

    def _abort(self, req: CaptureRequest, exc: BaseException) -> None:
        prof, self.prof = self.prof, None
        try:
            self._exit_step_fn()
        except Exception:
            pass
        if prof is not None:
            try:
                prof.stop_trace()
            except Exception:
                pass
        self._clear()
        self.post(
            self.requester,
            _status(messages.CAPTURE_FAILED, req.id, reason=f"{type(exc).__name__}: {exc}"),
        )

    def _clear(self) -> None:
        self.processing = False
        self.recorder.on_boundary = None
        self.armed = None
        self.active = None
        self.state = None
        self.step_fn = None

    # -- worker thread ----------------------------------------------------------------
    def _process(self, prof: Any, meta: dict[str, Any], stall_known: threading.Event) -> None:
        requester = meta.pop("requester")
        window_end_perf = meta.pop("window_end_perf")
        fields: dict[str, Any] = {"pid": os.getpid()}
        # Start the heavy work only once the training thread has left the step
        # boundary, so our GIL use does not land in the stall we measure for it.
        stall_known.wait(5.0)
        try:
            t0 = time.perf_counter()
            events = prof.profiler.kineto_results.events()
            fields.update(reduce_events(events))
            t1 = time.perf_counter()
            fields["reduce_ms"] = round((t1 - t0) * 1000.0, 3)
            if meta["options"].flops:
                # Only captures with FLOPs need it: the hook stays small otherwise.
                from gputui.trace.op_rows import ops_from_kineto

                rows, totals = ops_from_kineto(events, top=MAX_OP_ROWS)
                fields["op_rows"] = tuple(rows)
                fields["flop_totals"] = totals
                t2 = time.perf_counter()
                fields["op_rows_ms"] = round((t2 - t1) * 1000.0, 3)
                t1 = t2
            del events
            try:
                name = file_stem(meta) + ".pt.trace.json"
                directory = traces_dir()
                path, size = export_trace(prof, directory, name)
                fields["trace_path"] = path
                fields["trace_bytes"] = size
                _prune_traces(directory)
            except TraceNotWritten as exc:
                fields["trace_error"] = str(exc)
            except Exception as exc:
                fields["trace_error"] = f"{type(exc).__name__}: {exc}"
            fields["export_ms"] = round((time.perf_counter() - t1) * 1000.0, 3)
            # the processing ends here: a step that begins after the result's
            # time is never flagged as the capture's
            self.processing = False
            fields["ready_after_ms"] = round((time.perf_counter() - window_end_perf) * 1000.0, 3)
        except Exception as exc:
            fields["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            del prof
            fields.update(meta)
            fields["window_end_wall"] = round(fields["window_end_wall"], 3)
            result = CaptureResult(**fields).to_wire()
            self.processing = False
            if self.recorder.on_boundary == self._processing_boundary:
                self.recorder.on_boundary = None  # (the recorder reads it once a boundary)
            self._sent(result)
        self.post(requester, result)


def _prune_traces(directory: str) -> None:
    stale = [
        path  # partial exports of jobs killed while writing them
        for path in glob.glob(os.path.join(directory, "*-steps*.pt.trace.json.tmp"))
        if _dead_pid(os.path.basename(path).split("-", 1)[0])
    ]
    prune_oldest(directory, "*-steps*.pt.trace.json", KEEP_TRACES, stale)


def _dead_pid(text: str) -> bool:
    return text.isdigit() and int(text) < 2**31 and not paths.pid_alive(int(text))


_USER_PROFILER = (
    "a torch profiler session is already running in the job (only one per process); "
    "gputui will not start a capture until it stops"
)
