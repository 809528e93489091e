"""The multi-rank ``--once`` report: the rank table, the job line and the rank
rules' findings, as text and as JSON (docs/json.md)."""

from __future__ import annotations

from typing import Any

from gputui import fmt
from gputui.analysis.finding import Finding
from gputui.collectors.job_group import JobGroup
from gputui.session.ranks import RanksSummary


# -- output -----------------------------------------------------------------------------------
def ranks_json(
    job: JobGroup, summary: RanksSummary, findings: list[Finding], problems: list[str]
) -> dict[str, Any]:
    """``job`` and ``ranks`` of ``attach --once --json`` for a multi-rank job."""
    return {
        "job": {
            "world_size": summary.world_size,
            "local_ranks": summary.local,
            "local_world_size": summary.local_world_size,
            "missing_ranks": summary.missing,
            "remote_ranks": summary.remote,
            "missing_note": summary.missing_text(),
            "launcher_pid": job.launcher_pid,
            "run_id": job.run_id,
            "master": job.master,
            "leader_step": summary.leader_step,
            "alert": summary.alert,
            "findings": [f.to_json() for f in findings],
            "problems": list(problems),
        },
        "ranks": [row.to_json() for row in summary.rows],
    }


def print_ranks(
    job: JobGroup,
    summary: RanksSummary,
    findings: list[Finding],
    problems: list[str],
    banner: str | None = None,
) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(highlight=False)
    if banner:
        console.print(Text(banner, style="bold black on yellow"))
    head = Text()
    world = summary.world_size
    head.append(f"job: {summary.local} local ranks" + (f" of {world}" if world else ""), "bold")
    if job.launcher_pid is not None:
        head.append(f", launcher pid {job.launcher_pid}")
    if job.run_id:
        head.append(f", run id {fmt.clean(job.run_id, 64)}")
    if job.master:
        head.append(f", master {fmt.clean(job.master, 64)}")
    console.print(head)
    console.print(Text(fmt.clean_all(job.first.argv), style="dim"))
    if summary.alert:
        console.print(Text(fmt.clean(summary.alert), style="bold red"))
    missing = summary.missing_text()
    if missing:
        console.print(Text(missing, style="yellow"))
    for problem in problems[-4:]:
        console.print(Text(fmt.clean(problem), style="red"))
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("rank", "pid", "state", "step", "behind", "p50", "p90", "comm", "%", "compute"):
        table.add_column(col, justify="left" if col == "state" else "right")
    table.add_column("memory", justify="right")
    table.add_column("gpu")
    for row in summary.rows:
        gpu = fmt.clean(row.gpu_uuid or "-", 64)
        if row.gpu_util_pct is not None:
            gpu += f" {row.gpu_util_pct:.0f}%"
        table.add_row(
            "-" if row.rank is None else str(row.rank),
            str(row.pid),
            Text(row.state + (f" ({fmt.clean(row.note, 120)})" if row.note else "")),
            "-" if row.last_step is None else str(row.last_step),
            "-" if row.behind is None else str(row.behind),
            fmt.ms(row.step_p50_s),
            fmt.ms(row.step_p90_s),
            fmt.ms(row.comm_s),
            "-" if row.comm_share is None else f"{row.comm_share * 100:.0f}",
            fmt.ms(row.compute_s),
            fmt.size(row.mem_allocated_bytes) if row.mem_allocated_bytes else "-",
            Text(gpu),
        )
    console.print(table)
    names: list[str] = []
    for row in summary.rows:
        names += [name for name, _share in row.phase_shares if name not in names]
    if names:
        phases = Table(
            title="share of each rank's wall time", title_justify="left", box=None, pad_edge=False
        )
        phases.add_column("rank", justify="right")
        for name in names:
            phases.add_column(Text(fmt.clean(name, 24)), justify="right")
        for row in summary.rows:
            shares = dict(row.phase_shares)
            phases.add_row(
                row.label.removeprefix("rank "),
                *(f"{shares[n] * 100:.0f}%" if n in shares else "-" for n in names),
            )
        console.print(phases)
    if findings:
        console.print(Text("findings across ranks:", style="bold"))
        for f in findings:
            line = Text(f"  {f.severity.upper():4} ", style="bold")
            if f.impact_pct is not None:
                line.append(f"{f.impact_pct:.0f}% ")
            line.append(f"{fmt.clean(f.scope, 40)}: {fmt.clean(f.title, 200)}", style="bold")
            console.print(line)
            console.print(Text(f"       seen: {fmt.clean(f.evidence)}"))
            console.print(Text(f"       fix:  {fmt.clean(f.fix)}"))
    for row in summary.rows:
        cap = row.capture
        if cap is None:
            continue
        said = f"capture of {row.label}: steps {cap.first_step}..{cap.last_step}"
        if cap.busy_pct is not None:
            said += f", GPU busy {cap.busy_pct:.0f}%"
        if cap.overlap is not None:
            said += f", comm/compute overlap {cap.overlap * 100:.0f}%"
        console.print(Text(said, style="bold"))
        for op in cap.cpu_ops if not cap.kernels else ():
            console.print(
                Text(
                    f"  {fmt.truncate(fmt.clean(op.name), 48):48} {op.calls:6d} "
                    f"{op.self_us / 1000:9.3f} ms self"
                )
            )
        for k in cap.kernels:
            console.print(
                Text(
                    f"  {fmt.truncate(fmt.clean(k.name), 48):48} {k.calls:6d} "
                    f"{k.total_us / 1000:9.3f} ms {k.share * 100:5.1f}%"
                )
            )
        if cap.trace_path:
            console.print(Text(f"  trace: {fmt.clean(cap.trace_path)}"))
