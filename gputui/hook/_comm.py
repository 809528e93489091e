"""Communication time as a phase of its own ("comm"), without user code.

Two sources, both installed when the job imports torch (``torch.distributed``
comes with it) and both passing straight through when not in use:

- **Explicit collectives**: the Python functions of ``torch.distributed``
  (``all_reduce``, ``barrier``, ``broadcast``, ... and ``_broadcast_coalesced``,
  which DDP calls to sync buffers in forward) are wrapped, in both namespaces
  that export them.  A synchronous call on the training thread is timed from
  call to return; an ``async_op=True`` call is not (launching is not waiting),
  but ``Work.wait()`` on the training thread is.
- **DDP's gradient all-reduce** runs inside backward, in C++.  DDP lets one
  Python communication hook take over the reduction of each gradient bucket; we
  register one that runs DDP's documented equivalent of its default
  (``default_hooks.allreduce_hook``), or the user's hook if they register one
  later, and notes when the last bucket was launched.  After the last launch,
  backward only waits for the reductions (DDP's ``finalize_backward``) and copies
  the results back, so the backward hook turns the time from that launch to its
  own exit into the "comm" phase.  On a GPU-timed step the launch also records a
  CUDA event on the backward stream, so the GPU time of "comm" is the time the
  compute stream waited for NCCL.

Every wrapper passes the call through unchanged when anything of ours fails:
errors turn the recorder off and are reported once, never raised into training.
docs/hook.md ("Communication") gives the method and its limits.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

from gputui.hook._recorder import _MARKS, X_COMM, HookPoints, Recorder
from gputui.protocol.messages import COMM
from gputui.protocol.schema import CommInfo

#: torch.distributed functions timed as "comm" when called synchronously on the
#: training thread (those missing from a torch version are skipped)
COLLECTIVES = (
    "all_reduce",
    "all_reduce_coalesced",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_coalesced",
    "all_gather_object",
    "all_gather_single",
    "_all_gather_base",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "_reduce_scatter_base",
    "all_to_all",
    "all_to_all_single",
    "broadcast",
    "broadcast_object_list",
    "reduce",
    "gather",
    "gather_object",
    "scatter",
    "scatter_object_list",
    "barrier",
    "monitored_barrier",
    "send",
    "recv",
    "send_object_list",
    "recv_object_list",
    # DDP's buffer broadcast in forward (broadcast_buffers=True): a collective
    # in which the other ranks wait for rank 0
    "_broadcast_coalesced",
)
MAX_NOTES = 8


def _last_time(log: list[Any]) -> float:
    """The time of the last edge in a step's log (markers carry no time)."""
    for i in range(len(log) - 2, 1, -2):
        if log[i + 1] not in _MARKS:
            return float(log[i])
    return float(log[1])


def close_comm(rec: Recorder) -> None:
    """At the exit of a backward in which DDP launched all-reduces: the time
    from the last launch to now becomes the "comm" phase (training thread)."""
    since, rec.comm_since = rec.comm_since, 0.0
    event, rec.comm_event = rec.comm_event, None
    try:
        if not rec.enabled or not rec.started:
            return
        log = rec.log
        t = rec.clock()
        # A launch from before this backward began (join, a hook run outside
        # backward) or a log flushed meanwhile: nothing to attribute.
        if not _last_time(log) < since <= t:
            return
        log.append(since)
        log.append(COMM)
        if rec.edges is not None:
            if event is not None:
                rec.edges.append(event)  # recorded on the backward stream at the launch
                event = None
            else:
                rec._gpu_edge()
        rec.log_edge(t, X_COMM)
    except Exception as exc:
        rec._fail("communication phase", exc)
    finally:
        if event is not None:
            rec.event_pool.append(event)


class _DdpTiming:
    """One DDP model's registered hook state: the default reduction or the
    user's hook, and where launches are noted."""

    __slots__ = ("default", "process_group", "reducer", "timer", "user")

    def __init__(self, timer: CommTimer, process_group: Any, default: Any, reducer: Any) -> None:
        self.timer = timer
        self.process_group = process_group
        self.default = default
        self.reducer = reducer
        self.user: tuple[Any, Any] | None = None  # (hook, state) registered later


def _timed_allreduce(state, bucket):  # type: ignore[no-untyped-def]
    # No annotations: DDP compares them with GradBucket and Future[Tensor].
    user = state.user
    if user is None:
        future = state.default(state.process_group, bucket)
    else:
        future = user[0](user[1], bucket)
    state.timer.launched()
    return future


class CommTimer(HookPoints):
    """Installs and removes the communication wrappers; says what is timed."""

    def __init__(
        self, recorder: Recorder, report_error: Callable[[str, BaseException], None]
    ) -> None:
        super().__init__(recorder, report_error)
        self.originals: list[tuple[Any, str, Any]] = []
        self.collectives = False
        #: DDP models whose all-reduce wait is timed (dropped with the model)
        self.models: weakref.WeakKeyDictionary[Any, _DdpTiming] = weakref.WeakKeyDictionary()
        self.notes: list[str] = []
        #: an explicit collective is open on the training thread (its inner
        #: Work.wait and nested calls are part of it)
        self.depth = 0
        self._is_compiling: Callable[[], bool] = lambda: False
        self._register: Any = None  # DDP's own register_comm_hook
        self._cuda_capturing: Callable[[], bool] = lambda: False

    def note(self, text: str) -> None:
        if text not in self.notes and len(self.notes) < MAX_NOTES:
            self.notes.append(text)

    def info(self) -> CommInfo:
        return CommInfo(
            collectives=self.collectives, ddp_models=len(self.models), notes=tuple(self.notes)
        )

    # -- installation -------------------------------------------------------------------
    def install(self, torch: Any, is_compiling: Callable[[], bool]) -> None:
        """Wrap what torch.distributed offers (nothing when it is not built in)."""
        dist = sys.modules.get("torch.distributed")
        if dist is None or self.torch is not None:
            return
        try:
            if not dist.is_available():
                return
        except Exception:
            return
        self.torch = torch
        self._is_compiling = is_compiling
        cuda = getattr(torch, "cuda", None)
        capturing = getattr(cuda, "is_current_stream_capturing", None)
        if callable(capturing):
            self._cuda_capturing = capturing
        try:
            self._install_collectives(dist)
        except Exception as exc:
            self.report_error("wrapping torch.distributed collectives", exc)
        try:
            self._install_ddp()
        except Exception as exc:
            self.report_error("timing DDP's all-reduce", exc)

    def uninstall(self) -> None:
        for owner, name, original in reversed(self.originals):
            try:
                setattr(owner, name, original)
            except Exception:
                pass
        self.originals = []
        self.collectives = False

    def _replace(self, owner: Any, name: str, wrapper: Any, original: Any) -> None:
        wrapper._gputui_wrapped = True
        setattr(owner, name, wrapper)
        self.originals.append((owner, name, original))

    def _install_collectives(self, dist: Any) -> None:
        c10d = sys.modules.get("torch.distributed.distributed_c10d")
        done: dict[int, Any] = {}  # id(original) -> wrapper: one wrapper per function
        for name in COLLECTIVES:
            for owner in (c10d, dist):
                fn = getattr(owner, name, None) if owner is not None else None
                if not callable(fn) or getattr(fn, "_gputui_wrapped", False):
                    continue
                wrapper = done.get(id(fn))
                if wrapper is None:
                    wrapper = done[id(fn)] = self._wrap_collective(fn)
                self._replace(owner, name, wrapper, fn)
        work = getattr(c10d, "Work", None) or getattr(dist, "Work", None)
        wait = getattr(work, "wait", None)
        if isinstance(work, type) and callable(wait) and not getattr(wait, "_gputui_wrapped", 0):
            self._replace(work, "wait", self._wrap_wait(wait), wait)
        self.collectives = bool(done)

    def _wrap_collective(self, fn: Any) -> Any:
        try:
            params = list(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            params = []
        position = params.index("async_op") if "async_op" in params else -1
        rec, timer, compiling = self.rec, self, self._is_compiling
        get_ident = threading.get_ident

        @functools.wraps(fn)
        def collective(*args: Any, **kwargs: Any) -> Any:
            # Under torch.compile tracing: the original, which dynamo knows.
            if (
                compiling()
                or timer.depth
                or rec.thread != get_ident()
                or kwargs.get("async_op")
                or (0 <= position < len(args) and args[position])
            ):
                return fn(*args, **kwargs)
            timer.depth = 1
            rec.enter(COMM)
            try:
                return fn(*args, **kwargs)
            finally:
                rec.exit(COMM)
                timer.depth = 0

        return collective

    def _wrap_wait(self, wait: Any) -> Any:
        rec, timer, compiling = self.rec, self, self._is_compiling
        get_ident = threading.get_ident

        def timed_wait(work: Any, *args: Any, **kwargs: Any) -> Any:
            if compiling() or timer.depth or rec.thread != get_ident():
                return wait(work, *args, **kwargs)
            timer.depth = 1
            rec.enter(COMM)
            try:
                return wait(work, *args, **kwargs)
            finally:
                rec.exit(COMM)
                timer.depth = 0

        functools.update_wrapper(timed_wait, wait)
        return timed_wait

    def _install_ddp(self) -> None:
        module = sys.modules.get("torch.nn.parallel.distributed")
        if module is None:
            module = importlib.import_module("torch.nn.parallel.distributed")
        ddp = getattr(module, "DistributedDataParallel", None)
        init = getattr(ddp, "__init__", None)
        register = getattr(ddp, "register_comm_hook", None)
        builtin = getattr(ddp, "_register_builtin_comm_hook", None)
        if not (isinstance(ddp, type) and callable(init) and callable(register)):
            return
        if getattr(init, "_gputui_wrapped", False):
            return
        self._register = register
        timer = self

        @functools.wraps(init)
        def __init__(model: Any, *args: Any, **kwargs: Any) -> None:
            init(model, *args, **kwargs)
            timer._attach(model)

        @functools.wraps(register)
        def register_comm_hook(model: Any, state: Any, hook: Any) -> Any:
            timing = timer.models.get(model)
            if timing is None or timing.user is not None:
                return register(model, state, hook)  # DDP's own checks and errors
            check = getattr(model, "_check_comm_hook", None)
            if callable(check):
                check(hook)
            timing.user = (hook, state)
            timer._name_hook(model, getattr(hook, "__qualname__", repr(hook)))
            return None

        self._replace(ddp, "__init__", __init__, init)
        self._replace(ddp, "register_comm_hook", register_comm_hook, register)
        if callable(builtin):

            @functools.wraps(builtin)
            def _register_builtin_comm_hook(model: Any, comm_hook_type: Any) -> Any:
                timing = timer.models.get(model)
                hook = None if timing is None else _python_builtin(comm_hook_type)
                if timing is None or timing.user is not None or hook is None:
                    return builtin(model, comm_hook_type)
                timing.user = (hook, getattr(model, "process_group", None))
                timer._name_hook(model, str(comm_hook_type))
                return None

            self._replace(ddp, "_register_builtin_comm_hook", _register_builtin_comm_hook, builtin)

    # -- DDP models -------------------------------------------------------------------------
    def _attach(self, model: Any) -> None:
        """Register the timing hook on a DDP model just built (DDP's __init__)."""
        try:
            if getattr(model, "_use_python_reducer", False):
                self.note(
                    "a DDP model uses the Python reducer (compiled autograd): its "
                    "all-reduce wait stays in backward"
                )
                return
            reducer = getattr(model, "reducer", None)
            if reducer is None:
                return
            if getattr(model, "_comm_hooks", None):
                self.note(
                    "a DDP model registered a communication hook while it was built (mixed "
                    "precision): its all-reduce wait stays in backward"
                )
                return
            hooks = importlib.import_module(
                "torch.distributed.algorithms.ddp_comm_hooks.default_hooks"
            )
            timing = _DdpTiming(self, model.process_group, hooks.allreduce_hook, reducer)
            self._register(model, timing, _timed_allreduce)
            self.models[model] = timing
        except Exception as exc:
            self.report_error("timing DDP's all-reduce", exc)

    def _name_hook(self, model: Any, name: str) -> None:
        """What DDP's logging data reports as the model's comm hook."""
        logger = getattr(model, "logger", None)
        try:
            if logger is not None:
                logger._set_comm_hook_name(name)
        except Exception:
            pass

    def launched(self) -> None:
        """DDP launched a bucket's all-reduce (autograd's thread on CUDA)."""
        rec = self.rec
        try:
            rec.comm_since = rec.clock()
            if rec.edges is None or self._cuda_capturing():
                return  # not a GPU-timed step (or a CUDA graph being captured)
            try:
                event = rec.event_pool.pop()
            except IndexError:
                return  # no spare event: the GPU edge is taken at backward's exit
            event.record()  # on this thread's current stream: the backward's
            old, rec.comm_event = rec.comm_event, event
            if old is not None:
                rec.event_pool.append(old)
        except Exception as exc:
            self.report_error("noting an all-reduce launch", exc)


def _python_builtin(comm_hook_type: Any) -> Any:
    """The Python hook equal to one of DDP's built-in C++ hooks (None if unknown)."""
    hooks = importlib.import_module("torch.distributed.algorithms.ddp_comm_hooks.default_hooks")
    name = getattr(comm_hook_type, "name", str(comm_hook_type)).rsplit(".", 1)[-1]
    return {
        "ALLREDUCE": hooks.allreduce_hook,
        "FP16_COMPRESS": hooks.fp16_compress_hook,
    }.get(name)
