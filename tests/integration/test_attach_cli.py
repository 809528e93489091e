"""`gputui ls` and `gputui attach` against real jobs, through the CLI."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import hookutil
from tests.helpers.deadlines import START_S, WAIT_S


@pytest.fixture(scope="module")
def env() -> Iterator[dict[str, str]]:
    with hookutil.isolated_dirs() as dirs:
        yield hookutil.make_env(*dirs)


@pytest.fixture(scope="module")
def job(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[hookutil.Job]:
    j = hookutil.start_phase_job(env, tmp_path_factory.mktemp("job"))
    yield j
    j.stop()


@pytest.mark.slow
def test_ls(env: dict[str, str], job: hookutil.Job) -> None:
    out = hookutil.gputui(env, "ls", "--json")
    assert out.returncode == 0, out.stderr
    (entry,) = json.loads(out.stdout)
    assert entry["pid"] == job.pid
    assert entry["steps"] >= 1 and entry["recent_step_s"] > 0.004
    assert "train_cpu.py" in " ".join(entry["command"])
    text = hookutil.gputui(env, "ls")
    assert str(job.pid) in text.stdout and "train_cpu.py" in text.stdout


@pytest.mark.slow
def test_serve_streams_the_hooked_job(env: dict[str, str], job: hookutil.Job) -> None:
    from tests.unit.test_serve_stream import first_frame, serve_once

    hello, frame = first_frame(serve_once(env=env))  # a hello and one snapshot
    assert hello.label == "live"
    (rank,) = frame.ranks
    assert rank.pid == job.pid and rank.steps and rank.recent_step_s
    assert rank.job_id and any("train_cpu.py" in word for word in rank.command)


@pytest.mark.slow
def test_attach_once_json(env: dict[str, str], job: hookutil.Job) -> None:
    out = hookutil.gputui(env, "attach", str(job.pid), "--once", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    stats = report["stats"]
    assert stats["count"] >= 1
    phases = {p["name"]: p for p in stats["phases"]}
    assert phases["data"]["p50"] >= 0.004 and phases["user_sleep"]["p50"] >= 0.002
    assert abs(sum(p["share"] for p in phases.values()) - 1.0) < 1e-4
    assert report["hello"]["pid"] == job.pid and report["memory"] is None
    # the analyzer ran on the live job (a CPU job: no GPU to sample, said so)
    assert isinstance(report["findings"], list) and report["gpu_samples"] == 0
    assert all(f["rule"] and f["fix"] for f in report["findings"])


@pytest.mark.slow
def test_attach_capture_once(env: dict[str, str], job: hookutil.Job) -> None:
    out = hookutil.gputui(env, "attach", str(job.pid), "--capture", "2", "--once")
    assert out.returncode == 0, out.stderr
    assert "capture: recording" in out.stderr
    assert "top CPU ops" in out.stdout and "aten::" in out.stdout
    assert "trace:" in out.stdout
    js = hookutil.gputui(env, "attach", str(job.pid), "--capture", "2", "--once", "--json")
    cap = json.loads(js.stdout)["capture"]
    assert cap["cpu_ops"] and cap["last_step"] - cap["first_step"] == 1


@pytest.mark.slow
def test_attach_capture_with_flops_reports_the_model_flops(
    env: dict[str, str], job: hookutil.Job
) -> None:
    """The job's MLP (Linear(32, 64), ReLU, Linear(64, 1), batches of 16; its
    input needs no gradient), hand-counted at 2·m·n·k per product: forward
    2·16·32·64 + 2·16·64·1; backward the second layer's input and weight
    gradients (2·16·1·64 each) and the first layer's weight gradient
    (2·64·16·32).  A CPU job has no peak: the rate is there, the MFU is not."""
    b = 16
    forward = 2 * b * 32 * 64 + 2 * b * 64 * 1
    backward = 2 * (2 * b * 1 * 64) + 2 * 64 * b * 32
    args = ("attach", str(job.pid), "--capture", "2", "--flops", "--once")
    js = hookutil.gputui(env, *args, "--json")
    assert js.returncode == 0, js.stderr
    report = json.loads(js.stdout)
    util = report["utilisation"]
    assert util["model_flops_per_step"] == pytest.approx(forward + backward, rel=0.01)
    assert util["hardware_flops_per_step"] == pytest.approx(util["model_flops_per_step"])
    assert util["dtype"] == "fp32" and util["achieved_tflops"] > 0
    assert util["mfu"] is None and util["note"] == "peak unknown for a CPU job"
    assert report["capture"]["flop_totals"]["ops"] >= 5
    text = hookutil.gputui(env, *args)
    assert "peak unknown for a CPU job" in text.stdout
    # no roofline, and no bench to run for one: its time is in the account
    said = " ".join(text.stdout.split())
    assert "roofline: none for a CPU job" in said and "gputui bench" not in said
    # the profiler's stop in the report's own format (was "3.602 ms")
    assert re.search(r"profiler stop (\d+(\.\d+)?(ms|us|s)|-)\b", said), said


@pytest.mark.slow
def test_attach_without_once_explains(env: dict[str, str], job: hookutil.Job) -> None:
    out = hookutil.gputui(env, "attach", str(job.pid))
    assert out.returncode == 2 and "--once" in out.stderr


def test_pid_without_hook(env: dict[str, str]) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        out = hookutil.gputui(env, "attach", str(sleeper.pid), "--once")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert out.returncode == 2
    for hint in ("gputui run", "gputui.hook.install()", f"--inject {sleeper.pid}"):
        assert hint in out.stderr
    assert "Traceback" not in out.stderr


def test_nonexistent_pid(env: dict[str, str]) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    out = hookutil.gputui(env, "attach", str(gone.pid), "--once")
    assert out.returncode != 0 and "no process" in out.stderr
    assert "Traceback" not in out.stderr


def test_inject_needs_python_314(env: dict[str, str]) -> None:
    if sys.version_info >= (3, 14):
        pytest.skip("this interpreter supports sys.remote_exec")
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        out = hookutil.gputui(env, "attach", "--inject", str(victim.pid), "--once")
    finally:
        victim.kill()
        victim.wait()
    assert out.returncode == 2 and "3.14" in out.stderr and "gputui run" in out.stderr


@pytest.mark.slow
def test_job_killed_while_attached(env: dict[str, str], tmp_path: Path) -> None:
    victim = hookutil.start_job(
        env, tmp_path, ["--install", "--steps", "0", "--data-sleep", "0.05"]
    )
    attach = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gputui",
            "attach",
            str(victim.pid),
            "--capture",
            "100",
            "--warmup",
            "0",
            "--once",
        ],
        env=env,
        cwd=str(hookutil.REPO),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert attach.stderr is not None
        deadline = time.monotonic() + START_S
        seen = ""
        while "recording" not in seen:  # the capture is under way: kill the job
            assert time.monotonic() < deadline, seen
            seen += attach.stderr.readline()
        victim.proc.kill()
        _, err = attach.communicate(timeout=WAIT_S)
    finally:
        victim.stop()
        if attach.poll() is None:
            attach.kill()
    assert attach.returncode == 1
    assert f"job {victim.pid} exited" in err and "Traceback" not in err


@pytest.mark.slow
def test_attaching_to_a_dataloader_worker_names_the_job(
    env: dict[str, str], tmp_path: Path
) -> None:
    """A worker never gets a hook: say whose worker it is, not "try again"."""
    import psutil

    job = hookutil.start_job(
        env, tmp_path, ["--steps", "0", "--workers", "2", "--data-sleep", "0.01"], via_run=True
    )
    try:
        workers = hookutil.wait_for(
            lambda: psutil.Process(job.pid).children(), START_S, "the DataLoader workers"
        )
        out = hookutil.gputui(env, "attach", str(workers[0].pid), "--once")
        assert out.returncode == 2
        assert f"child of the hooked job {job.pid}" in out.stderr
        assert f"gputui attach {job.pid}" in out.stderr and "try again" not in out.stderr
    finally:
        job.stop()
