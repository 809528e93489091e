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
from gputui.client.hook import AttachError, HookClient
from gputui.client.job_group import JobGroup
from gputui.commands.tty import need_terminal, run_screen
from gputui.recording.attach import AttachRecording
from gputui.reports import attach as attach_report
from gputui.reports.jsondoc import print_json
from gputui.reports.ranks import print_ranks, ranks_json
from gputui.session import oneshot
from gputui.session.rank_view import RankInput, summarize, sync_start

#: the longest wait for a rank's hello
HELLO_TIMEOUT_S = 10.0


def rank_input(got: oneshot.Collected, window: int) -> RankInput:
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
        python_profile=got.python_profile,
        gone=None if gone is None else gone.reason,
        gone_clean=bool(gone is not None and gone.clean),
    )


# -- live ------------------------------------------------------------------------------------
def main(args: argparse.Namespace, job: JobGroup) -> int:
    if not args.once:
        return run_live(args, job)
    return once(args, job)


def run_live(args: argparse.Namespace, job: JobGroup) -> int:
    # the job was found from its ranks' hellos: only the terminal is left to check
    need_terminal("gputui attach", f"gputui attach {args.pid} --once")
    from gputui.session.rank_feeds import LiveRanksFeed
    from gputui.tui.attach.rank_screen import RanksApp

    feed = LiveRanksFeed(job, record_path=args.record)
    return run_screen(RanksApp(feed, ascii_only=args.ascii), feed, args.record)


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
        doc = attach_report.report_dict(args.pid, got, oneshot.stats_of(got, args.window))
        doc.update(ranks_json(job, summary, findings, problems))
        print_json(doc)
    else:
        print_ranks(job, summary, findings, problems, ascii_only=args.ascii)
    return 0


def _collect(
    clients: list[HookClient], args: argparse.Namespace, problems: list[str]
) -> list[oneshot.Collected]:
    """Every rank's history, read at once (each over its own connection)."""

    def one(client: HookClient) -> oneshot.Collected | str:
        try:
            return oneshot.collect_live(client, args.window, args.timeout)
        except AttachError as exc:
            return str(exc)

    with ThreadPoolExecutor(max_workers=min(16, len(clients))) as pool:
        results = list(pool.map(one, clients))
    out: list[oneshot.Collected] = []
    for client, got in zip(clients, results, strict=True):
        if isinstance(got, str):
            problems.append(fmt.clean(got))
            got = oneshot.Collected(client.hello)
        out.append(got)
    return out


def _capture(
    clients: list[HookClient],
    collected: list[oneshot.Collected],
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
        steps = f"step {start}" if end == start else f"steps {start}..{end}"
        print(f"capture: every rank records {steps}", file=sys.stderr)
    failures: dict[int, str] = {}
    lock = threading.Lock()

    def one(pair: tuple[HookClient, oneshot.Collected]) -> None:
        client, got = pair
        try:
            oneshot.capture_live(client, got, request, args.timeout, quiet=True)
        except AttachError as exc:
            with lock:
                failures[client.pid] = str(exc)

    with ThreadPoolExecutor(max_workers=min(16, len(clients))) as pool:
        list(pool.map(one, zip(clients, collected, strict=True)))
    for client in clients:
        if client.pid in failures:
            problems.append(f"pid {client.pid}: {fmt.clean(failures[client.pid])}")
    if len(failures) == len(clients):
        raise oneshot.JobFailed(next(iter(failures.values())))


# -- replay -------------------------------------------------------------------------------
def replay(args: argparse.Namespace, recording: AttachRecording, label: str, banner: str) -> int:
    """A recorded multi-rank session: the rank view, or its report (``--once``)."""
    from gputui.session.rank_feeds import ReplayRanksFeed
    from gputui.session.rank_feeds import rank_input as state_input

    feed = ReplayRanksFeed(recording, label, speed=args.speed)
    if not args.once:
        from gputui.tui.attach.rank_screen import RanksApp

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
        first = oneshot.Collected(feed.links[0].hello)
        snap = snaps[0][0]
        first.steps = list(snap.steps)
        first.status = snap.status
        first.memory = list(snap.memory)
        first.capture = snap.capture
        doc = attach_report.report_dict(
            feed.links[0].pid, first, oneshot.stats_of(first, args.window)
        )
        doc.update(ranks_json(feed.job, summary, findings, []))
        doc["recording"] = {"label": label, "demo": bool(args.demo)}
        print_json(doc)
    else:
        print_ranks(feed.job, summary, findings, [], banner=banner, ascii_only=args.ascii)
    return 0
