"""Slurm jobs: the cgroup parser over published ``/proc/PID/cgroup`` contents
(tests/data/cgroups/slurm, each file citing where it was published), the job's
name from the environment and from scontrol (a fake one on PATH: slow, missing,
printing garbage), and the attribution that joins them."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gputui.host import scontrol, slurm
from gputui.host.attribution import ContainerAttributor
from gputui.host.containers import parse_cgroup as parse_container
from gputui.host.runtime_api import RuntimeNames
from gputui.host.scontrol import ScontrolNames, run_bounded
from gputui.snapshot.codec import from_json, to_json
from gputui.snapshot.model import ProcessSnapshot, SlurmJob
from tests.helpers.fake_proc import FakeProc

DATA = Path(__file__).resolve().parent.parent / "data" / "cgroups" / "slurm"
FIXTURES = sorted(DATA.glob("*.cgroup"))


def _load(path: Path) -> tuple[str, dict[str, str] | None, dict[str, str]]:
    """The file's cgroup lines, what it expects (None: no job), its environment."""
    lines, expect, source, env = [], None, None, {}
    for line in path.read_text().splitlines():
        if line.startswith("# expect:"):
            words = line.removeprefix("# expect:").split()
            expect = None if words == ["none"] else dict(w.split("=", 1) for w in words)
        elif line.startswith("# environ:"):
            env = dict(w.split("=", 1) for w in line.removeprefix("# environ:").split())
        elif line.startswith("# source:"):
            source = line
        elif not line.startswith("#"):
            lines.append(line)
    assert source is not None, f"{path.name} cites no source"
    return "\n".join(lines) + "\n", expect, env


def test_the_fixtures_cover_both_versions_and_every_kind_of_step() -> None:
    loaded = [_load(p) for p in FIXTURES]
    steps = {e["step"] for _t, e, _env in loaded if e}
    assert {"0", "batch", "extern", "interactive"} <= steps
    texts = [t for t, _e, _env in loaded]
    assert any("slurmstepd.scope" in t for t in texts)  # cgroup v2
    assert any("/uid_" in t for t in texts)  # cgroup v1
    assert any(e is None for _t, e, _env in loaded)  # in no job
    assert any(e and "array" in e for _t, e, _env in loaded)  # a job array's task


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_fixture(path: Path) -> None:
    text, expect, env = _load(path)
    found = slurm.parse_cgroup(text)
    # no Slurm path names a container
    assert parse_container(text) is None
    if expect is None:
        assert found is None
        return
    assert found is not None
    assert found.job_id == int(expect["job"])
    assert found.step == expect.get("step")
    assert found.uid == (int(expect["uid"]) if "uid" in expect else None)
    # names never come from the path
    assert (found.name, found.array_job_id, found.array_task_id) == (None, None, None)
    if env:
        said = slurm.from_environ(env, found.job_id)
        assert said is not None
        array = f"{said.array_job_id}_{said.array_task_id}"
        assert (array, said.name) == (expect["array"], expect["name"])


#: layouts the fixtures lack, by name: (cgroup path, what it names)
LAYOUTS = {
    "het-job-component": (
        "/system.slice/slurmstepd.scope/job_77/step_0+1/user/task_0",
        SlurmJob(77, "0+1"),
    ),
    "job-directory-only": ("/slurm/uid_5/job_9", SlurmJob(9, None, uid=5)),
    "in-a-cgroup-namespace": (
        "/../../system.slice/slurmstepd.scope/job_12/step_3/user/task_1",
        SlurmJob(12, "3"),
    ),
}


@pytest.mark.parametrize(("path", "expected"), list(LAYOUTS.values()), ids=list(LAYOUTS))
def test_layouts(path: str, expected: SlurmJob) -> None:
    assert slurm.parse_path(path) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "garbage",
        "0::/job_12/step_0\n",  # no Slurm root above the job
        "0::/user.slice/user-1000.slice/job_12/step_0\n",
        "0::/system.slice/slurmstepd.scope/job_/step_0\n",
        "0::/system.slice/slurmstepd.scope/job_12a/step_0\n",
        "0::/system.slice/slurmstepd.scope/job_99999999999/step_0\n",  # over 32 bits
        "4:memory:/slurm/job_12/step_0\n",  # v1 without the uid level
        "4:memory:/slurm/uid_x/job_12/step_0\n",
        "1:name=systemd:/\x00\n\n::::\n",
    ],
    ids=lambda t: repr(t)[:40],
)
def test_no_job(text: str) -> None:
    assert slurm.parse_cgroup(text) is None


def test_the_line_with_most_information_wins() -> None:
    text = (
        "3:cpuset:/slurm/uid_7/job_5\n"
        "2:memory:/slurm/uid_7/job_5/step_batch/task_0\n"
        "1:name=systemd:/system.slice/slurmd.service\n"
    )
    assert slurm.parse_cgroup(text) == SlurmJob(5, "batch", uid=7)


def test_an_environment_names_only_its_own_job() -> None:
    env = {"SLURM_JOB_ID": "38", "SLURM_JOB_NAME": "train", "SLURM_ARRAY_JOB_ID": "36"}
    # a task index without the array's id (or the other way round) is no array
    assert slurm.from_environ(env, 38) == slurm.JobNames("train", None, None)
    assert slurm.from_environ(env, 39) is None  # another job's process (or an adopted shell)
    assert slurm.from_environ({}, 38) is None
    assert slurm.from_environ({"SLURM_JOBID": "38"}, 38) == slurm.JobNames(None, None, None)
    garbage = {"SLURM_JOB_ID": "38", "SLURM_ARRAY_JOB_ID": "-1", "SLURM_ARRAY_TASK_ID": "x"}
    assert slurm.from_environ(garbage, 38) == slurm.JobNames(None, None, None)


#: scontrol show job --oneliner, its fields as Slurm's job_array.html and the
#: scontrol man page name them (one line; a name may hold spaces)
ONELINER = (
    "JobId=38 ArrayJobId=36 ArrayTaskId=3 JobName=my big run UserId=david(1000) "
    "GroupId=david(1000) MCS_label=N/A Priority=1 Nice=0 Account=ml QOS=normal "
    "JobState=RUNNING Reason=None Dependency=(null)\n"
)


def test_scontrol_answers() -> None:
    assert slurm.from_scontrol(ONELINER, 38) == slurm.JobNames("my big run", 36, 3)
    plain = "JobId=5 JobName=train UserId=a(1) JobState=RUNNING\n"
    assert slurm.from_scontrol(plain, 5) == slurm.JobNames("train", None, None)
    # a heterogeneous job prints a line per component: the asked one's is read
    het = "JobId=7 HetJobId=7 JobName=a UserId=x(1)\nJobId=8 HetJobId=7 JobName=b UserId=x(1)\n"
    assert slurm.from_scontrol(het, 8).name == "b"
    # without UserId after it, a name runs to the next Key= word
    assert slurm.from_scontrol("JobId=5 JobName=two words JobState=R", 5).name == "two words"
    for garbage in ("", "\x00\xff", "JobId=6 JobName=x UserId=y", "slurm_load_jobs error"):
        said = slurm.from_scontrol(garbage, 5)
        assert said.name is None and said.note == "scontrol printed no job 5"
    assert slurm.from_scontrol("JobId=5 JobName=(null) UserId=a(1)", 5).note is not None


def _fake_scontrol(directory: Path, body: str) -> Path:
    script = directory / "scontrol"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory first on PATH (for a fake scontrol), the rest of PATH after it."""
    directory = tmp_path / "bin"
    directory.mkdir()
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ.get('PATH', '')}")
    return directory


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_scontrol_is_asked_once_per_job(bin_dir: Path) -> None:
    log = bin_dir / "calls"
    _fake_scontrol(
        bin_dir,
        f'echo "$@" >> {log}\necho "JobId=$3 JobName=job-$3 UserId=u(1) JobState=RUNNING"\n',
    )
    names = ScontrolNames()
    assert names.lookup(41).name == "job-41"
    assert names.lookup(41).name == "job-41"
    assert names.lookup(42).name == "job-42"
    assert log.read_text().splitlines() == ["show job 41 --oneliner", "show job 42 --oneliner"]


def test_a_missing_scontrol_is_said_and_not_looked_for_at_every_job(
    bin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(bin_dir))  # nothing else on it
    clock = Clock()
    names = ScontrolNames(clock=clock)
    said = names.lookup(5)
    assert said.name is None and said.note is not None and "not installed" in said.note
    # installed meanwhile: not looked for again until the back-off has passed
    _fake_scontrol(bin_dir, 'echo "JobId=$3 JobName=late UserId=u(1)"\n')
    assert names.lookup(6).name is None and names.calls == 0
    clock.now += 301.0
    assert names.lookup(6).name == "late"


def test_a_slow_scontrol_is_killed_and_backed_off(
    bin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_scontrol(bin_dir, "exec sleep 60\n")
    started: list[str] = []

    def counted(argv: list[str], timeout_s: float) -> tuple[int, bytes]:
        started.append(argv[3])
        return run_bounded(argv, timeout_s)

    monkeypatch.setattr(scontrol, "run_bounded", counted)
    clock = Clock()
    names = ScontrolNames(timeout_s=0.2, clock=clock)
    said = names.lookup(5)
    assert said.name is None and said.note is not None and "did not answer" in said.note
    # the other jobs are not asked meanwhile (one timeout, not one per job)
    assert names.lookup(6).note == said.note
    assert started == ["5"]
    clock.now += 61.0
    names.lookup(7)
    assert started == ["5", "7"]


def test_scontrol_printing_garbage_gives_no_name(bin_dir: Path) -> None:
    _fake_scontrol(bin_dir, 'printf "\\033[2J JobId=6 JobName=other\\n\\377\\000"\n')
    names = ScontrolNames()
    said = names.lookup(5)
    assert said.name is None and said.note == "scontrol printed no job 5"
    # a flood is cut off, not read whole
    _fake_scontrol(bin_dir, "exec yes JobId=5\n")
    said = names.lookup(9)
    assert said.name is None and said.note is not None and "no answer" in said.note


def test_scontrol_failing_names_its_reason(bin_dir: Path) -> None:
    _fake_scontrol(bin_dir, 'echo "slurm_load_jobs error: Invalid job id specified" >&2\nexit 1\n')
    said = ScontrolNames().lookup(5)
    assert said.name is None and said.note is not None
    assert "knows no job 5" in said.note and "Invalid job id" in said.note


def _attributor(proc: FakeProc, jobs: ScontrolNames | None = None) -> ContainerAttributor:
    return ContainerAttributor(proc.path, names=RuntimeNames({}), jobs=jobs)


V2 = "0::/system.slice/slurmstepd.scope/job_{job}/step_0/user/task_0\n"


def test_the_job_name_comes_from_the_environment(tmp_path: Path, bin_dir: Path) -> None:
    _fake_scontrol(bin_dir, "exit 1\n")
    proc = FakeProc(tmp_path / "proc", self_pid=1)
    d = proc.add(100, cgroup=V2.format(job=38))
    env = b"SLURM_JOB_ID=38\0SLURM_JOB_NAME=train\0SLURM_ARRAY_JOB_ID=36\0SLURM_ARRAY_TASK_ID=2\0"
    (d / "environ").write_bytes(env)
    jobs = ScontrolNames()
    job = _attributor(proc, jobs).job_of(100)
    assert job == SlurmJob(38, "0", name="train", array_job_id=36, array_task_id=2)
    assert jobs.calls == 0  # the environment said it all


def test_the_job_name_comes_from_scontrol_without_the_environment(
    tmp_path: Path, bin_dir: Path
) -> None:
    _fake_scontrol(bin_dir, 'echo "JobId=$3 JobName=theirs UserId=u(1)"\n')
    proc = FakeProc(tmp_path / "proc", self_pid=1)
    proc.add(100, cgroup=V2.format(job=5))  # no environ file: not readable
    d = proc.add(101, cgroup=V2.format(job=5))
    (d / "environ").write_bytes(b"SLURM_JOB_ID=4\0SLURM_JOB_NAME=other\0")  # another job's
    jobs = ScontrolNames()
    attributor = _attributor(proc, jobs)
    assert attributor.job_of(100) == SlurmJob(5, "0", name="theirs")
    assert attributor.job_of(101) == SlurmJob(5, "0", name="theirs")
    assert jobs.calls == 1


def test_processes_are_placed_once_per_pid_and_start(tmp_path: Path, bin_dir: Path) -> None:
    _fake_scontrol(bin_dir, "exit 1\n")
    proc = FakeProc(tmp_path / "proc", self_pid=1)
    d = proc.add(100, cgroup=V2.format(job=38))
    (d / "environ").write_bytes(b"SLURM_JOB_ID=38\0SLURM_JOB_NAME=train\0")
    proc.add(101, cgroup="0::/user.slice/user-1000.slice/session-1.scope\n")
    attributor = _attributor(proc)

    def process(pid: int) -> ProcessSnapshot:
        return ProcessSnapshot(pid, 0, "GPU-0", "compute", start_time_s=float(pid))

    first = attributor.attribute((process(100), process(101)))
    assert first[0].slurm is not None and first[0].slurm.name == "train"
    assert first[0].container is None and first[1].slurm is None
    # the file changes: the cached value stays, for the same (pid, start time)
    (d / "cgroup").write_text(V2.format(job=99))
    again = attributor.attribute((process(100), process(101)))
    assert again[0].slurm == first[0].slurm
    # a reused pid (another start time) is read anew
    reused = attributor.attribute((ProcessSnapshot(100, 0, "GPU-0", "compute", start_time_s=5.0),))
    assert reused[0].slurm is not None and reused[0].slurm.job_id == 99


def test_a_job_round_trips_through_json() -> None:
    job = SlurmJob(38, "batch", uid=1000, name="x", array_job_id=36, array_task_id=2, note="n")
    assert from_json(SlurmJob, to_json(job)) == job
    # an out-of-range id (an untrusted recording) is refused, a bad uid is N/A
    with pytest.raises(ValueError):
        from_json(SlurmJob, {"job_id": 2**40})
    assert from_json(SlurmJob, {"job_id": 1, "uid": -1}).uid is None
