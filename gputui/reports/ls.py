"""``gputui ls``: the hooked jobs on this machine, as a table."""

from __future__ import annotations

from typing import Any


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


def print_jobs(jobs: list[dict[str, Any]]) -> None:
    """The table of hooked jobs (``gputui ls``): one row per job, its ranks' pids
    under the launcher's."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from gputui import fmt

    table = Table(box=None, pad_edge=False, header_style="bold")
    for col, justify in (
        ("PID", "right"),
        ("RANK", "right"),
        ("STEPS", "right"),
        ("STEP", "right"),
        ("COMMAND", "left"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for job in jobs:
        if "error" in job:
            table.add_row(str(job["pid"]), "", "", "", Text(fmt.clean(job["error"]), style="red"))
            continue
        step = job["recent_step_s"]
        pid = str(job.get("launcher_pid") or job["pid"])
        if "ranks" in job:  # the launcher's pid, then the ranks'
            pid += "\n" + ",".join(str(r["pid"]) for r in job["ranks"])
        table.add_row(
            Text(pid),
            _ranks_text(job),
            str(job["steps"]),
            "" if step is None else f"{step * 1000:.1f} ms",
            Text(fmt.clean_all(job["command"])),
        )
    Console(highlight=False).print(table)
