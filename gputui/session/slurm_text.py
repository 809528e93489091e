"""A process's Slurm job as text: the label of a table's JOB column, the facts of
a detail view, the words a filter matches, and the order the column sorts in.

Users choose their jobs' names: every string from a snapshot is cleaned here
(``fmt.clean``) before it reaches a view.  A job is written as Slurm's own
commands write it: ``<job>.<step>`` (``sacct``), a job array's task as
``<array job>_<task>`` (``squeue``), then the job's name.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gputui import fmt
from gputui.snapshot.codec import from_json_or_none
from gputui.snapshot.model import ProcessSnapshot, SlurmJob

#: the longest name shown
MAX_NAME = 128
#: the widest a report shows a job (elided in the middle beyond)
LABEL_WIDTH = 24
#: what each named step is, for the detail view
STEP_WORDS = {
    "batch": "the batch script",
    "extern": "processes adopted into the job (extern)",
    "interactive": "salloc's interactive shell",
}


def job_text(job: SlurmJob) -> str:
    """The job as squeue names it: ``36_3`` for a job array's task, else its id."""
    if job.array_job_id is not None and job.array_task_id is not None:
        return f"{job.array_job_id}_{job.array_task_id}"
    return str(job.job_id)


def step_text(job: SlurmJob) -> str:
    """The job step as sacct names it: ``38.batch``, ``36_3.0``; the job alone
    where the cgroup names no step."""
    return job_text(job) if job.step is None else f"{job_text(job)}.{job.step}"


def raw_label(job: SlurmJob) -> str:
    """The step and the job's name: raw text, for sorting and filtering."""
    return f"{step_text(job)} {job.name}" if job.name else step_text(job)


def label(proc: ProcessSnapshot) -> str:
    """The column's text: cleaned; "" outside a Slurm job."""
    job = proc.slurm
    return "" if job is None else fmt.clean(raw_label(job), MAX_NAME)


def label_of(doc: dict[str, Any] | None) -> str:
    """The column's text for a job in its JSON form (``gputui ls``)."""
    job = from_json_or_none(SlurmJob, doc)
    return "" if job is None else fmt.clean(raw_label(job), MAX_NAME)


def sort_key(proc: ProcessSnapshot) -> tuple[int, int, int, str] | None:
    """What the column sorts by: a job array's tasks together, in task order,
    then the job id and the step; None (last) outside a Slurm job."""
    job = proc.slurm
    if job is None:
        return None
    array = job.array_job_id if job.array_job_id is not None else job.job_id
    return (array, job.array_task_id or 0, job.job_id, job.step or "")


def grouped(processes: Iterable[ProcessSnapshot]) -> list[ProcessSnapshot]:
    """``processes`` grouped by Slurm job (a job array's tasks together), each
    job's by GPU and pid; those in no job last, by GPU and pid."""

    def key(proc: ProcessSnapshot) -> tuple[bool, tuple[int, int, int, str], int, int]:
        job = sort_key(proc)
        return (job is None, job or (0, 0, 0, ""), proc.gpu_index, proc.pid)

    return sorted(processes, key=key)


def search_text(proc: ProcessSnapshot) -> str:
    """The words a filter matches: "slurm", the job (as ``38``, ``36_3``,
    ``38.batch`` and ``36_3.batch``) and its name."""
    job = proc.slurm
    if job is None:
        return ""
    own = f"{job.job_id}.{job.step}" if job.step is not None else None
    words = ["slurm", str(job.job_id), job_text(job), step_text(job), own, job.name]
    return " ".join(w for w in words if w)


def hpc_job(job: SlurmJob) -> str:
    """The job as dcgm-exporter's ``hpc_job`` label holds it: the job id Slurm
    gives the job's prolog (``SLURM_JOB_ID``), a job array's task's own id."""
    return str(job.job_id)


def facts(proc: ProcessSnapshot) -> list[tuple[str, str]]:
    """(name, value) lines of a detail view, cleaned; [] outside a Slurm job."""
    job = proc.slurm
    if job is None:
        return []
    what = str(job.job_id)
    if job.array_job_id is not None and job.array_task_id is not None:
        what += f" (array {job.array_job_id}, task {job.array_task_id})"
    name = fmt.clean(job.name, MAX_NAME) if job.name else "(name not known)"
    out = [("Slurm job", f"{what}  {name}")]
    if job.step is not None:
        if job.step in STEP_WORDS:
            kind = STEP_WORDS[job.step]
        elif "+" in job.step:
            kind = "a heterogeneous job's component"
        else:
            kind = "a step of srun"
        out.append(("step", f"{fmt.clean(step_text(job), 64)}: {kind}"))
    if job.uid is not None:
        out.append(("owner uid", str(job.uid)))
    if job.note:
        out.append(("job name", fmt.clean(job.note, 400)))
    return out
