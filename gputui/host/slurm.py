"""Which Slurm job step a process runs in, from its ``/proc/PID/cgroup``; the
job's name from the process's environment or from ``scontrol``'s answer.

Pure and standard library only.  The layouts Slurm's cgroup plugins make
(https://slurm.schedmd.com/cgroups.html, https://slurm.schedmd.com/cgroup_v2.html):

- cgroup v1 (``cgroup/v1``): ``/slurm/uid_<uid>/job_<id>/step_<step>/task_<n>``
  in each hierarchy Slurm uses (freezer, cpuset, memory, devices);
  ``/slurm_<node>/...`` where slurmd was built for several daemons a node;
- cgroup v2 (``cgroup/v2``): ``/system.slice/slurmstepd.scope/job_<id>/step_<step>/
  user/task_<n>`` for the tasks (``slurm`` beside ``user`` holds the step's
  slurmstepd, ``task_special`` a process added to the step alone), and
  ``<node>_slurmstepd.scope`` for several daemons a node; the scope's
  ``system`` directory holds slurmd's waiting slurmstepd, in no job.

A step is ``step_<n>`` (a step of ``srun``), ``step_batch`` (the batch
script), ``step_extern`` (processes adopted into the job, e.g. by
pam_slurm_adopt), ``step_interactive`` (``salloc``'s shell) or ``step_<n>+<c>``
(a heterogeneous job's component).  A job array's task has a job id of its
own: the array's id and the task's index come from the environment
(``SLURM_ARRAY_JOB_ID``, ``SLURM_ARRAY_TASK_ID``) or from ``scontrol``
(``ArrayJobId``, ``ArrayTaskId``).  Examples, with their sources, are in
``tests/data/cgroups/slurm/``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple

from gputui.host.cgroup import best_line
from gputui.snapshot.model import SlurmJob

_JOB = re.compile(r"job_([0-9]{1,10})")
_STEP = re.compile(r"step_([0-9]{1,10}(?:\+[0-9]{1,10})?|[a-z]{1,32})")
_UID = re.compile(r"uid_([0-9]{1,10})")
#: cgroup v1: Slurm's root directory in a hierarchy ("slurm", "slurm_<node>")
_V1_ROOT = re.compile(r"slurm(?:_.+)?")
#: the longest job name kept (Slurm allows more; nobody reads more in a column)
MAX_NAME_CHARS = 256
_MAX_ID = 2**32 - 1


class JobNames(NamedTuple):
    """What the environment or scontrol said of a job: its name, a job array's
    id and task index, and why something is missing (None: nothing is)."""

    name: str | None
    array_job_id: int | None
    array_task_id: int | None
    note: str | None = None


def parse_cgroup(text: str) -> SlurmJob | None:
    """The Slurm job step named by a ``/proc/PID/cgroup`` file's text (None: in
    no job).  Every line is read (v1 hierarchies can disagree: one may still
    name slurmd's service); the line that says most wins: a job with its step
    and owner, then a job with its step, the first such line on a tie."""
    return best_line(text, parse_path, _rank)


def _rank(found: SlurmJob) -> int:
    return 1 + (found.step is not None) + (found.uid is not None)


def parse_path(path: str) -> SlurmJob | None:
    """The job step named by one cgroup path (None: no Slurm job)."""
    if "job_" not in path:
        return None
    segments = [s for s in path.split("/") if s]
    for i, segment in enumerate(segments):
        if segment.endswith("slurmstepd.scope"):  # v2: .../slurmstepd.scope/job_J/step_S
            found = _job_below(segments, i + 1, None)
        elif _V1_ROOT.fullmatch(segment) and i + 1 < len(segments):
            uid = _UID.fullmatch(segments[i + 1])  # v1: /slurm/uid_U/job_J/step_S
            found = _job_below(segments, i + 2, int(uid.group(1))) if uid else None
        else:
            continue
        if found is not None:
            return found
    return None


def _job_below(segments: list[str], at: int, uid: int | None) -> SlurmJob | None:
    if at >= len(segments):
        return None
    job = _JOB.fullmatch(segments[at])
    if job is None:
        return None
    job_id = int(job.group(1))
    if job_id > _MAX_ID or (uid is not None and uid > _MAX_ID):
        return None
    step = _STEP.fullmatch(segments[at + 1]) if at + 1 < len(segments) else None
    return SlurmJob(job_id, step.group(1) if step else None, uid=uid)


def from_environ(env: Mapping[str, str], job_id: int) -> JobNames | None:
    """The job's name and array ids in a process's environment, where the
    environment is the job's (``SLURM_JOB_ID`` is ``job_id``: a process of
    another job, or a shell adopted into this one, says nothing of it); None
    otherwise."""
    said = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    if said is None or said.strip() != str(job_id):
        return None
    name = env.get("SLURM_JOB_NAME")
    array_job, array_task = (
        _number(env.get("SLURM_ARRAY_JOB_ID")),
        _number(env.get("SLURM_ARRAY_TASK_ID")),
    )
    if array_job is None or array_task is None:
        array_job = array_task = None
    return JobNames(_text(name), array_job, array_task)


#: "JobName=<name>": up to the field scontrol prints next (UserId), else to the
#: next " Key=" word (a name may hold spaces)
_JOB_NAME = re.compile(r"(?:^|\s)JobName=(.*?)\s+UserId=")
_JOB_NAME_LOOSE = re.compile(r"(?:^|\s)JobName=(.*?)(?=\s+[A-Za-z][A-Za-z0-9_:/]*=|$)")
_FIELD = {
    key: re.compile(rf"(?:^|\s){key}=([0-9]{{1,10}})(?=\s|$)")
    for key in ("JobId", "ArrayJobId", "ArrayTaskId")
}


def from_scontrol(text: str, job_id: int) -> JobNames:
    """What ``scontrol show job <job_id> --oneliner`` printed, for that job: its
    line is the one whose ``JobId`` is ``job_id`` (a heterogeneous job prints a
    line per component); anything else is said in the note."""
    for line in text.splitlines():
        job = _FIELD["JobId"].search(line)
        if job is None or int(job.group(1)) != job_id:
            continue
        match = _JOB_NAME.search(line) or _JOB_NAME_LOOSE.search(line)
        name = _text(match.group(1)) if match else None
        array_job = _field(line, "ArrayJobId")
        array_task = _field(line, "ArrayTaskId")
        if array_job is None or array_task is None:
            array_job = array_task = None
        note = None if name is not None else "scontrol printed no name for the job"
        return JobNames(name, array_job, array_task, note)
    return JobNames(None, None, None, f"scontrol printed no job {job_id}")


def _field(line: str, key: str) -> int | None:
    match = _FIELD[key].search(line)
    return _number(match.group(1)) if match else None


def _number(text: str | None) -> int | None:
    if text is None:
        return None
    text = text.strip()
    if not text.isdigit() or not text.isascii() or len(text) > 10:
        return None
    value = int(text)
    return value if value <= _MAX_ID else None


def _text(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    if not value or value == "(null)":
        return None
    return value[:MAX_NAME_CHARS]
