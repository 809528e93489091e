"""What the hook does once the job loads dynamo (torch.compile's frontend).

While a compiled function runs, dynamo looks at every Python frame that starts
and compiles it unless its code is marked to be skipped; frames of torch's own
files are skipped, the hook's are not.  So a hook that torch calls from one of
its skipped frames (``Module._call_impl`` runs a module's hooks; compiled code
reaches it through ``torch.compile(model)`` or ``module.compile()``) would be
compiled as a frame of its own: its ``is_compiling()`` then reads True on
every call, the forward it times is no longer timed, and on torch 2.4 some
compile again at every step.  And the global module hooks of step detection,
once removed, fail the guards of every frame compiled while they were there:
one recompile per compiled frame.  Hence two things, done when dynamo loads:

- every function of the hook is marked "skip this frame" (dynamo's
  ``skip_code``): entered from eager code it runs as written, and traced code
  that calls it still traces it (the mark is read for frames, not for inlined
  calls);
- the start of the first compile ends step detection
  (``TorchHooks.compile_starts``), before dynamo reads the global hook dicts.

Both are dynamo's private APIs (the same from torch 2.4 to 2.13): each is looked
up guarded, and a torch without one keeps the behaviour of before, which the
compile report shows (``hook_recompiles``).  Nothing here imports dynamo: it
runs when the job does.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from gputui.protocol.compile import SOURCE_SKIP_CODE, SOURCE_START_CALLBACKS

#: the hook's modules whose functions torch may call: every one of gputui.hook
#: loaded when dynamo loads, but not the bootstrap (a copy of the interpreter's
#: sitecustomize, run before anything else)
_PACKAGE = "gputui.hook"
_SKIP_MODULES = ("gputui.hook._bootstrap",)


def _codes(value: Any, seen: set[int]) -> Iterator[types.CodeType]:
    """The code objects of a function, method, property or class (and of the
    functions defined inside them)."""
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        for part in (value.fget, value.fset, value.fdel):
            if part is not None:
                yield from _codes(part, seen)
        return
    if isinstance(value, type):
        for item in list(vars(value).values()):
            yield from _codes(item, seen)
        return
    code = getattr(value, "__code__", None)
    if isinstance(code, types.CodeType):
        yield from _nested(code)


def _nested(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _nested(const)


def hook_codes(modules: Iterable[types.ModuleType] | None = None) -> list[types.CodeType]:
    """Every code object defined by the hook's loaded modules."""
    if modules is None:
        modules = [
            mod
            for name, mod in list(sys.modules.items())
            if (name == _PACKAGE or name.startswith(_PACKAGE + "."))
            and not name.startswith(_SKIP_MODULES)
            and isinstance(mod, types.ModuleType)
        ]
    seen: set[int] = set()
    out: list[types.CodeType] = []
    for mod in modules:
        for value in list(vars(mod).values()):
            if getattr(value, "__module__", None) == mod.__name__:
                out.extend(_codes(value, seen))
    return out


def keep_out(
    dynamo: Any, on_compile_start: Callable[[], None]
) -> tuple[list[str], Callable[[], None] | None]:
    """Mark the hook's code skipped and call ``on_compile_start`` when dynamo
    starts compiling a frame.  Returns what this torch lacks (the compile
    report's ``unavailable`` names), and what takes the callback out again.
    Never raises."""
    missing = []
    skip = getattr(getattr(dynamo, "eval_frame", None), "skip_code", None)
    try:
        if not callable(skip):
            raise AttributeError("skip_code")
        for code in hook_codes():
            skip(code)
    except Exception:
        missing.append(SOURCE_SKIP_CODE)

    def started(*_args: Any) -> None:  # 2.4 passes no argument, 2.13 one
        on_compile_start()

    handler: Any = getattr(dynamo, "callback_handler", None)
    try:
        handler.register_start_callback(started)
    except Exception:
        missing.append(SOURCE_START_CALLBACKS)
        return missing, None

    def remove() -> None:
        try:
            handler.remove_start_callback(started)
        except Exception:
            pass

    return missing, remove
