"""DDP on GPUs with NCCL under the hook (run on a GPU machine): the gradient
all-reduce wait is the "comm" phase in wall and GPU time, training runs on
unharmed, and with two GPUs or more the slow rank is named.

    .venv/bin/python -m pytest -q tests/integration/test_ranks_gpu.py
"""

from __future__ import annotations

import json

import pytest

from tests.helpers import hookutil
from tests.helpers.ddp_gpu import ddp_job
from tests.helpers.deadlines import START_S

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def test_ddp_on_gpus_with_nccl() -> None:
    nproc = min(2, torch.cuda.device_count())
    job_args = ("--data-sleep", "0.002", "--slow-rank", "1", "--slow-data-s", "0.02")
    with ddp_job(nproc, *job_args) as job:
        env, ranks = job.env, job.ranks

        def straggler(doc: dict) -> list[dict]:
            return [f for f in doc["job"]["findings"] if f["rule"] == "ranks.straggler"]

        def report() -> dict | None:
            out = hookutil.gputui(env, "attach", str(ranks[0]), "--once", "--json")
            assert out.returncode == 0, out.stderr
            doc = json.loads(out.stdout)
            if doc["stats"]["count"] < 30:
                return None
            # the rank rules need 20 ordinary steps of every rank
            return doc if nproc < 2 or straggler(doc) else None

        doc = hookutil.wait_for(report, START_S, "30 steps and, on two GPUs, the straggler")
        status = doc["status"]
        assert status["errors"] == [], status["errors"]
        assert status["comm"]["ddp_models"] == 1 and status["comm"]["collectives"]
        phases = {p["name"]: p for p in doc["stats"]["phases"]}
        assert phases["comm"]["mean"] > 0
        gpu_phases = {p["name"]: p for p in doc["stats"]["gpu_phases"]}
        assert "comm" in gpu_phases and "backward" in gpu_phases
        if nproc >= 2:
            (f,) = straggler(doc)
            assert f["scope"] == "rank 1"
        print(json.dumps({"phases": phases, "gpu_phases": gpu_phases}, indent=1))
