"""How a root module's forward is timed: on the short call route
(``_compiled_call_impl``) where it applies, else with forward hooks that survive
copies and pickles of the user's module.

Everything here runs on every forward of the user's model.  The owner (the
torch hooks) is reached through :class:`RootOwner`, a structural type, so this
module does not import the module that uses it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, Protocol

from gputui.hook._recorder import FORWARD, LOG_MAX, X_FORWARD, Recorder


class RootOwner(Protocol):
    """What the root hooks need of the torch hooks that own them."""

    rec: Recorder
    depth: int
    torch: Any
    #: each top-level forward call ends a step (an inference loop)
    forward_steps: bool

    def _is_compiling(self) -> bool: ...

    def _note_compile(self) -> None: ...

    def report_error(self, where: str, exc: BaseException) -> None: ...


def exit_forward(th: RootOwner) -> None:
    """A top-level forward call's end: the forward phase's exit, and the step's
    end where each call is a step (an inference loop)."""
    if th.forward_steps:
        th.rec.exit_boundary(FORWARD)
    else:
        th.rec.exit(FORWARD)


#: What a copied or unpickled root hook becomes: callable with any arguments, a no-op.
_INERT: Callable[..., None] = getattr(None, "__init__")  # noqa: B009


class _PortableHook:
    """A hook stored on the user's module: it must survive ``copy.deepcopy(model)``
    and ``torch.save(model)`` (an EMA copy, a whole-model checkpoint) without
    dragging the hook's sockets and threads along.  A copy or a pickle of it is
    ``None.__init__``: a builtin that accepts any arguments, returns None (so
    torch changes nothing) and unpickles anywhere, gputui installed or not."""

    __slots__ = ("th",)

    def __init__(self, th: RootOwner) -> None:
        self.th = th

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return (getattr, (None, "__init__"))

    def __deepcopy__(self, memo: Any) -> Any:
        return _INERT

    def __copy__(self) -> Any:
        return _INERT


class _RootCall:
    """The forward phase of a root module on the short route: set as the
    module's ``_compiled_call_impl``, which ``Module.__call__`` calls instead of
    ``_call_impl`` when set (``module.compile()`` uses it).  ``_call_impl`` then
    takes its fast path (no hooks on the module) and this is one Python call per
    forward, where forward hooks cost torch's slow path and two calls.

    torch drops ``_compiled_call_impl`` when a module is pickled or deep-copied;
    where it would not, a copy of this becomes ``None``: the copy calls its own
    ``_call_impl`` as if never hooked."""

    __slots__ = ("call", "th")

    def __init__(self, th: RootOwner, call: Callable[..., Any]) -> None:
        self.th = th
        self.call = call  # the module's bound _call_impl

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return (type(None), ())

    def __deepcopy__(self, memo: Any) -> None:
        return None

    def __copy__(self) -> None:
        return None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        th = self.th
        if th._is_compiling():
            th._note_compile()
            return self.call(*args, **kwargs)
        if th.depth:  # inside another root's forward: one phase
            th.depth += 1
            try:
                return self.call(*args, **kwargs)
            finally:
                th.depth -= 1
        rec = th.rec
        log = rec.log
        if rec.plain and len(log) < LOG_MAX:
            log.append(rec.clock())
            log.append(FORWARD)
        else:
            rec.enter(FORWARD)
        th.depth = 1
        try:
            return self.call(*args, **kwargs)
        finally:
            th.depth = 0
            log = rec.log
            if rec.plain and len(log) < LOG_MAX and not th.forward_steps:
                log.append(rec.clock())
                log.append(X_FORWARD)
            else:
                exit_forward(th)


_MISSING = object()


class _CallRoute:
    """A root module on the ``_RootCall`` route; removable like a hook handle."""

    __slots__ = ("call", "had_own", "module")

    def __init__(self, module: Any, call: _RootCall, had_own: bool) -> None:
        self.module = weakref.ref(module)
        self.call = call
        self.had_own = had_own  # the instance had its own None before

    @classmethod
    def install(cls, th: RootOwner, module: Any) -> _CallRoute | None:
        """Put ``module`` on the route, or None where it does not apply (old torch,
        a module with its own ``__call__``, a compiled or scripted module)."""
        nn_module = th.torch.nn.Module
        wrapped = getattr(nn_module, "_wrapped_call_impl", None)
        if wrapped is None or vars(nn_module).get("__call__") is not wrapped:
            return None
        if type(module).__call__ is not wrapped:
            return None
        script = getattr(getattr(th.torch, "jit", None), "ScriptModule", None)
        if isinstance(script, type) and isinstance(module, script):
            return None
        if getattr(module, "_compiled_call_impl", _MISSING) is not None:
            return None  # compiled with module.compile(), or a torch without the slot
        call_impl = getattr(module, "_call_impl", None)
        if not callable(call_impl):
            return None
        attrs = vars(module)
        call = _RootCall(th, call_impl)
        route = cls(module, call, "_compiled_call_impl" in attrs)
        attrs["_compiled_call_impl"] = call
        return route

    def intact(self) -> bool:
        module = self.module()
        return module is None or vars(module).get("_compiled_call_impl") is self.call

    def remove(self) -> None:
        module = self.module()
        if module is None:
            return
        attrs = vars(module)
        if attrs.get("_compiled_call_impl") is self.call:
            if self.had_own:
                attrs["_compiled_call_impl"] = None
            else:
                del attrs["_compiled_call_impl"]


class _RootPreHook(_PortableHook):
    __slots__ = ()

    def __call__(self, module: Any, args: Any) -> None:
        th = self.th
        try:
            if th._is_compiling():
                th._note_compile()
                return
            if th.depth == 0:
                th.rec.enter(FORWARD)
            th.depth += 1
        except Exception as exc:
            th.report_error("forward pre-hook", exc)


class _RootPostHook(_PortableHook):
    __slots__ = ()

    def __call__(self, module: Any, args: Any, output: Any) -> None:
        th = self.th
        try:
            # As in _opt_post: a traced pre-hook left the depth at 0.
            if th.depth > 0:
                th.depth -= 1
                if th.depth == 0:
                    exit_forward(th)
        except Exception as exc:
            th.report_error("forward hook", exc)
