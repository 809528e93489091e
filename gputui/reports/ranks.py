"""The multi-rank ``--once`` report: the rank table, the job line and the rank
rules' findings, as text and as JSON (docs/json.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gputui import fmt
from gputui.analysis.diagnosis import Diagnosis
from gputui.analysis.finding import Finding
from gputui.analysis.rules.ranks import wait_hint
from gputui.client.job_group import JobGroup
from gputui.reports import findings as findings_text
from gputui.reports.attach import report_dict, trace_lines
from gputui.reports.jsondoc import print_json
from gputui.reports.text import (
    elide_all,
    emit,
    indented_table,
    kernel_name,
    output_width,
    plural,
    table,
    wrap,
    wrap_items,
)
from gputui.session.autocapture import OFF, REPLACED, AutoOutcome
from gputui.session.oneshot import RanksReport
from gputui.session.rank_view import RankRow, RanksSummary
from gputui.trace.kernels import CLASS_SHORT


# -- output -----------------------------------------------------------------------------------
def output(
    report: RanksReport, as_json: bool, ascii_only: bool = False, banner: str | None = None
) -> None:
    """The report on standard output: ``--json`` (the named rank's own report
    with ``job`` and ``ranks`` added), or the ranks side by side as text."""
    if not as_json:
        print_ranks(
            report.job,
            report.summary,
            report.findings,
            report.problems,
            banner,
            ascii_only,
            diagnosis=report.diagnosis,
            auto=report.named.auto_capture,
        )
        return
    doc = report_dict(report.named)
    doc.update(ranks_json(report.job, report.summary, report.findings, report.problems))
    doc["diagnosis"] = None if report.diagnosis is None else report.diagnosis.to_json()
    if report.recorded is not None:
        doc["recording"] = {"label": report.recorded.label, "demo": report.recorded.demo}
    print_json(doc)


def ranks_json(
    job: JobGroup,
    summary: RanksSummary,
    findings: Sequence[Finding],
    problems: Sequence[str],
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
            "wait_hint": wait_hint(summary.evidence),
            "problems": list(problems),
        },
        "ranks": [row.to_json() for row in summary.rows],
    }


def print_ranks(
    job: JobGroup,
    summary: RanksSummary,
    findings: Sequence[Finding],
    problems: Sequence[str],
    banner: str | None = None,
    ascii_only: bool = False,
    diagnosis: Diagnosis | None = None,
    auto: AutoOutcome | None = None,
) -> None:
    """The report on standard output, to its width (``--ascii``: ASCII only).  A
    ``banner`` marks a recording: its trace paths are the recording machine's;
    ``auto`` is what the automatic capture did (a live job's)."""
    lines = render(
        job,
        summary,
        findings,
        problems,
        banner,
        recorded=banner is not None,
        diagnosis=diagnosis,
        auto=auto,
    )
    emit(lines, ascii_only)


#: the indent of tables and of a long line's continuation
_TAB = "  "
#: what the rank table's columns hold
LEGEND = (
    "p50, p90: step wall time; comm: mean wait per step in collectives, comm%: its "
    "share of the step; compute: the step less comm (the slowest rank sets the pace)"
)


def render(
    job: JobGroup,
    summary: RanksSummary,
    findings: Sequence[Finding],
    problems: Sequence[str],
    banner: str | None = None,
    width: int | None = None,
    recorded: bool = False,
    diagnosis: Diagnosis | None = None,
    auto: AutoOutcome | None = None,
) -> list[str]:
    """The multi-rank report as lines of at most ``width`` characters (the
    output's width by default), every value with its unit."""
    width = output_width() if width is None else width
    out: list[str] = []
    if banner:
        out.extend(wrap(banner, width))
    world = summary.world_size
    head = [f"job: {plural(summary.local, 'local rank')}" + (f" of {world}" if world else "")]
    if job.launcher_pid is not None:
        head.append(f"launcher pid {job.launcher_pid}")
    if job.run_id:
        head.append(f"run id {fmt.clean(job.run_id, 64)}")
    if job.master:
        head.append(f"master {fmt.clean(job.master, 64)}")
    items = [f"{item}," for item in head[:-1]] + head[-1:]
    out.extend(wrap_items(items, width, " ", subsequent=_TAB))
    out.extend(wrap(fmt.clean_all(job.first.argv), width, _TAB, _TAB * 2))
    for said in (summary.alert, summary.missing_text(), *problems[-4:]):
        if said:
            out.extend(wrap(fmt.clean(said), width, "", _TAB))
    if diagnosis is not None:
        out.extend(wrap(fmt.clean(diagnosis.sentence()), width, "diagnosis: ", _TAB))
    out.extend(_rank_table(summary, width))
    out.extend(_devices(summary, width))
    out.extend(_phases(summary, width))
    if findings:
        out.append(f"findings across ranks ({len(findings)})")
        out.extend(findings_text.text_blocks(findings, width, with_rule=False))
    hint = wait_hint(summary.evidence)
    if hint:
        out.extend(wrap(hint, width, "", _TAB))
    if auto is not None and auto.state not in (OFF, REPLACED):
        out.extend(wrap(auto.text, width, "", _TAB))
    for row in summary.rows:
        out.extend(_capture(row, width, recorded))
    return out


def _rank_table(summary: RanksSummary, width: int) -> list[str]:
    rows = [
        [
            "-" if row.rank is None else str(row.rank),
            str(row.pid),
            row.state,
            "-" if row.last_step is None else str(row.last_step),
            "-" if row.behind is None else str(row.behind),
            fmt.ms(row.step_p50_s),
            fmt.ms(row.step_p90_s),
            fmt.ms(row.comm_s),
            "-" if row.comm_share is None else f"{row.comm_share * 100:.0f}%",
            fmt.ms(row.compute_s),
        ]
        for row in summary.rows
    ]
    lines = table(
        ["rank", "pid", "state", "step", "behind", "p50", "p90", "comm", "comm%", "compute"],
        rows,
        width,
        right=[True, True, False, True, True, True, True, True, True, True],
        flexible=None,
        # narrower: the rank, its step time, its wait and its compute stay
        optional=(6, 4, 3, 8, 2),
    )
    out = [*lines, *wrap(LEGEND, width, _TAB, _TAB)]
    for row in summary.rows:
        if row.note:
            out.extend(
                wrap(f"{row.label} {row.state}: {fmt.clean(row.note, 300)}", width, "", _TAB)
            )
    return out


def _devices(summary: RanksSummary, width: int) -> list[str]:
    """Each rank's memory and GPU, when any rank has them."""
    if not any(r.mem_allocated_bytes or r.gpu_uuid or r.gpu_name for r in summary.rows):
        return []
    rows = []
    for row in summary.rows:
        gpu = fmt.clean(row.gpu_uuid or row.gpu_name or "-", 64)
        rows.append(
            [
                row.label.removeprefix("rank "),
                fmt.size(row.mem_allocated_bytes) if row.mem_allocated_bytes else "-",
                fmt.size(row.mem_peak_bytes) if row.mem_peak_bytes else "-",
                "-" if row.gpu_util_pct is None else f"{row.gpu_util_pct:.0f}%",
                "-" if row.gpu_sm_clock_mhz is None else fmt.mhz(row.gpu_sm_clock_mhz),
                gpu,
            ]
        )
    headers = ["rank", "memory", "peak", "util", "SM clock", "gpu"]
    right = [True, True, True, True, True, False]
    # narrower: the SM clock and the peak give way to the GPU's name
    lines = indented_table(headers, rows, width, right=right, flexible=5, optional=(4, 2))
    return ["memory and GPU of each rank", *lines]


def _phases(summary: RanksSummary, width: int) -> list[str]:
    names: list[str] = []
    for row in summary.rows:
        names += [name for name, _share in row.phase_shares if name not in names]
    if not names:
        return []
    shown = elide_all((fmt.clean(n, 64) for n in names), 16)
    rows = []
    for row in summary.rows:
        shares = dict(row.phase_shares)
        rows.append(
            [
                row.label.removeprefix("rank "),
                *(f"{shares[n] * 100:.0f}%" if n in shares else "-" for n in names),
            ]
        )
    # one table per group of phases that fits the width
    out = ["share of each rank's wall time"]
    start = 0
    while start < len(names):
        end, used = start, len("rank")
        while end < len(names) and (
            end == start or used + 2 + max(len(shown[fmt.clean(names[end], 64)]), 4) <= width - 2
        ):
            used += 2 + max(len(shown[fmt.clean(names[end], 64)]), 4)
            end += 1
        headers = ["rank", *(shown[fmt.clean(n, 64)] for n in names[start:end])]
        part = [[r[0], *r[1 + start : 1 + end]] for r in rows]
        out.extend(indented_table(headers, part, width, right=[True] * len(headers), flexible=None))
        start = end
    return out


def _capture(row: RankRow, width: int, recorded: bool) -> list[str]:
    cap = row.capture
    if cap is None:
        return []
    said = f"capture of {row.label}: steps {cap.first_step}..{cap.last_step}"
    if cap.busy_pct is not None:
        said += f", GPU busy {cap.busy_pct:.0f}%"
    if cap.overlap is not None:
        said += f", comm/compute overlap {cap.overlap * 100:.0f}%"
    out = wrap(said, width, "", _TAB)
    if cap.kernels:
        rows = [
            [
                fmt.us(k.total_us),
                f"{k.share * 100:.1f}%",
                f"{k.calls:,}",
                CLASS_SHORT.get(k.kernel_class, fmt.clean(k.kernel_class, 16)),
                k.name,
            ]
            for k in cap.kernels
        ]
        headers = ["time", "share", "calls", "class", "kernel"]
        right = [True, True, True, False, False]
        out.extend(indented_table(headers, rows, width, right=right, flexible=4, short=kernel_name))
    elif cap.cpu_ops:
        rows = [[fmt.us(op.self_us), f"{op.calls:,}", fmt.clean(op.name)] for op in cap.cpu_ops]
        right = [True, True, False]
        out.extend(indented_table(["self", "calls", "op"], rows, width, right=right, flexible=2))
    out.extend(trace_lines(cap.trace_path, None, width, recorded, _TAB))
    return out
