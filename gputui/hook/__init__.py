"""gputui's in-job hook: step/phase timing, memory and on-demand profiler captures
served to ``gputui attach`` over a private local socket.

Usage inside a training script::

    import gputui.hook
    gputui.hook.install(batch_size=64)     # idempotent
    for batch in loader:                   # data / forward / backward / optimizer
        ...                                # are found without further code
        with gputui.hook.phase("logging"): # optional user-named phases
            ...
    # loops without a torch optimizer mark steps themselves:
    gputui.hook.step()

Or with no code change: ``gputui run -- python train.py``.

This package runs inside arbitrary jobs and interpreters: it imports only the
standard library, :mod:`gputui.protocol`, and torch once the job has imported it.
Nothing here raises into the training loop; errors are reported in hello/status.
"""

from __future__ import annotations

import os
import sys
import threading
from types import TracebackType
from typing import Any

from gputui.hook._core import Hook

__all__ = ["install", "installed", "phase", "set_batch_size", "step", "uninstall"]

_HOOK: Hook | None = None
_LOCK = threading.Lock()
_FORK_HANDLER = False


def install(
    batch_size: int | None = None,
    capture_every_s: float | None = None,
    gpu_timing: bool = True,
    lazy: bool = False,
) -> Hook | None:
    """Load the hook into this process (idempotent: later calls only update
    ``batch_size`` / ``capture_every_s`` when given).

    batch_size: samples per DataLoader batch (or per step without a DataLoader),
        for samples/s; without it the first dimension of each DataLoader batch is
        used and marked as inferred.
    capture_every_s: run a 5-step profiler capture every this many seconds
        (off by default; captures slow the captured steps down).
    gpu_timing: record CUDA events at phase edges for GPU time per phase.
    lazy: open the socket only when the process starts training (first phase or
        step); ``gputui run`` uses this so helper processes stay invisible.
    """
    global _HOOK, _FORK_HANDLER
    try:
        with _LOCK:
            hook = _HOOK
            if hook is not None and hook.pid == os.getpid() and hook.active:
                if batch_size is not None:
                    hook.recorder.batch_size = int(batch_size) or None
                if capture_every_s is not None:
                    hook.capture.every_s = float(capture_every_s) or None
                if not lazy:
                    hook.serve()
                return hook
            hook = Hook(
                batch_size=int(batch_size) if batch_size else None,
                capture_every_s=float(capture_every_s) if capture_every_s else None,
                gpu_timing=gpu_timing,
                lazy=lazy,
            )
            _HOOK = hook
            if not _FORK_HANDLER and hasattr(os, "register_at_fork"):
                os.register_at_fork(after_in_child=_after_fork_in_child)
                _FORK_HANDLER = True
            hook.start()
            return hook
    except Exception as exc:
        print(f"gputui.hook: install failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None


def uninstall() -> None:
    """Remove every hook, close the socket (tests, or a job that wants out)."""
    global _HOOK
    with _LOCK:
        hook, _HOOK = _HOOK, None
    if hook is not None:
        hook.uninstall()


def installed() -> bool:
    hook = _HOOK
    return hook is not None and hook.active


def _after_fork_in_child() -> None:
    global _HOOK
    hook = _HOOK
    if hook is not None:
        hook.after_fork_in_child()
        _HOOK = None


def step() -> None:
    """Mark a step boundary, for loops without a torch optimizer.  Once called,
    optimizer steps no longer end steps (they are still timed as a phase).  A no-op
    when the hook is not installed."""
    hook = _HOOK
    if hook is not None:
        try:
            hook.torch_hooks.explicit_step()
        except Exception as exc:
            hook.report_error("step()", exc)


def set_batch_size(n: int | None) -> None:
    """Samples per DataLoader batch (per step without a DataLoader), for samples/s."""
    hook = _HOOK
    if hook is not None:
        try:
            hook.recorder.batch_size = int(n) if n else None
        except (TypeError, ValueError) as exc:
            hook.report_error("set_batch_size()", exc)


class phase:
    """Time a user-named phase; also a ``record_function`` range while a profiler
    (gputui's capture or the user's own) is running, so it shows in traces.

    Time is attributed to the innermost phase only, so nested phases never count
    twice and a step's phases add up to its wall time."""

    __slots__ = ("_range", "name")

    def __init__(self, name: str) -> None:
        # The recorder's edge log tags exits and markers with a leading \x00 or
        # \x01: a name cannot start with either, nor be empty.
        self.name = str(name).lstrip("\x00\x01") or "unnamed"
        self._range: Any = None

    def __enter__(self) -> phase:
        hook = _HOOK
        if hook is None:
            return self
        hook.recorder.enter(self.name)
        torch = hook.recorder.torch
        if torch is not None:
            try:
                # record_function costs a few us; only pay it while profiling.
                if torch.autograd.profiler._is_profiler_enabled:
                    rng = torch.autograd.profiler.record_function(self.name)
                    rng.__enter__()
                    self._range = rng
            except Exception as exc:
                hook.report_error("phase() profiler range", exc)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        rng, self._range = self._range, None
        if rng is not None:
            try:
                rng.__exit__(None, None, None)
            except Exception:
                pass
        hook = _HOOK
        if hook is not None:
            hook.recorder.exit(self.name)
