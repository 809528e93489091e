"""Faults around real CPU training jobs: a viewer killed mid-capture, a trace
directory that cannot take the trace, the user's own profiler, forks and
DataLoader workers under every start method."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputui.client.hook import HookClient
from gputui.protocol.capture import CaptureResult
from gputui.protocol.schema import StepBatch, Synced
from tests.helpers import hookutil
from tests.helpers.deadlines import START_S, WAIT_S

pytestmark = pytest.mark.slow  # every test here runs a training job


def _newest_step(pid: int) -> int:
    client = HookClient.connect(pid)
    try:
        status = client.hello.status
        return -1 if status.last_step is None else status.last_step
    finally:
        client.close()


def _steps_go_on(pid: int, beyond: int) -> None:
    hookutil.wait_for(lambda: _newest_step(pid) > beyond + 2, what="training to go on")


@pytest.fixture(scope="module")
def job(
    dirs: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[hookutil.Job, dict[str, str]]]:
    """One stepping job for the capture faults, whose writes past 16 KiB fail
    (RLIMIT_FSIZE), as on a disk that fills up while the trace is written."""
    work = tmp_path_factory.mktemp("faults")
    env = hookutil.make_env(dirs[0], str(work / "cache"))
    j = hookutil.start_job(
        env,
        work,
        ["--install", "--steps", "0", "--data-sleep", "0.01", "--fsize-limit", "16384"],
    )
    yield j, env
    j.stop()


# -- a viewer killed in the middle of its capture -------------------------------------------
VIEWER = textwrap.dedent(
    """
    import sys, time
    from gputui.client.hook import CaptureStatus, HookClient
    client = HookClient.connect(int(sys.argv[1]))
    client.subscribe(history=0)
    client.start()
    cid = client.request_capture(steps=int(sys.argv[2]), warmup=0)
    deadline = time.monotonic() + float(sys.argv[3])
    for ev in client.events(timeout=float(sys.argv[3])):
        if isinstance(ev, CaptureStatus) and ev.state == "recording":
            print(cid, flush=True)
            break
        if time.monotonic() > deadline:
            sys.exit("no recording state in time")
    else:
        sys.exit("no recording state")
    sys.stdin.read()  # hold on until killed
    """
)


def test_viewer_killed_mid_capture(
    job: tuple[hookutil.Job, dict[str, str]], env: dict[str, str]
) -> None:
    j, env = job
    viewer = subprocess.Popen(
        [sys.executable, "-c", VIEWER, str(j.pid), "15", str(WAIT_S)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert viewer.stdout is not None
        cid = viewer.stdout.readline().strip()
        assert cid, "the viewer saw no recording state"
        viewer.send_signal(signal.SIGKILL)
        viewer.wait(timeout=WAIT_S)
        # The next viewer gets the killed viewer's capture: live if it is still
        # recording, replayed on subscribe if it is over.
        client = HookClient.connect(j.pid)
        client.subscribe(history=0)
        client.start()
        result = None
        for ev in hookutil.events(client):
            if isinstance(ev, CaptureResult) and ev.id == cid:
                result = ev
                break
        client.close()
        assert result is not None and result.error is None and result.cpu_ops
        assert result.last_step is not None and result.first_step is not None
        assert result.last_step - result.first_step + 1 == 15
        _steps_go_on(j.pid, result.last_step)
        # and the hook takes the next capture, from anyone
        assert _capture_json(env, j.pid)["cpu_ops"]
    finally:
        if viewer.poll() is None:
            viewer.kill()


# -- a trace that cannot be written (more cases: tests/unit/test_trace_export.py) ------------
def _capture_json(env: dict[str, str], pid: int) -> dict[str, object]:
    out = hookutil.gputui(env, "attach", str(pid), "--capture", "2", "--once", "--json")
    assert out.returncode == 0, out.stderr
    capture = json.loads(out.stdout)["capture"]
    assert isinstance(capture, dict)
    return capture


def test_trace_write_fails_half_way(
    job: tuple[hookutil.Job, dict[str, str]], env: dict[str, str]
) -> None:
    """torch only logs the failed write on the job's stderr; the hook names the
    cause, removes the partial file, and the tables still arrive."""
    j, env = job
    cap = _capture_json(env, j.pid)
    error = str(cap["trace_error"])
    assert "file size limit" in error and "\n" not in error, error
    assert cap["trace_path"] is None
    assert cap["cpu_ops"], "the tables must arrive without the trace"
    assert isinstance(cap["last_step"], int)
    _steps_go_on(j.pid, cap["last_step"])
    traces = Path(env["XDG_CACHE_HOME"], "gputui", "traces")
    assert os.listdir(traces) == []  # no partial file left behind
    text = hookutil.gputui(env, "attach", str(j.pid), "--capture", "2", "--once")
    assert text.returncode == 0 and "trace not written" in text.stdout


# -- forks and DataLoader workers --------------------------------------------------------------
FORKING_JOB = textwrap.dedent(
    """
    import json, os, sys, time
    import gputui.hook

    def socket_inodes():
        found = set()
        for fd in os.listdir("/proc/self/fd"):
            try:
                link = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") or "eventpoll" in link:
                found.add(link)
        return found

    hook = gputui.hook.install()
    for _ in range(20):
        gputui.hook.step()
    ours = socket_inodes()
    children = []
    for n in range(8):  # forks while the I/O thread runs, at any point of its work
        for _ in range(50):
            gputui.hook.step()
        pid = os.fork()
        if pid == 0:
            # the child: no hook, none of the parent's sockets, steps are no-ops
            leaked = socket_inodes() & ours
            gputui.hook.step()
            ok = not gputui.hook.installed() and not leaked
            if n % 2:
                sys.exit(0 if ok else 3)  # a normal exit runs atexit handlers
            os._exit(0 if ok else 3)
        children.append(pid)
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]
    for _ in range(10):
        gputui.hook.step()
    print(json.dumps({"codes": codes, "socket": os.path.exists(hook.server.path)}), flush=True)
    with open(sys.argv[1] + ".tmp", "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    deadline = time.monotonic() + float(sys.argv[3])
    while not os.path.exists(sys.argv[2]) and time.monotonic() < deadline:
        time.sleep(0.02)
    """
)


def _history(pid: int) -> list[int]:
    client = HookClient.connect(pid)
    client.subscribe(history=1000)
    client.start()
    indices: list[int] = []
    for ev in hookutil.events(client):
        if isinstance(ev, StepBatch):
            indices += [s.index for s in ev.steps]
        if isinstance(ev, Synced):
            break
    client.close()
    return indices


@pytest.fixture
def own_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """A socket directory of the test's own: what is in it is this test's."""
    with hookutil.isolated_dirs() as d:
        monkeypatch.setenv("GPUTUI_SOCKET_DIR", d[0])
        yield hookutil.make_env(*d)


def _sockets(env: dict[str, str]) -> list[str]:
    try:
        return os.listdir(env["GPUTUI_SOCKET_DIR"])
    except FileNotFoundError:
        return []


def test_fork_in_the_job(own_env: dict[str, str], tmp_path: Path) -> None:
    env = own_env
    ready, linger = tmp_path / "ready", tmp_path / "linger"
    proc = subprocess.Popen(
        [sys.executable, "-c", FORKING_JOB, str(ready), str(linger), str(START_S)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        hookutil.wait_for(lambda: ready.exists() or proc.poll() is not None, START_S, "the job")
        assert proc.poll() is None, proc.communicate()
        assert _sockets(env) == [f"{proc.pid}.sock"]
        # 20 + 8 * 50 + 10 calls: every step of the parent counted, nothing else
        assert _history(proc.pid) == list(range(20 + 8 * 50 + 10 - 1))
    finally:
        linger.touch()
        out, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 0, err
    assert json.loads(out) == {"codes": [0] * 8, "socket": True}, out + err
    assert _sockets(env) == []


def test_dataloader_workers_under_spawn_and_forkserver(
    own_env: dict[str, str], tmp_path: Path
) -> None:
    """Under `gputui run` (the hook in every Python process of the job, lazily):
    an epoch of spawn workers (torch.multiprocessing.set_start_method) and one of
    forkserver workers (the DataLoader's multiprocessing_context).  Steps are
    counted, only the training process serves, nothing is left behind.  Fork
    workers: test_hook.py; os.fork: above."""
    env = own_env
    args = ["--steps", "6", "--workers", "1", "--mp-context", "spawn,forkserver"]
    args += ["--set-start-method", "--data-sleep", "0.005"]
    job = hookutil.start_job(env, tmp_path, args, via_run=True)
    try:
        indices = hookutil.wait_for(
            lambda: (h := _history(job.pid)) and len(h) == 6 and h, START_S, "6 steps"
        )
        assert indices == list(range(6))
        assert _sockets(env) == [f"{job.pid}.sock"]  # the workers have none
    finally:
        job.stop()
    assert job.proc.returncode == 0, job.proc.stderr
    assert _sockets(env) == []
