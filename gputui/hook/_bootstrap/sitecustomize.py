"""Bootstrap for ``gputui run``: loads the gputui hook into every Python process
of the job, then runs whatever ``sitecustomize`` the environment had.

``gputui run`` puts this directory first on PYTHONPATH and names the gputui
package directory in ``GPUTUI_HOOK_PKG``.  The package is loaded from exactly that
directory (not by adding its parent to sys.path, which would put every package of
gputui's own virtualenv -- another torch, say -- ahead of the job's).  The hook
opens its socket lazily, at the first training activity, so helper processes
(the torchrun agent, compile workers, a shell script's other commands) stay
invisible.  Nothing here may stop the interpreter from starting.
"""

import os
import sys


def _gputui_skip() -> bool:
    argv = list(getattr(sys, "orig_argv", None) or sys.argv or [])
    joined = " ".join(argv)
    # multiprocessing spawn/forkserver children and helpers re-run sitecustomize:
    # they are not the training process (the parent is, or a torchrun worker).
    return "--multiprocessing-fork" in argv or "from multiprocessing" in joined


def _gputui_load() -> None:
    pkg = os.environ.get("GPUTUI_HOOK_PKG")
    if not pkg or _gputui_skip() or sys.version_info < (3, 8):
        return
    if "gputui" not in sys.modules:
        import importlib.util

        spec = importlib.util.spec_from_file_location(
            "gputui", os.path.join(pkg, "__init__.py"), submodule_search_locations=[pkg]
        )
        if spec is None or spec.loader is None:
            return
        module = importlib.util.module_from_spec(spec)
        sys.modules["gputui"] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules["gputui"]
            raise
    import json

    opts = json.loads(os.environ.get("GPUTUI_HOOK_OPTS") or "{}")
    import gputui.hook

    gputui.hook.install(
        batch_size=opts.get("batch_size"),
        capture_every_s=opts.get("capture_every_s"),
        gpu_timing=bool(opts.get("gpu_timing", True)),
        lazy=True,
    )


def _gputui_chain() -> None:
    """Run the next ``sitecustomize`` on sys.path, as Python would have without us."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    ours = sys.modules.get("sitecustomize")
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        if ours is not None:
            sys.modules["sitecustomize"] = ours
        sys.stderr.write(
            "Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
            f"{type(exc).__name__}: {exc}\n"
        )


try:
    _gputui_load()
except Exception as _exc:
    sys.stderr.write(f"gputui: hook not loaded: {type(_exc).__name__}: {_exc}\n")
_gputui_chain()
