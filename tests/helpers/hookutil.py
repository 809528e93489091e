"""Helpers for the hook tests: start CPU training jobs in subprocesses and wait
for them with deadlines (never fixed sleeps)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.helpers.deadlines import RUN_S, START_S, WAIT_S

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "tests" / "jobs" / "train_cpu.py"
#: a hooked job without torch, for tests that only need something to attach to
STEP_JOB = REPO / "tests" / "jobs" / "step_job.py"
PY = sys.executable


def wait_for(predicate: Callable[[], Any], timeout: float = WAIT_S, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.02)


def make_env(sock_dir: str, cache_dir: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["GPUTUI_SOCKET_DIR"] = sock_dir
    env["XDG_CACHE_HOME"] = cache_dir
    env["PYTHONPATH"] = str(REPO)
    env.pop("GPUTUI_HOOK_PKG", None)
    env.update(extra)
    return env


@contextmanager
def isolated_dirs() -> Iterator[tuple[str, str]]:
    # AF_UNIX paths are limited to ~107 bytes: keep the socket dir short.
    sock_dir = tempfile.mkdtemp(prefix="gt-", dir="/tmp")
    os.rmdir(sock_dir)  # the hook creates it with 0700
    cache_dir = tempfile.mkdtemp(prefix="gtc-", dir="/tmp")
    try:
        yield sock_dir, cache_dir
    finally:
        subprocess.run(["rm", "-rf", sock_dir, cache_dir], check=False)


class Job:
    def __init__(
        self, proc: subprocess.Popen[str], ready: Path, linger: Path, forever: bool
    ) -> None:
        self.proc = proc
        self.ready = ready
        self.linger = linger
        self.forever = forever

    @property
    def pid(self) -> int:
        return int(self.ready.read_text())

    def stop(self) -> None:
        """Let a finite job exit normally (exit handlers run); kill an endless one."""
        self.linger.touch()
        if not self.forever:
            try:
                self.proc.wait(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=WAIT_S)


def start_job(
    env: dict[str, str],
    tmp: Path,
    job_args: list[str],
    via_run: bool = False,
    python: str = PY,
    job: Path = JOB,
) -> Job:
    ready = tmp / "ready"
    linger = tmp / "linger"
    for path in (ready, linger):
        if path.exists():
            path.unlink()
    cmd = [python, str(job), "--ready-file", str(ready), "--linger-file", str(linger), *job_args]
    if via_run:
        cmd = [PY, "-m", "gputui", "run", "--", *cmd]
    proc = subprocess.Popen(
        cmd, env=env, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )

    def is_ready() -> bool:
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"job exited early ({proc.returncode}):\n{out}\n{err}")
        return ready.exists()

    wait_for(is_ready, START_S, "the job to start training")
    steps = job_args[job_args.index("--steps") + 1] if "--steps" in job_args else "50"
    return Job(proc, ready, linger, forever=steps == "0")


def gputui(
    env: dict[str, str], *args: str, timeout: float = RUN_S
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "gputui", *args],
        env=env,
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start_phase_job(env: dict[str, str], directory: Path) -> Job:
    """The CPU training job the attach tests watch: known data and user-phase sleeps,
    started through ``gputui run``, stepping until stopped."""
    return start_job(
        env,
        directory,
        ["--steps", "0", "--data-sleep", "0.004", "--phase-sleep", "0.002"],
        via_run=True,
    )


def wait_steps(hook: Any, n: int, timeout_s: float = WAIT_S) -> None:
    """Wait until the in-process hook's I/O thread has moved ``n`` finished steps
    into its ring (it does so 2-5 times a second), and check that it has."""
    server = hook.server
    assert server is not None
    wait_for(lambda: server.collector.steps_total >= n, timeout_s, f"{n} steps in the ring")
    assert server.collector.steps_total == n


def finished_steps(hook: Any, timeout_s: float = WAIT_S) -> list[dict[str, Any]]:
    """Every step the training thread of this process has finished, as the
    hook's ring holds them (wire records), once its I/O thread has moved them
    all there.  (``hook.recorder.out`` is what that thread has not taken yet:
    how much is left there depends on when it last ran.)"""
    server = hook.server
    assert server is not None
    collector = server.collector
    wait_for(
        lambda: collector.last_index >= hook.recorder.index - 1,
        timeout_s,
        f"the steps before step {hook.recorder.index} in the ring",
    )
    return list(collector.ring.last(collector.steps_total))


def steps(n: int) -> None:
    """``n`` step boundaries of this process's hook."""
    import gputui.hook

    for _ in range(n):
        gputui.hook.step()


def events(client: Any, timeout_s: float = WAIT_S) -> Iterator[Any]:
    """A viewer's events until Disconnected (included), failing the test if
    ``timeout_s`` passes first: a subscribed viewer gets steps all the time, so
    a wait for one event among them needs a deadline of its own."""
    from gputui.client.hook import Disconnected

    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        ev = client.get(timeout=remaining) if remaining > 0 else None
        if ev is None:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for an event")
        yield ev
        if isinstance(ev, Disconnected):
            return


def indices_until_synced(client: Any) -> list[int]:
    """The step indices a subscribed client receives until the hook says Synced."""
    from gputui.protocol.schema import StepBatch, Synced

    indices: list[int] = []
    for ev in events(client):
        if isinstance(ev, StepBatch):
            indices += [s.index for s in ev.steps]
        if isinstance(ev, Synced):
            return indices
    raise AssertionError("no Synced")
