"""`gputui attach PID --memory-snapshot N` against real jobs: a CPU job is told it
needs CUDA (exit 2, one line); on a GPU, a planted leak is named by its line,
and torch's own memory_viz tooling opens the snapshot file."""

from __future__ import annotations

import itertools
import json
import os
import re
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputui.cli import main
from tests.helpers import hookutil
from tests.helpers.deadlines import RUN_S, START_S, WAIT_S

LEAK_JOB = hookutil.REPO / "tests" / "jobs" / "leak_job.py"
LEAK_LINE = next(
    i
    for i, line in enumerate(LEAK_JOB.read_text().splitlines(), 1)
    if line.rstrip().endswith("# planted leak")
)


@pytest.fixture(scope="module")
def env() -> Iterator[dict[str, str]]:
    with hookutil.isolated_dirs() as dirs:
        yield hookutil.make_env(*dirs)


def start_leak_job(
    env: dict[str, str], tmp: Path, device: str
) -> tuple[subprocess.Popen[str], int]:
    ready = tmp / "ready"
    cmd = [hookutil.PY, "-m", "gputui", "run", "--", hookutil.PY, str(LEAK_JOB)]
    cmd += ["--device", device, "--ready-file", str(ready)]
    proc = subprocess.Popen(
        cmd,
        env=env,
        cwd=str(hookutil.REPO),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def started() -> bool:
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"job exited early ({proc.returncode}):\n{out}\n{err}")
        return ready.exists()

    hookutil.wait_for(started, START_S, "the job to start training")
    return proc, int(ready.read_text())


@pytest.fixture(scope="module")
def cpu_job(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    proc, pid = start_leak_job(env, tmp_path_factory.mktemp("cpu"), "cpu")
    yield pid
    proc.kill()
    proc.communicate(timeout=WAIT_S)


@pytest.mark.slow
@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_a_cpu_job_needs_cuda(
    env: dict[str, str],
    cpu_job: int,
    extra: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("GPUTUI_SOCKET_DIR", env["GPUTUI_SOCKET_DIR"])
    assert main(["attach", str(cpu_job), "--memory-snapshot", "3", *extra]) == 2
    out = capsys.readouterr()
    assert "memory snapshots need a CUDA job" in out.err
    assert out.err.count("\n") == 1 and "Traceback" not in out.err
    assert out.out == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--memory-snapshot", "0"], "must be between 1 and 100"),
        (["--memory-snapshot", "101"], "must be between 1 and 100"),
        (["--memory-snapshot", "x"], "not an integer"),
        (["--memory-snapshot", "3", "--memory-entries", "10"], "must be between 1000 and"),
        (["--memory-snapshot", "3", "--capture", "2"], "runs alone"),
        (["--memory-snapshot", "3", "--timeout", "0"], "must be between 0.1 and 3600"),
        (["--demo", "--memory-snapshot", "3"], "--memory-snapshot needs a job"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    pid = [] if "--demo" in args else ["12345"]
    assert main(["attach", *pid, *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.slow
@pytest.mark.gpu
def test_a_planted_leak_is_named_by_its_line(env: dict[str, str], tmp_path: Path) -> None:
    proc, pid = start_leak_job(env, tmp_path, "cuda")
    try:
        out = hookutil.gputui(env, "attach", str(pid), "--memory-snapshot", "6", "--json")
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        snap = doc["memory_snapshot"]
        assert snap["steps"] == 6 and snap["growth_checked"] and not snap["truncated"]
        top = snap["growing"][0]
        assert top["site"]["file"] == str(LEAK_JOB) and top["site"]["line"] == LEAK_LINE
        assert top["site"]["function"] == "keep"
        # one 256 KiB slice kept per step: the same growth at every boundary
        series = top["live_bytes"]
        assert len(series) == 6 and all(b > a for a, b in itertools.pairwise(series))
        assert top["per_step_bytes"] == pytest.approx(256 * 1024, rel=0.05)
        # the activations and gradients of each step are not leak candidates
        assert len(snap["growing"]) == 1, snap["growing"]
        (finding,) = [f for f in doc["findings"] if f["rule"] == "memory.leak_site"]
        assert f"leak_job.py:{LEAK_LINE} (keep)" in finding["evidence"]
        assert f"leak_job.py:{LEAK_LINE}" in finding["fix"]
        # torch's snapshot file: private, and torch's memory_viz tooling reads it
        path = Path(snap["snapshot_path"])
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        viz = [hookutil.PY, "-m", "torch.cuda._memory_viz"]
        stats = subprocess.run(
            [*viz, "stats", str(path)], capture_output=True, text=True, timeout=RUN_S
        )
        assert stats.returncode == 0, stats.stderr
        assert "total_reserved" in stats.stdout
        trace = subprocess.run(
            [*viz, "trace", str(path)], capture_output=True, text=True, timeout=RUN_S
        )
        assert trace.returncode == 0 and "entries" in trace.stdout
        html = tmp_path / "segments.html"
        plot = [*viz, "segment_plot", str(path), "-o", str(html)]
        assert subprocess.run(plot, capture_output=True, timeout=RUN_S).returncode == 0
        assert html.stat().st_size > 1000
        # the text report names the line too
        text = hookutil.gputui(env, "attach", str(pid), "--memory-snapshot", "5")
        assert text.returncode == 0, text.stderr
        assert f"leak_job.py:{LEAK_LINE} (keep)" in text.stdout
        assert "memory snapshot: recording" in text.stderr
        words = " ".join(text.stdout.split())  # the report wraps to the output's width
        assert re.search(r"file: \S+\.pickle open it at \S+memory_viz", words), words
        assert os.path.exists(snap["snapshot_path"])
    finally:
        proc.kill()
        proc.communicate(timeout=WAIT_S)
