"""On-demand torch.profiler captures, started and stopped on the training thread.

A viewer's request only arms a flag (I/O thread).  The training thread, at the
next step boundary, starts the profiler (a profiler started from another thread
misses the training thread's ops), runs ``warmup`` + ``steps`` steps and stops
it.  The stopped profile is handed to a worker thread that reduces the raw events
and exports the Chrome trace, so the training thread pays only for torch's own
``stop`` plus a thread start.  ``key_averages()`` is never called: 4-7 s on a busy
trace.
"""

from __future__ import annotations

import glob
import os
import threading
import time
from typing import TYPE_CHECKING, Any

from gputui.hook._recorder import FLAG_PROFILED
from gputui.hook._reduce import reduce_events
from gputui.protocol import messages

if TYPE_CHECKING:
    from gputui.hook._core import Hook

MAX_STEPS = 200
MAX_WARMUP = 20
KEEP_TRACES = 50


def traces_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(base, "gputui", "traces")
    os.makedirs(path, mode=0o700, exist_ok=True)
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


def _status(state: str, cid: Any, **extra: Any) -> dict[str, Any]:
    msg: dict[str, Any] = {"v": messages.PROTOCOL_VERSION, "type": messages.CAPTURE_STATUS}
    msg.update(state=state, id=cid, **extra)
    return msg


class CaptureController:
    def __init__(self, hook: Hook, every_s: float | None = None) -> None:
        self.hook = hook
        self.every_s = every_s
        self.next_periodic: float | None = None
        self.armed: dict[str, Any] | None = None  # request waiting for a step boundary
        self.active: dict[str, Any] | None = None  # request being run (training thread)
        self.requester: int | None = None  # viewer id, None for periodic captures
        self.state: str | None = None  # None, warmup, recording, processing
        self.prof: Any = None
        self.step_fn: Any = None  # the ProfilerStep#N record_function in progress
        self.warmup_left = 0
        self.recorded = 0
        self.first_step: int | None = None
        self.started_wall = 0.0
        self.last_result: dict[str, Any] | None = None
        self.count = 0

    # -- I/O thread -----------------------------------------------------------------
    def request(self, vid: int | None, msg: dict[str, Any]) -> dict[str, Any] | None:
        cid = msg.get("id")
        torch = self.hook.recorder.torch
        if torch is None:
            return _status(messages.CAPTURE_REFUSED, cid, reason="torch is not imported yet")
        if not self.hook.recorder.enabled:
            return _status(messages.CAPTURE_REFUSED, cid, reason="the hook is disabled")
        if self.armed is not None or self.state is not None:
            return _status(messages.CAPTURE_BUSY, cid, reason="a capture is already in progress")
        if user_profiler_active(torch):
            return _status(messages.CAPTURE_REFUSED, cid, reason=_USER_PROFILER)
        try:
            steps = int(msg.get("steps", 5))
            warmup = int(msg.get("warmup", 1))
        except (TypeError, ValueError):
            return _status(messages.CAPTURE_FAILED, cid, reason="steps and warmup must be integers")
        if not 1 <= steps <= MAX_STEPS or not 0 <= warmup <= MAX_WARMUP:
            return _status(
                messages.CAPTURE_FAILED,
                cid,
                reason=f"steps must be 1-{MAX_STEPS} and warmup 0-{MAX_WARMUP}",
            )
        self.requester = vid
        self.armed = {
            "id": cid,
            "steps": steps,
            "warmup": warmup,
            "shapes": bool(msg.get("shapes", False)),
            "stacks": bool(msg.get("stacks", False)),
            "memory": bool(msg.get("memory", False)),
            "periodic": vid is None,
        }
        # Arm last: from here the training thread may pick the request up, at
        # the end of the step in progress (made a full step) or at worst of the
        # next full one (a fraction of a second).
        self.hook.recorder.on_boundary = self.on_boundary
        self.hook.recorder.want_full()
        return _status(messages.CAPTURE_ARMED, cid, steps=steps, warmup=warmup)

    def cancel(self, vid: int | None) -> dict[str, Any]:
        armed = self.armed
        if armed is not None and self.state is None:
            self.hook.recorder.on_boundary = None
            self.armed = None
            return _status(messages.CAPTURE_CANCELLED, armed["id"])
        return _status(messages.CAPTURE_BUSY, None, reason="no armed capture to cancel")

    def viewer_gone(self, vid: int) -> None:
        if self.requester == vid:
            self.requester = None  # the result is still broadcast to the others

    def periodic(self, now: float) -> None:
        if not self.every_s:
            return
        if self.next_periodic is None:
            self.next_periodic = now + self.every_s
        if now >= self.next_periodic and self.armed is None and self.state is None:
            self.next_periodic = now + self.every_s
            self.request(None, {"id": f"periodic-{self.count + 1}"})

    def snapshot(self) -> dict[str, Any]:
        armed = self.armed or {}
        return {
            "state": self.state or ("armed" if self.armed else None),
            "id": armed.get("id"),
            "every_s": self.every_s,
            "count": self.count,
        }

    # -- training thread --------------------------------------------------------------
    def on_boundary(self, index: int) -> None:
        t0 = time.perf_counter()
        if self.state is None:
            req = self.armed
            if req is None:  # cancelled before it started
                self.hook.recorder.on_boundary = None
                return
            self.active = req
        else:
            req = self.active
            assert req is not None
        try:
            if self.state is None:
                self._begin(req, index)
            elif self.state == "warmup":
                self.warmup_left -= 1
                if self.warmup_left <= 0:
                    self._start_recording(req, index)
                else:
                    self.hook.recorder.flags |= FLAG_PROFILED
            elif self.state == "recording":
                self._exit_step_fn()
                self.recorded += 1
                if self.recorded >= req["steps"]:
                    self._finish(req, index, t0)
                else:
                    self._enter_step_fn(index)
                    self.hook.recorder.flags |= FLAG_PROFILED
        except Exception as exc:
            self._abort(req, exc)

    def _begin(self, req: dict[str, Any], index: int) -> None:
        torch = self.hook.recorder.torch
        if user_profiler_active(torch):
            self._clear()
            self.hook.post(
                self.requester, _status(messages.CAPTURE_REFUSED, req["id"], reason=_USER_PROFILER)
            )
            return
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.prof = torch.profiler.profile(
            activities=activities,
            record_shapes=req["shapes"],
            with_stack=req["stacks"],
            profile_memory=req["memory"],
        )
        self.prof.prepare_trace()
        self.hook.recorder.flags |= FLAG_PROFILED
        self.started_wall = time.time()
        if req["warmup"] > 0:
            self.state = "warmup"
            self.warmup_left = req["warmup"]
            self.hook.post(self.requester, _status(messages.CAPTURE_WARMUP, req["id"], step=index))
        else:
            self._start_recording(req, index)

    def _start_recording(self, req: dict[str, Any], index: int) -> None:
        self.prof.start_trace()
        self.state = "recording"
        self.recorded = 0
        self.first_step = index
        self._enter_step_fn(index)
        self.hook.recorder.flags |= FLAG_PROFILED
        self.hook.post(
            self.requester,
            _status(messages.CAPTURE_RECORDING, req["id"], step=index, steps=req["steps"]),
        )

    def _enter_step_fn(self, index: int) -> None:
        # The same range name torch.profiler's own schedule uses, so Perfetto and
        # HTA see step boundaries in our traces too.
        fn = self.hook.recorder.torch.profiler.record_function(f"ProfilerStep#{index}")
        fn.__enter__()
        self.step_fn = fn

    def _exit_step_fn(self) -> None:
        fn, self.step_fn = self.step_fn, None
        if fn is not None:
            fn.__exit__(None, None, None)

    def _finish(self, req: dict[str, Any], index: int, t0: float) -> None:
        prof, self.prof = self.prof, None
        t_stop0 = time.perf_counter()
        prof.stop_trace()
        t_stop1 = time.perf_counter()
        meta = {
            "id": req["id"],
            "requester": self.requester,
            "first_step": self.first_step,
            "last_step": index - 1,
            "steps": req["steps"],
            "warmup": req["warmup"],
            "options": {k: req[k] for k in ("shapes", "stacks", "memory")},
            "periodic": req["periodic"],
            "started": round(self.started_wall, 3),
            "window_end_wall": time.time(),
            "window_end_perf": t_stop0,
            "stop_ms": round((t_stop1 - t_stop0) * 1000.0, 3),
        }
        self.state = "processing"
        self.armed = None
        self.active = None
        self.hook.recorder.on_boundary = None
        stall_known = threading.Event()
        worker = threading.Thread(
            target=self._process,
            args=(prof, meta, stall_known),
            name="gputui-capture",
            daemon=True,
        )
        worker.start()
        self.hook.post(self.requester, _status(messages.CAPTURE_PROCESSING, req["id"]))
        # What this boundary cost the training thread beyond torch's own stop().
        meta["hook_stall_ms"] = round(
            ((time.perf_counter() - t0) - (t_stop1 - t_stop0)) * 1000.0, 3
        )
        stall_known.set()

    def _abort(self, req: dict[str, Any], exc: BaseException) -> None:
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
        self.hook.post(
            self.requester,
            _status(messages.CAPTURE_FAILED, req["id"], reason=f"{type(exc).__name__}: {exc}"),
        )

    def _clear(self) -> None:
        self.hook.recorder.on_boundary = None
        self.armed = None
        self.active = None
        self.state = None
        self.step_fn = None

    # -- worker thread ----------------------------------------------------------------
    def _process(self, prof: Any, meta: dict[str, Any], stall_known: threading.Event) -> None:
        result: dict[str, Any] = {
            "v": messages.PROTOCOL_VERSION,
            "type": messages.CAPTURE_RESULT,
            "pid": os.getpid(),
        }
        requester = meta.pop("requester")
        window_end_perf = meta.pop("window_end_perf")
        # Start the heavy work only once the training thread has left the step
        # boundary, so our GIL use does not land in the stall we measure for it.
        stall_known.wait(5.0)
        try:
            t0 = time.perf_counter()
            events = prof.profiler.kineto_results.events()
            result.update(reduce_events(events))
            del events
            t1 = time.perf_counter()
            result["reduce_ms"] = round((t1 - t0) * 1000.0, 3)
            result["trace_path"] = None
            try:
                stamp = time.strftime("%Y%m%d-%H%M%S")
                name = (
                    f"{os.getpid()}-{stamp}-steps{meta['first_step']}-{meta['last_step']}"
                    ".pt.trace.json"
                )
                path = os.path.join(traces_dir(), name)
                prof.export_chrome_trace(path)
                os.chmod(path, 0o600)
                result["trace_path"] = path
                result["trace_bytes"] = os.path.getsize(path)
                _prune_traces(os.path.dirname(path))
            except Exception as exc:
                result["trace_error"] = f"{type(exc).__name__}: {exc}"
            result["export_ms"] = round((time.perf_counter() - t1) * 1000.0, 3)
            result["ready_after_ms"] = round((time.perf_counter() - window_end_perf) * 1000.0, 3)
        except Exception as exc:
            result["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            del prof
            result.update(meta)
            result["window_end_wall"] = round(result["window_end_wall"], 3)
            self.count += 1
            self.last_result = result
            self.state = None
            self.requester = None
        self.hook.post(requester, result)


def _prune_traces(directory: str) -> None:
    files = sorted(glob.glob(os.path.join(directory, "*-steps*.pt.trace.json")), key=_mtime)
    for path in files[:-KEEP_TRACES]:
        try:
            os.unlink(path)
        except OSError:
            pass


def _mtime(path: str) -> float:
    try:
        return os.path.getmtime(path)
    except OSError:
        return 0.0


_USER_PROFILER = (
    "a torch profiler session is already running in the job (only one per process); "
    "gputui will not start a capture until it stops"
)
