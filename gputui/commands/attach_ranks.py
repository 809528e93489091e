"""``gputui attach PID`` for a multi-rank job: every local rank at once.

PID may be any rank's or the launcher's (the torchrun agent).  ``--once``
reads each rank's history over its own connection (in parallel), optionally
profiles the same steps on every rank (``--capture N``), and prints the ranks
side by side with the rank rules' findings; ``--json`` adds ``job`` and
``ranks`` to the first rank's report (docs/json.md).  Without ``--once`` the
rank view opens.  Ranks on other nodes are beyond local sockets: the report
says how many, and where to see them.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gputui import fmt
from gputui.analysis.engine import analyze_ranks
from gputui.analysis.finding import Finding
from gputui.collectors.attach_recording import AttachRecording
from gputui.collectors.hook_client import AttachError, HookClient
from gputui.collectors.job_group import JobGroup
from gputui.commands import attach_report as report
from gputui.session.ranks import RankInput, RanksSummary, summarize, sync_start

#: the longest wait for a rank's hello
HELLO_TIMEOUT_S = 10.0


def rank_input(got: report.Collected, window: int) -> RankInput:
    gone = got.disconnected
    return RankInput(
        hello=got.hello,
        steps=got.steps[-window:],
        status=got.status,
        memory=got.memory,
        capture=got.capture,
        gpu=got.gpu,
        memory_snapshot=got.memory_snapshot,
        roof=got.roof,
        gone=None if gone is None else gone.reason,
        gone_clean=bool(gone is not None and gone.clean),
    )


# -- live ------------------------------------------------------------------------------------
def main(args: argparse.Namespace, job: JobGroup) -> int:
    if not args.once:
        return run_live(args, job)
    return once(args, job)


def run_live(args: argparse.Namespace, job: JobGroup) -> int:
    from gputui.session.rank_feeds import LiveRanksFeed
    from gputui.tui.attach.ranks import RanksApp

    feed = LiveRanksFeed(job, record_path=args.record)
    app = RanksApp(feed, ascii_only=args.ascii)
    try:
        app.run()
    finally:
        feed.close()
    if feed.recorder is not None:
        print(f"saved {feed.recorder.count} messages to {args.record}", file=sys.stderr)
    return int(app.return_code or 0)


def _connect(pid: int, timeout: float) -> HookClient | str:
    try:
        return HookClient.connect(pid, timeout=min(timeout, HELLO_TIMEOUT_S))
    except AttachError as exc:
        return str(exc)


def once(args: argparse.Namespace, job: JobGroup) -> int:
    pids = list(job.pids)
    with ThreadPoolExecutor(max_workers=min(16, len(pids))) as pool:
        opened = list(pool.map(lambda pid: _connect(pid, args.timeout), pids))
    clients = [c for c in opened if isinstance(c, HookClient)]
    problems = [
        f"pid {pid}: {fmt.clean(c)}"
        for pid, c in zip(pids, opened, strict=True)
        if isinstance(c, str)
    ]
    if not clients:
        raise AttachError(problems[0] if problems else "gputui attach: no rank answered")
    try:
        collected = _collect(clients, args, problems)
        if args.capture is not None:
            _capture(clients, collected, args, problems)
    finally:
        for client in clients:
            client.close()
    inputs = [rank_input(got, args.window) for got in collected]
    summary = summarize(inputs, time.time())
    findings = analyze_ranks(summary.evidence)
    named = next((k for k, c in enumerate(clients) if c.pid == args.pid), 0)
    if args.json:
        got = collected[named]
        doc = report.report_dict(args.pid, got, report.stats_of(got, args.window))
        doc.update(ranks_json(job, summary, findings, problems))
        report.print_json(doc)
    else:
        print_ranks(job, summary, findings, problems)
    return 0


def _collect(
    clients: list[HookClient], args: argparse.Namespace, problems: list[str]
) -> list[report.Collected]:
    """Every rank's history, read at once (each over its own connection)."""

    def one(client: HookClient) -> report.Collected | str:
        try:
            return report.collect_live(client, args.window, args.timeout)
        except AttachError as exc:
            return str(exc)

    with ThreadPoolExecutor(max_workers=min(16, len(clients))) as pool:
        results = list(pool.map(one, clients))
    out: list[report.Collected] = []
    for client, got in zip(clients, results, strict=True):
        if isinstance(got, str):
            problems.append(fmt.clean(got))
            got = report.Collected(client.hello)
        out.append(got)
    return out


def _capture(
    clients: list[HookClient],
    collected: list[report.Collected],
    args: argparse.Namespace,
    problems: list[str],
) -> None:
    """Profile the same steps on every rank and wait for each result."""
    lasts = [got.steps[-1].index if got.steps else None for got in collected]
    recent = [got.status.recent_step_s for got in collected if got.status is not None]
    step_s = max((r for r in recent if r), default=None)
    start = sync_start(lasts, step_s, args.warmup)
    request: dict[str, Any] = {
        "steps": args.capture,
        "warmup": args.warmup,
        "shapes": args.shapes,
        "stacks": args.stacks,
        "memory": args.memory,
        "start_step": start,
        "capture_id": f"ranks-{os.getpid()}-once",
    }
    if not args.json:
        end = start + args.capture - 1
        print(f"capture: every rank records steps {start}..{end}", file=sys.stderr)
    failures: dict[int, str] = {}
    lock = threading.Lock()

    def one(pair: tuple[HookClient, report.Collected]) -> None:
        client, got = pair
        try:
            report.capture_live(client, got, request, args.timeout, quiet=True)
        except AttachError as exc:
            with lock:
                failures[client.pid] = str(exc)

    with ThreadPoolExecutor(max_workers=min(16, len(clients))) as pool:
        list(pool.map(one, zip(clients, collected, strict=True)))
    for client in clients:
        if client.pid in failures:
            problems.append(f"pid {client.pid}: {fmt.clean(failures[client.pid])}")
    if len(failures) == len(clients):
        raise report.JobFailed(next(iter(failures.values())))


# -- replay -------------------------------------------------------------------------------
def replay(args: argparse.Namespace, recording: AttachRecording, label: str, banner: str) -> int:
    """A recorded multi-rank session: the rank view, or its report (``--once``)."""
    from gputui.session.rank_feeds import ReplayRanksFeed
    from gputui.session.rank_feeds import rank_input as state_input

    feed = ReplayRanksFeed(recording, label, speed=args.speed)
    if not args.once:
        from gputui.tui.attach.ranks import RanksApp

        app = RanksApp(feed, ascii_only=args.ascii, banner=banner)
        try:
            app.run()
        finally:
            feed.close()
        return int(app.return_code or 0)
    feed.connect(autoplay=False)
    feed.advance_to(float("inf"))
    snaps = [(link.state.snapshot(), link.hello) for link in feed.links]
    summary = summarize([state_input(s, h) for s, h in snaps], feed.now())
    findings = analyze_ranks(summary.evidence)
    if args.json:
        first = report.Collected(feed.links[0].hello)
        snap = snaps[0][0]
        first.steps = list(snap.steps)
        first.status = snap.status
        first.memory = list(snap.memory)
        first.capture = snap.capture
        doc = report.report_dict(feed.links[0].pid, first, report.stats_of(first, args.window))
        doc.update(ranks_json(feed.job, summary, findings, []))
        doc["recording"] = {"label": label, "demo": False}
        report.print_json(doc)
    else:
        print_ranks(feed.job, summary, findings, [], banner=banner)
    return 0


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
