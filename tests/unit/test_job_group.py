"""The ranks of a job grouped from their hellos, and a pid (a rank's or the
launcher's) resolved to its job, with sockets and /proc stubbed."""

from __future__ import annotations

import os

import pytest

from gputui.client.hook import AttachError
from gputui.client.job_group import (
    find_job,
    group_jobs,
    list_jobs,
    parent_pid,
    read_hellos,
    world_size_of,
)
from gputui.commands.ls import job_entry
from gputui.protocol.schema import Hello
from gputui.reports.ls import _spans

LAUNCHER = 500


def rank(pid: int, r: int, world: int = 2, **kw: object) -> Hello:
    base: dict[str, object] = dict(
        pid=pid,
        ppid=LAUNCHER,
        argv=("train.py",),
        hostname="node1",
        rank=r,
        local_rank=r,
        world_size=world,
        local_world_size=world,
        run_id="run-a",
        master="localhost:29500",
    )
    base.update(kw)
    return Hello(**base)  # type: ignore[arg-type]


def single(pid: int) -> Hello:
    return Hello(pid=pid, ppid=1, argv=("python", "solo.py"), hostname="node1")


def test_ranks_of_one_job_are_one_group_in_rank_order() -> None:
    (solo, job) = group_jobs([rank(12, 1), single(3), rank(11, 0)])
    assert solo.pids == (3,) and not solo.multi_rank
    assert job.pids == (11, 12) and job.ranks == (0, 1) and job.multi_rank
    assert job.launcher_pid == LAUNCHER and job.world_size == 2 and job.missing == 0


def test_two_jobs_stay_apart() -> None:
    jobs = group_jobs(
        [rank(11, 0), rank(12, 1), rank(21, 0, run_id="run-b"), rank(22, 1, run_id="run-b")]
    )
    assert [j.pids for j in jobs] == [(11, 12), (21, 22)]


def test_torchruns_default_run_id_groups_by_master() -> None:
    jobs = group_jobs(
        [
            rank(11, 0, run_id="none"),
            rank(12, 1, run_id="none"),
            rank(21, 0, run_id="none", master="localhost:29501"),
        ]
    )
    assert [j.pids for j in jobs] == [(11, 12), (21,)]


def test_without_run_id_or_master_the_common_parent_groups() -> None:
    jobs = group_jobs(
        [
            rank(11, 0, run_id=None, master=None),
            rank(12, 1, run_id=None, master=None),
            rank(21, 0, run_id=None, master=None, ppid=600),
        ]
    )
    assert [j.pids for j in jobs] == [(11, 12), (21,)]


def test_one_rank_claimed_twice_is_two_jobs() -> None:
    # the same run id reused by a job started after an earlier one left ranks behind
    jobs = group_jobs([rank(11, 0, started=1.0), rank(31, 0, started=2.0), rank(12, 1)])
    assert sorted(j.pids for j in jobs) == [(11, 12), (31,)]


def test_ranks_on_other_nodes_are_missing() -> None:
    (job,) = group_jobs([rank(11, 0, world=8, local_world_size=4)])
    assert job.missing == 7 and job.local_world_size == 4 and job.launcher_pid is None


def test_find_job_from_a_rank_or_the_launcher() -> None:
    hellos = {11: rank(11, 0), 12: rank(12, 1), 3: single(3)}
    sockets = {pid: f"/x/{pid}.sock" for pid in hellos}
    parents = {11: LAUNCHER, 12: LAUNCHER, 3: 1}

    def find(pid: int, world: int) -> object:
        return find_job(
            pid,
            sockets=sockets,
            summary=hellos.__getitem__,
            parent_of=parents.get,
            world_size=lambda _pid: world,
        )

    by_rank = find(12, 2)
    by_launcher = find(LAUNCHER, 1)
    assert by_rank is not None and by_rank.pids == (11, 12)  # type: ignore[attr-defined]
    assert by_launcher is not None and by_launcher.pids == (11, 12)  # type: ignore[attr-defined]
    assert by_launcher.launcher_pid == LAUNCHER  # type: ignore[attr-defined]
    assert find(3, 1) is None  # a single process: attached alone
    assert find(999, 1) is None  # nothing hooked under it: the caller says why


def test_hellos_that_fail_are_reported_not_raised() -> None:
    def summary(pid: int) -> Hello:
        if pid == 2:
            raise AttachError("gputui attach: no hello")
        return single(pid)

    hellos, errors = read_hellos([1, 2, 3], summary)
    assert sorted(h.pid for h in hellos) == [1, 3] and errors == {2: "gputui attach: no hello"}
    jobs, errors = list_jobs({1: "a", 2: "b"}, summary)
    assert [j.pids for j in jobs] == [(1,)] and list(errors) == [2]


def test_proc_reads() -> None:
    assert parent_pid(os.getpid()) == os.getppid()
    assert parent_pid(2**22 + 7) is None
    assert world_size_of(2**22 + 7) == 1


@pytest.mark.parametrize(
    ("numbers", "text"), [([0, 1, 2, 5], "0-2,5"), ([3], "3"), ([4, 0, 2, 1], "0-2,4")]
)
def test_rank_spans(numbers: list[int], text: str) -> None:
    assert _spans(numbers) == text


def test_ls_lists_a_job_once_with_its_ranks() -> None:
    (job,) = group_jobs([rank(11, 0, world=4), rank(12, 1, world=4)])
    entry = job_entry(job)
    assert entry["pid"] == 11 and entry["launcher_pid"] == LAUNCHER
    assert entry["world_size"] == 4 and entry["local_ranks"] == 2
    assert entry["missing_ranks"] == 2 and entry["run_id"] == "run-a"
    assert [r["pid"] for r in entry["ranks"]] == [11, 12]
    (solo,) = group_jobs([single(3)])
    assert "ranks" not in job_entry(solo)
