"""Real processes in cgroups made the way Slurm makes them (cgroup v2:
``.../slurmstepd.scope/job_J/step_S/user/task_0``; cgroup v1:
``/slurm/uid_U/job_J/step_S/task_0``), attributed by the live source (root with
a writable hierarchy of that version; skipped with the reason otherwise)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from gputui.host.attribution import ContainerAttributor
from gputui.host.collector import HostCollector
from gputui.host.runtime_api import RuntimeNames
from gputui.host.scontrol import ScontrolNames
from gputui.nvml.collector import NvmlCollector
from gputui.sources.live import LiveSource
from tests.helpers.cgroups import process_in, writable
from tests.helpers.fake_nvml import FakeNvml, FakeProcess, h100

V2, WHY_V2 = writable("cgroup2")
V1, WHY_V1 = writable("cgroup")


def _sample(pid: int) -> dict[int, object]:
    attributor = ContainerAttributor(names=RuntimeNames({}), jobs=ScontrolNames("no-scontrol"))
    source = LiveSource(
        gpu=NvmlCollector(FakeNvml([h100(processes=[FakeProcess(pid), FakeProcess(os.getpid())])])),
        host=HostCollector(),
        containers=attributor,
    )
    try:
        snapshot = source.sample()
    finally:
        source.close()
    return {p.pid: p for p in snapshot.processes}


@pytest.mark.skipif(V2 is None, reason=WHY_V2)
def test_a_slurm_v2_step_is_attributed_by_the_live_source() -> None:
    assert V2 is not None
    job = 400000 + secrets.randbelow(100000)
    path = V2 / f"gputui-test-{secrets.token_hex(4)}" / "slurmstepd.scope" / f"job_{job}"
    path = path / "step_0" / "user" / "task_0"
    env = {"SLURM_JOB_ID": str(job), "SLURM_JOB_NAME": "train\x1b[2J", "SLURM_STEP_ID": "0"}
    with process_in(V2, path, env) as pid:
        assert f"/job_{job}/step_0/user/task_0" in Path(f"/proc/{pid}/cgroup").read_text()
        by_pid = _sample(pid)
        placed = by_pid[pid].slurm  # type: ignore[attr-defined]
        assert placed is not None
        assert (placed.job_id, placed.step, placed.uid, placed.name) == (
            job,
            "0",
            None,
            "train\x1b[2J",  # kept exact: the views clean it
        )
        assert by_pid[pid].container is None  # type: ignore[attr-defined]
        # the control: this test's own process is in no job
        assert by_pid[os.getpid()].slurm is None  # type: ignore[attr-defined]


@pytest.mark.skipif(V1 is None, reason=WHY_V1)
def test_a_slurm_v1_batch_step_is_attributed() -> None:
    assert V1 is not None
    job = 500000 + secrets.randbelow(100000)
    path = V1 / f"gputui-test-{secrets.token_hex(4)}" / "slurm" / "uid_4242" / f"job_{job}"
    path = path / "step_batch" / "task_0"
    # no SLURM_JOB_ID: the environment does not name the job, and scontrol is missing
    with process_in(V1, path, {}) as pid:
        by_pid = _sample(pid)
        placed = by_pid[pid].slurm  # type: ignore[attr-defined]
        assert placed is not None
        assert (placed.job_id, placed.step, placed.uid, placed.name) == (job, "batch", 4242, None)
        assert placed.note is not None and "not installed" in placed.note
