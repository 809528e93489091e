"""DDP on GPUs with NCCL under the hook (run on a GPU machine): the gradient
all-reduce wait is the "comm" phase in wall and GPU time, training runs on
unharmed, and with two GPUs or more the slow rank is named.

    .venv/bin/python -m pytest -q tests/integration/test_ranks_gpu.py
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gputui.collectors.job_group import parent_pid
from gputui.protocol import list_sockets
from tests.helpers import hookutil
from tests.helpers.deadlines import START_S, WAIT_S

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

JOB = hookutil.REPO / "bench" / "jobs" / "train_ddp_cpu.py"
TORCHRUN = Path(sys.executable).with_name("torchrun")


def test_ddp_on_gpus_with_nccl(monkeypatch: pytest.MonkeyPatch) -> None:
    nproc = min(2, torch.cuda.device_count())
    with hookutil.isolated_dirs() as dirs:
        env = hookutil.make_env(*dirs)
        monkeypatch.setenv("GPUTUI_SOCKET_DIR", env["GPUTUI_SOCKET_DIR"])
        cmd = [
            sys.executable, "-m", "gputui", "run", "--",
            str(TORCHRUN), "--standalone", f"--nproc-per-node={nproc}", str(JOB),
            "--device", "cuda", "--steps", "0", "--data-sleep", "0.002",
            "--slow-rank", "1", "--slow-data-s", "0.02",
        ]  # fmt: skip
        proc = subprocess.Popen(
            cmd, env=env, cwd=str(hookutil.REPO), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip

        def all_up() -> list[int] | None:
            if proc.poll() is not None:
                raise AssertionError(f"torchrun exited:\n{proc.communicate()[0]}")
            pids = sorted(p for p in list_sockets() if parent_pid(p) == proc.pid)
            return pids if len(pids) == nproc else None

        try:
            ranks = hookutil.wait_for(all_up, START_S, "the ranks' sockets")

            def report() -> dict | None:
                out = hookutil.gputui(env, "attach", str(ranks[0]), "--once", "--json")
                assert out.returncode == 0, out.stderr
                doc = json.loads(out.stdout)
                return doc if doc["stats"]["count"] >= 30 else None

            doc = hookutil.wait_for(report, START_S, "30 steps")
            status = doc["status"]
            assert status["errors"] == [], status["errors"]
            assert status["comm"]["ddp_models"] == 1 and status["comm"]["collectives"]
            phases = {p["name"]: p for p in doc["stats"]["phases"]}
            assert phases["comm"]["mean"] > 0
            gpu_phases = {p["name"]: p for p in doc["stats"]["gpu_phases"]}
            assert "comm" in gpu_phases and "backward" in gpu_phases
            if nproc >= 2:
                (f,) = [f for f in doc["job"]["findings"] if f["rule"] == "ranks.straggler"]
                assert f["scope"] == "rank 1"
            print(json.dumps({"phases": phases, "gpu_phases": gpu_phases}, indent=1))
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
            print(proc.communicate(timeout=WAIT_S)[0][-3000:])
