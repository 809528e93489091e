"""``gputui ls``: this user's jobs that have the hook loaded, the ranks of a
multi-rank job (torchrun) shown once as one job."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from gputui.commands.args import command

if TYPE_CHECKING:
    from gputui.client.job_group import JobGroup
    from gputui.protocol.schema import Hello

SUMMARY = "list this user's attachable jobs"
DESCRIPTION = (
    "List this user's running jobs that have the gputui hook loaded; the local "
    "ranks of a multi-rank job (torchrun) are listed once, as one job. STEPS is "
    "the steps it has taken, STEP the mean wall time of its last 20."
)


def register(subparsers: Any) -> None:
    parser = command(subparsers, "ls", SUMMARY, DESCRIPTION)
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=main)


def _process(hello: Hello) -> dict[str, Any]:
    return {
        "pid": hello.pid,
        "command": list(hello.argv),
        "steps": hello.steps,
        "recent_step_s": hello.recent_step_s,
        "rank": hello.rank,
        "local_rank": hello.local_rank,
        "world_size": hello.world_size,
        "device": None if hello.device is None else hello.device.to_wire(),
        "torch": hello.torch,
        "python": hello.python,
    }


def job_entry(job: JobGroup) -> dict[str, Any]:
    """One job of ``ls --json`` (docs/json.md): a process's keys, and for a
    multi-rank job its ranks besides."""
    entry = _process(job.first)
    if not job.multi_rank:
        return entry
    steps = [h.steps for h in job.hellos]
    recent = [h.recent_step_s for h in job.hellos if h.recent_step_s is not None]
    entry.update(
        {
            # the job as a whole: the slowest rank sets its pace
            "steps": min(steps),
            "recent_step_s": max(recent) if recent else None,
            "launcher_pid": job.launcher_pid,
            "run_id": job.run_id,
            "master": job.master,
            "local_ranks": len(job.hellos),
            "local_world_size": job.local_world_size,
            "missing_ranks": job.missing,
            "ranks": [_process(h) for h in job.hellos],
        }
    )
    return entry


def collect() -> list[dict[str, Any]]:
    from gputui.client.job_group import list_jobs

    jobs, errors = list_jobs()
    entries = [job_entry(job) for job in jobs]
    place_in_containers(entries)
    entries += [{"pid": pid, "error": error} for pid, error in sorted(errors.items())]
    return entries


def place_in_containers(entries: list[dict[str, Any]]) -> None:
    """Each job's (and rank's) ``container``: its container and pod, or None;
    and its ``slurm``: its Slurm job step, or None."""
    from gputui.host.attribution import ContainerAttributor
    from gputui.snapshot.codec import to_json

    attributor = ContainerAttributor()
    for entry in entries:
        for process in [entry, *entry.get("ranks", ())]:
            info, job = attributor.place(process["pid"]) or (None, None)
            process["container"] = None if info is None else to_json(info)
            process["slurm"] = None if job is None else to_json(job)


def main(args: argparse.Namespace) -> int:
    jobs = collect()
    if args.json:
        print(json.dumps(jobs, indent=2))
        return 0
    if not jobs:
        from gputui.reports.text import emit, output_width, wrap_items

        said = ["no hooked jobs", "(start one with", "'gputui run -- python train.py')"]
        emit(wrap_items(said, output_width(sys.stderr), " ", subsequent="  "), stream=sys.stderr)
        return 0
    from gputui.reports.ls import print_jobs

    print_jobs(jobs)
    return 0
