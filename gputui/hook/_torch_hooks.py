"""Attach the recorder to torch without user code.

- step boundary: global optimizer step pre/post hooks (the "lead" optimizer's
  post hook ends a step, so a GAN's two optimizers make one step, not two);
- forward: a temporary global module forward hook finds the top-level modules
  during the first step, then only those are hooked (global hooks cost ~12 us per
  module call, +28% on a 2 ms step), through ``_compiled_call_impl`` where it
  applies (``_CallRoute``), else with forward pre/post hooks;
- backward: ``torch.autograd._engine_run_backward`` wrapped (the name that
  ``torch.autograd.backward`` and ``grad`` call);
- data: ``_BaseDataLoaderIter.__next__`` wrapped;
- torch.compile: once the job loads dynamo, the hook's code is kept out of
  compilation and the first compile ends root detection (``_dynamo``).

Every hook body is wrapped so that an error in gputui disables the recorder and
is reported once; it never propagates into the training loop.  On a plain step
(``Recorder.plain``) the hook points append their edges to the log themselves.
"""

from __future__ import annotations

import importlib
import sys
import weakref
from collections.abc import Callable
from typing import Any

from gputui.hook import _dynamo
from gputui.hook._comm import close_comm
from gputui.hook._import_watch import TorchImportWatcher
from gputui.hook._recorder import (
    BACKWARD,
    DATA,
    FLAG_GRAPH_CAPTURE,
    FLAG_LOADER_START,
    FORWARD,
    LOG_MAX,
    OPTIMIZER,
    X_BACKWARD,
    X_DATA,
    X_OPTIMIZER,
    HookPoints,
    Recorder,
)
from gputui.hook._roots import _CallRoute, _RootPostHook, _RootPreHook, exit_forward
from gputui.protocol.hello import INFERENCE_CALLS

#: Stop looking for top-level modules after this many top-level forward calls even
#: if no step boundary came (an inference loop with no optimizer and no step()).
ROOT_DETECTION_CALLS = 200
#: After INFERENCE_CALLS top-level forward calls without a step boundary, run
#: with gradients off (``torch.no_grad()``, ``torch.inference_mode()``), the loop
#: is an inference loop: each top-level forward call ends a step, until an
#: optimizer steps or ``step()`` is called.
MAX_ROOTS = 16


class TorchHooks(HookPoints):
    def __init__(
        self, recorder: Recorder, report_error: Callable[[str, BaseException], None]
    ) -> None:
        super().__init__(recorder, report_error)
        self.handles: list[Any] = []
        self.global_module_handles: list[Any] = []
        self.roots: dict[int, Any] = {}  # id -> module (kept alive only while detecting)
        self.root_calls = 0
        self.detecting = False
        self.depth = 0
        self.explicit_steps = False  # step() was called: optimizer hooks no longer end steps
        #: no optimizer and no step(): each top-level forward call ends a step
        self.forward_steps = False
        #: a loop that only replays CUDA graphs (no forward call, no optimizer, no
        #: step()): the graph it replays first and how often in a row; after
        #: INFERENCE_CALLS such replays each replay of it ends a step
        self.lead_graph: int | None = None
        self.graph_run = 0
        self.graph_steps = False
        self._root_calls_seen = 0
        #: root detection ends when the top-level call in progress returns
        self.finish_after_call = False
        self.lead_optimizer: int | None = None
        self.fast_lead: int | None = None  # see _refresh_fast_lead
        self.stepped_since_boundary: set[int] = set()
        self.optimizer_depth = 0
        self.compile_seen = False
        #: dynamo's private APIs this torch lacks (``_dynamo.keep_out``), named
        #: as the compile report's ``unavailable`` names them
        self.dynamo_missing: list[str] = []
        self._dynamo_watcher: TorchImportWatcher | None = None
        self._dynamo_remove: Callable[[], None] | None = None
        self._orig_backward: Any = None
        self._graph_originals: list[tuple[type, str, Any]] = []
        self._orig_next: Any = None
        self._is_compiling: Callable[[], bool] = lambda: False
        self.installed = False
        self.suspended = False
        self.root_refs: list[weakref.ref[Any]] = []  # the hooked roots, not kept alive

    # -- installation -------------------------------------------------------------
    def install(self, torch: Any) -> None:
        if self.installed:
            return
        self.installed = True
        self.torch = torch
        self.rec.torch = torch
        # Hooks run while dynamo traces them (torch.compile): those calls must be
        # skipped.  is_dynamo_compiling() is one frame (`return False`, which dynamo
        # replaces by True while tracing); is_compiling() is two.
        compiler = getattr(torch, "compiler", None)
        for name in ("is_dynamo_compiling", "is_compiling"):
            is_compiling = getattr(compiler, name, None)
            if callable(is_compiling):
                self._is_compiling = is_compiling
                break
        self._install_optimizer()
        self._install_modules()
        self._install_backward()
        self._install_dataloader()
        self._install_cuda_graphs()
        dynamo = sys.modules.get("torch._dynamo")
        if dynamo is not None:
            self._dynamo_loaded(dynamo)
        else:  # loaded by the first optimizer or torch.compile
            self._dynamo_watcher = TorchImportWatcher(self._dynamo_loaded, "torch._dynamo")
            sys.meta_path.insert(0, self._dynamo_watcher)

    def _dynamo_loaded(self, dynamo: Any) -> None:
        self._dynamo_watcher = None
        if not self.installed:
            return
        try:
            missing, self._dynamo_remove = _dynamo.keep_out(dynamo, self.compile_starts)
            self.dynamo_missing[:] = missing  # the compile watch reads this list
        except Exception as exc:
            self.report_error("torch.compile hooks", exc)

    def compile_starts(self) -> None:
        """Dynamo starts compiling a frame (on the training thread, before it
        reads the frame's globals): root detection ends now, so no compiled
        frame sees, and guards on, the global module hooks it removes."""
        try:
            self.compile_seen = True
            if not self.detecting or not self.installed:
                return
            if self.depth:
                # inside a root's forward: its global post hook goes with the
                # others and will not run, so the phase ends here
                self.depth = 0
                self.rec.exit(FORWARD)
            self._finish_detection()
        except Exception as exc:
            self.report_error("compile start", exc)

    def _install_cuda_graphs(self) -> None:
        """Note CUDA graph captures and replays (``torch.cuda.CUDAGraph``, which
        ``torch.cuda.graph`` and torch.compile's cudagraphs use): no hook runs
        inside a replayed graph, so the phases of its work merge into the
        enclosing one, and the status says so.  Called once per replay at most."""
        graph_cls = getattr(getattr(self.torch, "cuda", None), "CUDAGraph", None)
        if not isinstance(graph_cls, type):
            return
        rec = self.rec
        begin = graph_cls.__dict__.get("capture_begin")
        replay = graph_cls.__dict__.get("replay")
        if callable(begin) and not getattr(begin, "_gputui_wrapped", False):

            def capture_begin(self: Any, *args: Any, **kwargs: Any) -> Any:
                rec.capturing_graph += 1
                rec.mark(FLAG_GRAPH_CAPTURE)
                return begin(self, *args, **kwargs)

            capture_begin._gputui_wrapped = True  # type: ignore[attr-defined]
            setattr(graph_cls, "capture_begin", capture_begin)  # noqa: B010
            self._graph_originals.append((graph_cls, "capture_begin", begin))
        if callable(replay) and not getattr(replay, "_gputui_wrapped", False):
            note = self._graph_replayed

            def replay_graph(self: Any, *args: Any, **kwargs: Any) -> Any:
                rec.graph_replays += 1
                note(id(self))
                return replay(self, *args, **kwargs)

            replay_graph._gputui_wrapped = True  # type: ignore[attr-defined]
            setattr(graph_cls, "replay", replay_graph)  # noqa: B010
            self._graph_originals.append((graph_cls, "replay", replay))

    def _graph_replayed(self, graph: int) -> None:
        """A replay of ``graph`` outside any forward call: in a loop that does
        nothing else the hook sees (an inference server replaying a captured
        step), each replay of the first graph replayed ends a step."""
        try:
            if self.depth or self.lead_optimizer is not None or self.explicit_steps:
                return  # inside a module's call, or steps come from elsewhere
            if self.forward_steps or self.root_calls != self._root_calls_seen:
                # a forward call between replays: those make the steps
                self._root_calls_seen = self.root_calls
                self.graph_run = 0
                self.graph_steps = False
                return
            if self.graph_steps:
                if graph == self.lead_graph:
                    self.boundary()
                return
            if self.lead_graph is None:
                self.lead_graph = graph
            if graph == self.lead_graph:
                self.graph_run += 1
                if self.graph_run >= INFERENCE_CALLS:
                    self.graph_steps = True
                    self.boundary()
        except Exception as exc:
            self.report_error("graph replay", exc)

    def _uninstall_cuda_graphs(self) -> None:
        for cls, name, orig in self._graph_originals:
            setattr(cls, name, orig)
        self._graph_originals = []

    def _install_optimizer(self) -> None:
        opt = importlib.import_module("torch.optim.optimizer")
        self.handles.append(opt.register_optimizer_step_pre_hook(self._opt_pre))
        self.handles.append(opt.register_optimizer_step_post_hook(self._opt_post))

    def _install_modules(self) -> None:
        mod = importlib.import_module("torch.nn.modules.module")
        self.detecting = True
        self.global_module_handles.append(mod.register_module_forward_pre_hook(self._global_pre))
        try:
            handle = mod.register_module_forward_hook(self._forward_post, always_call=True)
        except TypeError:  # torch < 2.0 has no always_call
            handle = mod.register_module_forward_hook(self._forward_post)
        self.global_module_handles.append(handle)

    def _install_backward(self) -> None:
        autograd = self.torch.autograd
        orig = getattr(autograd, "_engine_run_backward", None)
        if orig is None or getattr(orig, "_gputui_wrapped", False):
            return
        rec = self.rec
        compiling = self._is_compiling
        clock = rec.clock

        # The hook points below append a plain step's edges themselves (see
        # Recorder.plain): a Python call less per edge, on every step.
        def _engine_run_backward(*args: Any, **kwargs: Any) -> Any:
            if compiling():
                return orig(*args, **kwargs)
            log = rec.log
            if rec.plain and len(log) < LOG_MAX:
                t = clock()
                log.append(t)
                log.append(BACKWARD)
                if t >= rec.io_due:
                    rec.wake_io()
            else:
                rec.enter_wake(BACKWARD)
            try:
                return orig(*args, **kwargs)
            finally:
                if rec.comm_since:  # DDP launched an all-reduce in this backward
                    close_comm(rec)
                log = rec.log
                if rec.plain and len(log) < LOG_MAX:
                    log.append(clock())
                    log.append(X_BACKWARD)
                else:
                    rec.exit(BACKWARD)

        _engine_run_backward._gputui_wrapped = True  # type: ignore[attr-defined]
        self._orig_backward = orig
        autograd._engine_run_backward = _engine_run_backward

    def _install_dataloader(self) -> None:
        dl = importlib.import_module("torch.utils.data.dataloader")
        cls = dl._BaseDataLoaderIter
        orig = cls.__next__
        if getattr(orig, "_gputui_wrapped", False):
            return
        rec = self.rec
        clock = rec.clock

        def __next__(self: Any) -> Any:
            # Once per epoch, at its first batch: which loader this is, and the
            # step is marked.  torch's iterator counts the batches it gave since
            # its (re)start: a new one, or a persistent loader's reset one.  By id
            # where it does not (the next epoch's iterator may reuse the id).
            given = getattr(self, "_num_yielded", None)
            if (given == 0) if given is not None else (rec.loader_iter != id(self)):
                rec.loader_iter = id(self)
                rec.loader = _loader_info(self)
                rec.mark(FLAG_LOADER_START)
            log = rec.log
            if rec.plain and len(log) < LOG_MAX:
                log.append(clock())
                log.append(DATA)
            else:
                rec.enter(DATA)
            try:
                batch = orig(self)
            except BaseException:  # StopIteration at the end of an epoch, mostly
                rec.exit_no_batch()
                raise
            log = rec.log
            if rec.plain and len(log) < LOG_MAX:
                log.append(clock())
                log.append(X_DATA)
            else:
                rec.exit_batch(batch)
            return batch

        __next__._gputui_wrapped = True  # type: ignore[attr-defined]
        self._orig_next = orig
        cls.__next__ = __next__

    def suspend(self) -> None:
        """Take every hook point out, keeping what detection found, so that
        ``resume()`` puts them back as they were (the overhead benchmark runs
        steps with and without the hook in one process, many times)."""
        if not self.installed or self.suspended:
            return
        if self.detecting:
            self._finish_detection()  # the roots seen so far are hooked on resume
        self.suspended = True
        for handle in self.handles:
            handle.remove()
        self.handles = []
        if self._orig_backward is not None:
            self.torch.autograd._engine_run_backward = self._orig_backward
        if self._orig_next is not None:
            importlib.import_module(
                "torch.utils.data.dataloader"
            )._BaseDataLoaderIter.__next__ = self._orig_next

    def resume(self) -> None:
        if not self.installed or not self.suspended:
            return
        self.suspended = False
        self.rec.restart()  # the step goes on; the pause is not in it
        self._orig_backward = self._orig_next = None
        self._install_optimizer()
        self._install_backward()
        self._install_dataloader()
        roots = [ref() for ref in self.root_refs]
        self._hook_roots([m for m in roots if m is not None])

    def uninstall(self) -> None:
        for handle in self.handles + self.global_module_handles:
            try:
                handle.remove()
            except Exception:
                pass
        self.handles = []
        self.global_module_handles = []
        if self._dynamo_watcher is not None:
            try:
                sys.meta_path.remove(self._dynamo_watcher)
            except ValueError:
                pass
            self._dynamo_watcher = None
        if self._dynamo_remove is not None:
            self._dynamo_remove()
            self._dynamo_remove = None
        if self._orig_backward is not None:
            self.torch.autograd._engine_run_backward = self._orig_backward
        if self._orig_next is not None:
            dl = importlib.import_module("torch.utils.data.dataloader")
            dl._BaseDataLoaderIter.__next__ = self._orig_next
        self._uninstall_cuda_graphs()
        self.installed = False
        self.suspended = False

    # -- step boundary ----------------------------------------------------------
    def boundary(self) -> None:
        if self.detecting and self.roots:
            self._finish_detection()
        self.rec.boundary()

    def explicit_step(self) -> None:
        self.explicit_steps = True
        self.forward_steps = False
        self.fast_lead = None
        self.boundary()

    def _inference_loop(self) -> bool:
        """Whether the loop so far is one of inference: many top-level forward
        calls, no optimizer stepped, no step(), and gradients off now."""
        if self.lead_optimizer is not None or self.explicit_steps:
            return False
        grad_enabled = getattr(self.torch, "is_grad_enabled", None)
        return callable(grad_enabled) and not grad_enabled()

    def _opt_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            if self._is_compiling():
                self._note_compile()
                return
            if self.forward_steps:  # an optimizer after all: its steps are the steps
                self.forward_steps = False
            self.optimizer_depth += 1
            if self.optimizer_depth == 1:
                rec = self.rec
                log = rec.log
                if rec.plain and len(log) < LOG_MAX:
                    log.append(rec.clock())
                    log.append(OPTIMIZER)
                else:
                    rec.enter(OPTIMIZER)
        except Exception as exc:
            self.report_error("optimizer pre-hook", exc)

    def _opt_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            # The common case, first: the lead optimizer ends the step.
            if self.optimizer_depth == 1 and id(optimizer) == self.fast_lead:
                self.optimizer_depth = 0
                self.rec.close_step(X_OPTIMIZER)
                return
            self._opt_post_other(optimizer)
        except Exception as exc:
            self.report_error("optimizer post-hook", exc)

    def _opt_post_other(self, optimizer: Any) -> None:
        # No is_compiling() here: a pre-hook that dynamo traced entered no
        # phase, so the depth is 0 and this returns at once.
        if self.optimizer_depth == 0:
            return
        self.optimizer_depth -= 1
        if self.optimizer_depth:
            return  # an optimizer stepping inside another (wrappers): one phase
        key = id(optimizer)
        if key == self.lead_optimizer and not self.explicit_steps:
            self.stepped_since_boundary.clear()
            if self.detecting and self.roots:
                self._finish_detection()
            self.rec.close_step(X_OPTIMIZER)
        else:
            self.rec.exit(OPTIMIZER)
            if self.explicit_steps:
                pass
            elif self.lead_optimizer is None:
                self.lead_optimizer = key
                self.boundary()
            elif key == self.lead_optimizer:
                self.stepped_since_boundary.clear()
                self.boundary()
            elif key in self.stepped_since_boundary:
                # This optimizer stepped twice without the lead: the lead is gone
                # (e.g. re-created each epoch), so this one leads from now on.
                self.lead_optimizer = key
                self.stepped_since_boundary.clear()
                self.boundary()
            else:
                self.stepped_since_boundary.add(key)
        self._refresh_fast_lead()

    def _refresh_fast_lead(self) -> None:
        """``fast_lead`` is the lead optimizer's id while its post hook needs no
        more than ending the step: no other optimizer stepped since the last
        boundary, root detection is over, and step() is not in use."""
        plain = not (self.explicit_steps or self.detecting or self.stepped_since_boundary)
        self.fast_lead = self.lead_optimizer if plain else None

    # -- forward ------------------------------------------------------------------
    def _global_pre(self, module: Any, args: Any) -> None:
        try:
            if self._is_compiling():
                self._note_compile()
                return
            if self.depth == 0:
                if len(self.roots) < MAX_ROOTS:
                    self.roots.setdefault(id(module), module)
                self.root_calls += 1
                inference = self.root_calls >= INFERENCE_CALLS and self._inference_loop()
                if inference:  # the step from the start (warm-up) ends; calls' begin
                    self.forward_steps = True
                    self.rec.boundary()
                self.rec.enter(FORWARD)
                if inference or self.root_calls >= ROOT_DETECTION_CALLS:
                    # at this call's end, in the global post hook: torch would
                    # not call a root's route or hooks installed now for this
                    # call, and the forward phase would never end
                    self.finish_after_call = True
            self.depth += 1
        except Exception as exc:
            self.report_error("forward pre-hook", exc)

    def _forward_post(self, module: Any, args: Any, output: Any) -> None:
        # The temporary global hook's post hook.
        try:
            if self._is_compiling():
                return
            self._leave()
            if self.finish_after_call and self.depth == 0:
                # Safe here: torch iterates a tuple copy of the global hooks.
                self.finish_after_call = False
                self._finish_detection()
        except Exception as exc:
            self.report_error("forward hook", exc)

    def _leave(self) -> None:
        if self.depth <= 0:
            return
        self.depth -= 1
        if self.depth == 0:
            exit_forward(self)

    def _finish_detection(self) -> None:
        self.detecting = False
        self.finish_after_call = False
        self._refresh_fast_lead()
        for handle in self.global_module_handles:
            handle.remove()
        self.global_module_handles = []
        modules = list(self.roots.values())
        self._hook_roots(modules)
        self.root_refs = []
        for module in modules:
            try:
                self.root_refs.append(weakref.ref(module))
            except TypeError:
                pass
        # Keep only the count: holding the modules would keep a discarded model alive.
        self.roots = {key: None for key in self.roots}

    def _hook_roots(self, modules: list[Any]) -> None:
        for module in modules:
            route = _CallRoute.install(self, module)
            if route is not None:
                self.handles.append(route)
            else:
                self._hook_root(module)

    def _hook_root(self, module: Any) -> None:
        """Forward pre/post hooks on one root module (the general route)."""
        pre, post = _RootPreHook(self), _RootPostHook(self)
        try:
            handle = module.register_forward_hook(post, always_call=True)
        except TypeError:
            handle = module.register_forward_hook(post)
        self.handles.append(handle)
        self.handles.append(module.register_forward_pre_hook(pre))

    def recheck_roots(self) -> None:
        """Called now and then off the training thread: a root whose call route
        was replaced (``module.compile()`` after the first step) gets the hooks.
        Registering a hook is a dict insertion, atomic under the GIL."""
        for route in list(self.handles):
            if type(route) is _CallRoute and not route.intact():
                module = route.module()
                route.remove()
                try:
                    self.handles.remove(route)
                except ValueError:
                    continue
                if module is not None:
                    self._hook_root(module)

    def _note_compile(self) -> None:
        """A hook traced by dynamo: compiled code runs it again on every call
        (the attribute stores of traced code are replayed), so it only notes
        that torch.compile is in use.  Steps that compiled are told by the
        compile watch (dynamo's own records)."""
        self.compile_seen = True


def _loader_info(it: Any) -> tuple[int, bool, bool, int | None] | None:
    """(num_workers, pin_memory, persistent_workers, prefetch_factor) of a
    DataLoader iterator; None when its attributes are not as torch names them."""
    try:
        workers = int(it._num_workers)
        pin = bool(it._pin_memory)
        persistent = bool(getattr(it, "_persistent_workers", False))
        prefetch = getattr(it, "_prefetch_factor", None)
        return workers, pin, persistent, prefetch if isinstance(prefetch, int) else None
    except Exception:  # another torch's internals: say nothing rather than break a step
        return None
