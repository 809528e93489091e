"""Real processes in cgroups made the way Slurm makes them (cgroup v2:
``.../slurmstepd.scope/job_J/step_S/user/task_0``; cgroup v1:
``/slurm/uid_U/job_J/step_S/task_0``), attributed by the live source (root with
a writable hierarchy of that version; skipped with the reason otherwise)."""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputui.host.attribution import ContainerAttributor
from gputui.host.collector import HostCollector
from gputui.host.runtime_api import RuntimeNames
from gputui.host.scontrol import ScontrolNames
from gputui.nvml.collector import NvmlCollector
from gputui.sources.live import LiveSource
from tests.helpers.fake_nvml import FakeNvml, FakeProcess, h100


def _mounts() -> list[tuple[str, Path, str]]:
    """(fstype, mount point, super options) of each cgroup mount."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        fields, _, tail = line.partition(" - ")
        fstype, _source, options = ([*tail.split(" "), "", ""])[:3]
        if fstype in ("cgroup", "cgroup2"):
            out.append((fstype, Path(fields.split()[4]), options))
    return out


def _writable(fstype: str) -> tuple[Path | None, str]:
    """A writable hierarchy of that type (v1: freezer, else any), or why not."""
    if os.geteuid() != 0:
        return None, "needs root (creates a cgroup and moves a process into it)"
    mounts = [(m, o) for t, m, o in _mounts() if t == fstype]
    if fstype == "cgroup":
        mounts.sort(key=lambda mo: "freezer" not in mo[1].split(","))
    if not mounts:
        return None, f"no {fstype} hierarchy mounted"
    reasons = []
    for mount, _options in mounts:
        probe = mount / f"gputui-probe-{secrets.token_hex(4)}"
        try:
            probe.mkdir()
            probe.rmdir()
        except OSError as exc:
            reasons.append(f"{mount}: {exc}")
            continue
        return mount, ""
    return None, "no writable " + fstype + " hierarchy (" + "; ".join(reasons) + ")"


V2, WHY_V2 = _writable("cgroup2")
V1, WHY_V1 = _writable("cgroup")


@contextlib.contextmanager
def process_in(mount: Path, cgroup: Path, env: dict[str, str]) -> Iterator[int]:
    """A sleeping child with ``env`` moved into ``cgroup`` (made here, with its
    parents, under ``mount``); all removed after."""
    made: list[Path] = []
    for parent in reversed(cgroup.relative_to(mount).parents):
        if parent != Path("."):
            path = mount / parent
            if not path.exists():
                path.mkdir()
                made.append(path)
    cgroup.mkdir()
    made.append(cgroup)
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], env={**os.environ, **env}
    )
    try:
        (cgroup / "cgroup.procs").write_text(str(child.pid))
        yield child.pid
    finally:
        child.kill()
        child.wait(30)
        for path in reversed(made):
            with contextlib.suppress(OSError):
                path.rmdir()
    assert not any(p.exists() for p in made)


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
