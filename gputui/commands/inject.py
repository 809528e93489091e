"""``gputui attach --inject PID``: load the hook into a running job that was
started without it (Python >= 3.14, ``sys.remote_exec``).

The injected payload imports this very gputui package by path and writes its
outcome to a file in a private temporary directory, so errors inside the job are
reported here as one line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time

import gputui
from gputui.client.hook import AttachError
from gputui.protocol import find_socket, paths

_PAYLOAD = """\
import sys, traceback
_result = {result!r}
try:
    if "gputui" not in sys.modules:
        import importlib.util
        _spec = importlib.util.spec_from_file_location(
            "gputui", {init!r}, submodule_search_locations=[{pkg!r}])
        _mod = importlib.util.module_from_spec(_spec)
        sys.modules["gputui"] = _mod
        _spec.loader.exec_module(_mod)
    import gputui.hook
    _hook = gputui.hook.install()
    if _hook is None:
        _msg = "error: install() failed"
    elif _hook.serve_error:
        _msg = "error: " + _hook.serve_error
    else:
        _msg = "ok"
except BaseException:
    _msg = "error: " + traceback.format_exc()
with open(_result + ".tmp", "w") as _fh:
    _fh.write(_msg)
import os
os.replace(_result + ".tmp", _result)
"""


def _interpreter_version(exe: str, pid: int) -> tuple[int, int]:
    try:
        out = subprocess.run(
            [exe, "-I", "-c", "import sys; print('%d %d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AttachError(
            f"gputui attach --inject: cannot run process {pid}'s interpreter ({exc})"
        ) from None
    parts = out.stdout.split()
    if out.returncode != 0 or len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise AttachError(f"gputui attach --inject: process {pid} does not look like Python")
    return int(parts[0]), int(parts[1])


def inject(pid: int, timeout: float = 30.0) -> None:
    """Load the hook into running process ``pid`` with ``sys.remote_exec``."""
    if not paths.pid_alive(pid):
        raise AttachError(f"gputui attach: no process with pid {pid}")
    if find_socket(pid) is not None:
        return  # already hooked
    exe = f"/proc/{pid}/exe"
    major, minor = _interpreter_version(exe, pid)
    if (major, minor) < (3, 14):
        raise AttachError(
            f"gputui attach --inject: process {pid} runs Python {major}.{minor}; loading the "
            "hook into a running job needs Python >= 3.14 (sys.remote_exec). Restart it with "
            "'gputui run -- python ...' or add 'import gputui.hook; gputui.hook.install()'"
        )
    pkg = os.path.dirname(os.path.abspath(gputui.__file__))
    work = tempfile.mkdtemp(prefix="gputui-inject-")  # 0700, ours
    try:
        result = os.path.join(work, "result")
        script = os.path.join(work, "payload.py")
        with open(script, "w") as fh:
            fh.write(_PAYLOAD.format(result=result, init=os.path.join(pkg, "__init__.py"), pkg=pkg))
        call = subprocess.run(
            [exe, "-I", "-c", f"import sys; sys.remote_exec({pid}, {script!r})"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        if call.returncode != 0:
            last = (call.stderr.strip().splitlines() or ["unknown error"])[-1]
            raise AttachError(
                f"gputui attach --inject: sys.remote_exec on {pid} failed: {last} (needs ptrace "
                "permission: see /proc/sys/kernel/yama/ptrace_scope; the job must not set "
                "PYTHON_DISABLE_REMOTE_DEBUG)"
            )
        deadline = time.monotonic() + timeout
        while not os.path.exists(result):
            if time.monotonic() > deadline or not paths.pid_alive(pid):
                raise AttachError(
                    f"gputui attach --inject: process {pid} did not run the hook within "
                    f"{timeout:g} s (the main thread runs injected code between bytecodes; "
                    "it may be blocked in native code)"
                )
            time.sleep(0.05)
        with open(result) as fh:
            outcome = fh.read()
        if outcome != "ok":
            raise AttachError(f"gputui attach --inject: the hook failed in {pid}: {outcome}")
        while find_socket(pid) is None:
            if time.monotonic() > deadline:
                raise AttachError(f"gputui attach --inject: process {pid} opened no socket")
            time.sleep(0.05)
    finally:
        shutil.rmtree(work, ignore_errors=True)
