"""The hook inside real CPU torch training jobs (subprocesses)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gputui.client.hook import HookClient
from gputui.protocol.capture import CaptureResult, CaptureStatus
from gputui.protocol.schema import MemoryBatch, Status, StepBatch, StepRecord, Synced
from tests.helpers import hookutil
from tests.helpers.deadlines import RUN_S, START_S, WAIT_S

DATA_SLEEP = 0.02
PHASE_SLEEP = 0.01


def _history(pid: int, n: int = 1000) -> list[StepRecord]:
    client = HookClient.connect(pid)
    client.subscribe(history=n)
    client.start()
    steps: list[StepRecord] = []
    for ev in hookutil.events(client):
        if isinstance(ev, StepBatch):
            steps += ev.steps
        if isinstance(ev, Synced):
            break
    client.close()
    return steps


def _check_phases(steps: list[StepRecord], count: int) -> None:
    assert [s.index for s in steps] == list(range(count))
    for s in steps[1:]:  # step 0 also holds model warm-up and root-module detection
        assert s.phases["data"] >= DATA_SLEEP
        assert s.phases["user_sleep"] >= PHASE_SLEEP
        assert s.phases["forward"] > 0 and s.phases["backward"] > 0
        assert s.phases["optimizer"] > 0
        assert abs(sum(s.phases.values()) - s.wall) < 1e-5
        assert s.samples == 16 and s.samples_inferred and s.batches == 1


@pytest.mark.slow
def test_install_in_script(env: dict[str, str], tmp_path: Path) -> None:
    job = hookutil.start_job(
        env,
        tmp_path,
        [
            "--install",
            "--steps",
            "12",
            "--data-sleep",
            str(DATA_SLEEP),
            "--phase-sleep",
            str(PHASE_SLEEP),
        ],
    )
    try:
        hookutil.wait_for(lambda: len(_history(job.pid)) == 12, START_S, "12 steps")
        _check_phases(_history(job.pid), 12)
    finally:
        job.stop()
    assert job.proc.returncode == 0
    assert not os.path.exists(os.path.join(env["GPUTUI_SOCKET_DIR"], f"{job.pid}.sock"))


@pytest.mark.slow
def test_gputui_run_with_forked_workers(env: dict[str, str], tmp_path: Path) -> None:
    job = hookutil.start_job(
        env,
        tmp_path,
        [
            "--steps",
            "10",
            "--workers",
            "2",
            "--data-sleep",
            str(DATA_SLEEP),
            "--phase-sleep",
            str(PHASE_SLEEP),
        ],
        via_run=True,
    )
    try:
        steps = hookutil.wait_for(
            lambda: (h := _history(job.pid)) and len(h) == 10 and h, START_S, "10 steps"
        )
        # exec kept the pid; only the training process serves, not its workers
        # (they write their Python profiles in its <pid>.workers directory)
        assert job.proc.pid == job.pid
        names = set(os.listdir(env["GPUTUI_SOCKET_DIR"]))
        assert {n for n in names if n.endswith(".sock")} == {f"{job.pid}.sock"}
        assert names <= {f"{job.pid}.sock", f"{job.pid}.workers"}
        assert [s.index for s in steps] == list(range(10))
        assert all(s.phases["user_sleep"] >= PHASE_SLEEP for s in steps)
        assert all(s.batches == 1 for s in steps)
        client = HookClient.connect(job.pid)
        assert client.hello.lazy is True
        assert "--workers" in client.hello.argv
        # the DataLoader's settings reach the viewer (the data rules name them)
        loader = client.hello.status.loader
        assert loader is not None and loader.num_workers == 2 and loader.pin_memory is False
        client.close()
    finally:
        job.stop()
    assert job.proc.returncode == 0


@pytest.mark.slow
def test_capture_cpu_ops_and_refusal_of_second(env: dict[str, str], tmp_path: Path) -> None:
    job = hookutil.start_job(env, tmp_path, ["--install", "--steps", "0", "--data-sleep", "0.002"])
    try:
        client = HookClient.connect(job.pid)
        client.subscribe(history=0, memory=True)
        client.start()
        cid = client.request_capture(steps=3, warmup=1, shapes=True)
        client.request_capture(steps=3)  # while the first is armed: busy
        states: list[str] = []
        result = None
        newest = -1  # the newest step received before the result
        for ev in hookutil.events(client):
            if isinstance(ev, StepBatch) and ev.steps:
                newest = max(newest, ev.steps[-1].index)
            if isinstance(ev, CaptureStatus):
                states.append(ev.state)
            if isinstance(ev, CaptureResult) and ev.id == cid:
                result = ev
                break
            assert not isinstance(ev, MemoryBatch)  # no CUDA: no memory samples
        client.close()
        assert result is not None and result.error is None
        # the second request is refused while the first is under way (if it
        # reaches the hook late, the first may have reported its warm-up already)
        assert states[0] == "armed" and "busy" in states
        assert {"warmup", "recording", "processing"} <= set(states)
        names = [op.name for op in result.cpu_ops]
        assert "aten::addmm" in names or "aten::linear" in names
        assert result.kernels == ()  # CPU only
        trace = json.loads(Path(result.trace_path or "").read_text())
        assert any(e.get("name", "").startswith("ProfilerStep#") for e in trace["traceEvents"])
        assert (result.hook_stall_ms or 0) >= 0 and (result.stop_ms or 0) >= 0
        # the profiled steps are flagged so statistics can leave them out
        first, last = result.first_step, result.last_step
        assert first is not None and last is not None
        # ... and reach the viewer before the result that names them
        assert newest >= last
        # the step that began at the profiler's stop is flagged too (the worker
        # processes the capture beside it, sharing the GIL); the first that
        # began after the result's time is not (1 ms: the result's rounding)
        assert result.window_end_wall is not None and result.ready_after_ms is not None
        ready = result.window_end_wall + result.ready_after_ms / 1000.0 + 0.001

        def after_ready() -> dict[int, StepRecord] | None:
            h = {s.index: s for s in _history(job.pid, 2000)}
            return h if any(s.index > last and s.t - s.wall > ready for s in h.values()) else None

        steps = hookutil.wait_for(after_ready, WAIT_S, "a step after the capture's result")
        for i in range(first, last + 2):
            assert steps[i].profiled
        assert last - first + 1 == 3
        later = min(i for i, s in steps.items() if i > last and s.t - s.wall > ready)
        assert not steps[later].profiled
    finally:
        job.stop()


@pytest.mark.slow
def test_user_profiler_refused(env: dict[str, str], tmp_path: Path) -> None:
    job = hookutil.start_job(
        env, tmp_path, ["--install", "--steps", "0", "--data-sleep", "0.005", "--user-profiler"]
    )
    try:
        client = HookClient.connect(job.pid)
        client.start()
        client.request_capture(steps=2)
        ev = client.get(timeout=WAIT_S)
        client.close()
        assert isinstance(ev, CaptureStatus) and ev.state == "refused"
        assert "profiler" in (ev.reason or "")
        before = client.hello.status.last_step or 0
        # the command line says so in one line, exit 1
        out = hookutil.gputui(env, "attach", str(job.pid), "--capture", "2", "--once")
        assert out.returncode == 1
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("gputui attach: capture refused:")
        assert "torch profiler session is already running" in lines[0]
        # ...and the job trains on, with nothing left armed
        hookutil.wait_for(lambda: (_status(job.pid).last_step or 0) > before + 2, what="steps")
        assert _status(job.pid).capture.state is None
    finally:
        job.stop()


def _status(pid: int) -> Status:
    client = HookClient.connect(pid)
    client.close()
    return client.hello.status


@pytest.mark.slow
def test_loop_without_optimizer(env: dict[str, str], tmp_path: Path) -> None:
    job = hookutil.start_job(
        env, tmp_path, ["--install", "--steps", "7", "--no-optimizer", "--batch-size-hint", "5"]
    )
    try:
        steps = hookutil.wait_for(lambda: (h := _history(job.pid)) and len(h) == 7 and h, START_S)
        assert all("optimizer" not in s.phases and s.samples == 5 for s in steps)
        assert all(s.phases["backward"] > 0 for s in steps)
    finally:
        job.stop()


@pytest.mark.slow
def test_an_inference_loop_gets_a_step_per_forward_call(
    env: dict[str, str], tmp_path: Path
) -> None:
    """No optimizer, no step(), forward calls under torch.inference_mode(): after
    INFERENCE_CALLS calls each top-level forward call ends a step, and the
    status says so."""
    from gputui.protocol.hello import INFERENCE_CALLS

    calls = INFERENCE_CALLS + 15
    job = hookutil.start_job(env, tmp_path, ["--install", "--steps", str(calls), "--inference"])
    try:
        # the first step starts with the INFERENCE_CALLS-th call: one step per
        # call from there, the last still open while the job lingers
        want = calls - INFERENCE_CALLS
        steps = hookutil.wait_for(
            lambda: (h := _history(job.pid)) and len(h) >= want and h, START_S
        )
        assert [s.index for s in steps] == list(range(len(steps)))
        for s in steps:
            assert s.phases["forward"] > 0 and "optimizer" not in s.phases
            assert "backward" not in s.phases
        assert _status(job.pid).forward_steps
        report = hookutil.gputui(env, "attach", str(job.pid), "--once", "--no-capture")
        assert report.returncode == 0, report.stderr
        assert "one per top-level forward call" in " ".join(report.stdout.split())
    finally:
        job.stop()


@pytest.mark.slow
def test_forward_phases_survive_root_detection_ending_inside_a_call(
    env: dict[str, str], tmp_path: Path
) -> None:
    """More top-level forward calls than root detection waits for (gradients
    on, no optimizer yet: an evaluation that forgot no_grad), then training: the
    call that ends detection closes its forward phase (it was left open: every
    later call counted as nested, and the forward phase took the steps' other
    time)."""
    from gputui.hook._torch_hooks import ROOT_DETECTION_CALLS

    first = str(ROOT_DETECTION_CALLS + 10)
    job = hookutil.start_job(env, tmp_path, ["--install", "--steps", "8", "--forward-first", first])
    try:
        steps = hookutil.wait_for(lambda: (h := _history(job.pid)) and len(h) >= 8 and h, START_S)
        assert not _status(job.pid).forward_steps  # gradients on: no inference loop
        for s in steps[1:]:
            assert s.phases["forward"] > 0 and s.phases["backward"] > 0, s.phases
            # the loss and zero_grad run outside the model: with the forward
            # phase left open, the step had no "other" time at all
            assert s.phases.get("other", 0.0) > 0, s.phases
    finally:
        job.stop()


def test_hook_imports_nothing_heavy() -> None:
    code = (
        "import sys, gputui.hook, gputui.protocol\n"
        "gputui.hook.install(lazy=True)\n"
        "bad = [m for m in ('textual', 'rich', 'pynvml', 'psutil', 'torch') if m in sys.modules]\n"
        "assert not bad, bad\n"
        "bad = [m for m in sys.modules if m.startswith('gputui.') and not "
        "m.startswith(('gputui.hook', 'gputui.protocol', 'gputui.trace'))]\n"
        "assert not bad, bad\n"
    )
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        timeout=RUN_S,
        cwd=str(hookutil.REPO),
        env={**os.environ, "PYTHONPATH": str(hookutil.REPO)},
    )


def test_run_chains_sitecustomize_in_another_interpreter(
    env: dict[str, str], tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['CHAINED'] = 'yes'\n")
    run_env = dict(env, PYTHONPATH=str(other))
    code = (
        "import os, gputui.hook\n"
        "print(gputui.hook.installed(), os.environ.get('CHAINED'), gputui.__file__)\n"
        "for _ in range(3): gputui.hook.step()\n"
    )
    # The system interpreter has neither torch nor gputui installed.
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    out = hookutil.gputui(run_env, "run", "--", python, "-c", code)
    assert out.returncode == 0, out.stderr
    installed, chained, where = out.stdout.split()
    assert (installed, chained) == ("True", "yes")
    assert where.startswith(str(hookutil.REPO))
    status = hookutil.gputui(run_env, "run", python, "-c", "import sys; sys.exit(7)")
    assert status.returncode == 7


@pytest.mark.slow
@pytest.mark.gpu
def test_cuda_phase_times_memory_and_kernels(env: dict[str, str], tmp_path: Path) -> None:
    job = hookutil.start_job(env, tmp_path, ["--install", "--steps", "0", "--device", "cuda"])
    try:
        client = HookClient.connect(job.pid)
        client.subscribe(history=50, memory=True)
        client.start()
        cid = client.request_capture(steps=3)
        gpu_steps: list[StepRecord] = []
        memory = result = None
        for ev in hookutil.events(client, START_S):
            if isinstance(ev, StepBatch):
                gpu_steps += [s for s in ev.steps if s.gpu is not None]
            if isinstance(ev, MemoryBatch):
                memory = ev.samples[-1]
            if isinstance(ev, CaptureResult) and ev.id == cid:
                result = ev
            if result is not None and memory is not None and len(gpu_steps) > 5:
                break
        client.close()
        assert client.hello.cuda_in_use or gpu_steps
        s = gpu_steps[-1]
        assert s.gpu_total is not None and s.gpu_total > 0
        assert s.gpu is not None and s.gpu.get("forward", 0) > 0 and s.gpu.get("backward", 0) > 0
        assert memory is not None and memory.allocated > 0 and memory.reserved >= memory.allocated
        assert result is not None and result.kernels and result.gpu_time is not None
        assert not any(k.name.startswith("ProfilerStep#") for k in result.kernels)
        assert "gemm" in result.by_class
    finally:
        job.stop()


@pytest.mark.slow
@pytest.mark.parametrize("persistent", [False, True])
def test_each_epoch_start_is_flagged_with_the_loader_as_it_is(
    env: dict[str, str], tmp_path: Path, persistent: bool
) -> None:
    """Epochs of 5 steps over a DataLoader with 2 forked workers: the step in
    which each epoch's iterator gives its first batch carries LOADER_START (the
    next epoch's iterator may reuse the freed one's id: each is still flagged),
    the others do not, and the status names the loader as it was built; a job
    that imported a training framework's module says which."""
    from gputui.protocol.messages import StepFlag

    args = ["--install", "--steps", "23", "--workers", "2", "--epoch-steps", "5"]
    args += ["--import-framework", "transformers.trainer"]
    job = hookutil.start_job(env, tmp_path, args + (["--persistent-workers"] if persistent else []))
    try:
        steps = hookutil.wait_for(lambda: (h := _history(job.pid)) and len(h) >= 22 and h, START_S)
        flagged = [s.index for s in steps if s.flags & StepFlag.LOADER_START]
        # the first batch comes before the first step boundary: step 0 holds it;
        # each later epoch's first batch comes after its last step's optimizer step
        assert flagged == [0, 5, 10, 15, 20]
        status = _status(job.pid)
        assert status.loader is not None
        assert status.loader.num_workers == 2
        assert status.loader.persistent_workers is persistent
        assert status.frameworks == ("transformers",)
    finally:
        job.stop()


@pytest.mark.parametrize("viewer", [False, True], ids=["alone", "with-a-viewer"])
def test_ctrl_c_ends_a_hooked_job_by_sigint(
    env: dict[str, str], tmp_path: Path, viewer: bool
) -> None:
    """Ctrl-C in a shell: the job dies of SIGINT (130 to the shell), as without
    the hook.  The hook's I/O thread says bye as the job exits; an encoder
    compiled then (an exec of a string) made CPython forget the unhandled
    KeyboardInterrupt, and the job exited 1."""
    import signal

    ready = tmp_path / "ready"
    code = (
        "import pathlib, sys, time, gputui.hook\n"
        "for i in range(10**9):\n"
        "    gputui.hook.step()\n"
        "    if i == 20: pathlib.Path(sys.argv[1]).write_text('go')\n"
        "    time.sleep(0.005)\n"
    )
    proc = subprocess.Popen(
        [hookutil.PY, "-m", "gputui", "run", "--", hookutil.PY, "-c", code, str(ready)],
        env=env,
        cwd=str(hookutil.REPO),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a shell's foreground job
    )
    client = None
    try:
        hookutil.wait_for(lambda: ready.exists() or proc.poll() is not None, START_S, "steps")
        assert proc.poll() is None, proc.communicate()[1]
        if viewer:
            client = HookClient.connect(proc.pid)
            client.subscribe(history=50)
            client.start()
            hookutil.wait_for(
                lambda: any(isinstance(e, StepBatch) for e in hookutil.events(client, WAIT_S)),
                WAIT_S,
                "the viewer's first steps",
            )
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal sends on Ctrl-C
        _, err = proc.communicate(timeout=WAIT_S)
        assert "KeyboardInterrupt" in err
        assert proc.returncode == -signal.SIGINT, err
    finally:
        if client is not None:
            client.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_hooks_wire_classes_are_compiled_before_the_job_exits(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Whatever the hook may send as the job exits (a bye, a first profile or
    capture to a viewer that just subscribed) is compiled when its I/O thread
    starts: an exec of a string after an unhandled KeyboardInterrupt would make
    the job exit 1, not by SIGINT, as it did when a viewer subscribed just
    before a Ctrl-C."""
    code = (
        "import time, gputui.hook\n"
        "from gputui.protocol import spec\n"
        "gputui.hook.install()\n"
        "for _ in range(5): gputui.hook.step()\n"
        "deadline = time.monotonic() + 60\n"
        "while spec.uncompiled() and time.monotonic() < deadline: time.sleep(0.01)\n"
        "print(spec.uncompiled(), spec.compile_declared())\n"
    )
    out = subprocess.run(
        [hookutil.PY, "-c", code],
        env=env,
        cwd=str(hookutil.REPO),
        capture_output=True,
        text=True,
        timeout=RUN_S,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    left, declared = map(int, out.stdout.split())
    assert left == 0 and declared > 20
