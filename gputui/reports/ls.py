"""``gputui ls``: the hooked jobs on this machine, as a table."""

from __future__ import annotations

from typing import Any

from gputui.reports.text import elide_all, emit, insert_columns, output_width, table, wrap
from gputui.session import container_text, slurm_text


def _ranks_text(job: dict[str, Any]) -> str:
    if "ranks" not in job:
        return "" if job["rank"] is None else f"{job['rank']}/{job['world_size']}"
    ranks = [r["rank"] for r in job["ranks"]]
    shown = _spans(ranks) if all(r is not None for r in ranks) else f"{len(ranks)} local"
    text = f"{shown}/{job['world_size']}"
    if job["missing_ranks"]:
        text += f" (+{job['missing_ranks']} elsewhere)"
    return text


def _spans(numbers: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    runs: list[list[int]] = []
    for n in sorted(set(numbers)):
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def render(jobs: list[dict[str, Any]], width: int | None = None) -> list[str]:
    """The table of hooked jobs (``gputui ls``), in lines of at most ``width``
    characters (the output's width by default): one row per job, its command
    whole (wrapped under itself), a multi-rank job's ranks' pids under it."""
    from gputui import fmt

    width = output_width() if width is None else width
    placed = any(job.get("container") for job in jobs)
    texts = [container_text.label_of(job.get("container")) for job in jobs]
    labels = elide_all(texts, container_text.LABEL_WIDTH)
    in_job = any(job.get("slurm") for job in jobs)
    job_labels = elide_all(
        [slurm_text.label_of(job.get("slurm")) for job in jobs], slurm_text.LABEL_WIDTH
    )
    rows: list[list[str]] = []
    under: dict[int, list[str]] = {}
    for job in jobs:
        if "error" in job:
            rows.append([str(job["pid"]), "", "", "", fmt.clean(job["error"])])
            if placed:
                rows[-1].insert(4, "")
            if in_job:
                rows[-1].insert(-1, "")
            continue
        step = job["recent_step_s"]
        if "ranks" in job:  # the launcher's pid, then the ranks'
            pids = ",".join(str(r["pid"]) for r in job["ranks"])
            under[len(rows)] = wrap(f"rank pids {pids}", width, "  ", "    ")
        rows.append(
            [
                str(job.get("launcher_pid") or job["pid"]),
                _ranks_text(job),
                f"{job['steps']:,}",
                fmt.ms(step, decimals=1, space=True, missing=""),
                fmt.clean_all(job["command"]),
            ]
        )
        if placed:
            rows[-1].insert(4, labels[container_text.label_of(job.get("container"))])
        if in_job:
            rows[-1].insert(-1, job_labels[slurm_text.label_of(job.get("slurm"))])
    headers = ["PID", "RANK", "STEPS", "STEP", "COMMAND"]
    right = [True, True, True, True, False]
    insert_columns(headers, right, (placed, 4, "CONTAINER"), (in_job, -1, "JOB"))
    return table(
        headers,
        rows,
        width,
        right=right,
        flexible=len(headers) - 1,
        wrap_flexible=True,
        under=under,
        optional=(2,),  # narrower: the step count gives way (the step time stays)
    )


def print_jobs(jobs: list[dict[str, Any]]) -> None:
    """The table of hooked jobs on standard output."""
    emit(render(jobs))
