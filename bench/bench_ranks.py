"""The rank view against 8 local ranks: time to the first full view, and the
viewer's CPU at 8 ranks x 100 steps/s (targets: <= 1 s, <= 5% of one core).

    .venv/bin/python bench/bench_ranks.py                       # both modes
    .venv/bin/python bench/bench_ranks.py --ranks 8 --rate 100 --out /tmp/bench-ranks.json

The ranks are synthetic: processes started by this script (so it is their
launcher, as the torchrun agent is), each with the real hook and a paced loop
of phases (data, forward, backward, comm, optimizer) and ``gputui.hook.step()``,
with torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
TORCHELASTIC_RUN_ID, MASTER_ADDR/PORT); rank 1 is made slower and the others
wait for it in "comm", as a straggler's peers do.  They run ``--history`` seconds
before the viewer attaches, so it reads that much history from each.

- ``headless``: the rank view in this process under ``App.run_test`` at 120x40.
  First full view: from the start of discovery (``find_job`` of the launcher's
  pid) until every rank's history is in and the view drawn from it.  CPU:
  ``time.process_time()`` over the window (a lower bound: no terminal output).
  The 2-rank run at the same rate is the baseline.
- ``tmux``: the real ``gputui attach LAUNCHER_PID`` in a 120x40 tmux pane; CPU
  is utime+stime of that process from /proc over the window (everything, the
  drawing to the terminal included).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gputui.protocol import list_sockets  # noqa: E402

RANK = r"""
import sys, time
import gputui.hook
rate, slow = float(sys.argv[1]), sys.argv[2] == "1"
gputui.hook.install(batch_size=32)
period = 1.0 / rate
parts = (("data", 0.1), ("forward", 0.2), ("backward", 0.35), ("comm", 0.25), ("optimizer", 0.1))
next_t = time.perf_counter()
while True:
    next_t += period
    start = time.perf_counter()
    for name, share in parts:
        with gputui.hook.phase(name):
            # the straggler's data takes longer; the others wait as long in comm
            extra = 0.3 if (name == "data" and slow) or (name == "comm" and not slow) else 0.0
            until = start + period * (share + extra) * 0.7
            left = until - time.perf_counter()
            if left > 0:
                time.sleep(left)  # light on the CPU: 8 of these share 2 cores
            start = until
    gputui.hook.step()
    left = next_t - time.perf_counter()
    if left > 0:
        time.sleep(left)
    else:
        next_t = time.perf_counter()
"""

SIZE = (120, 40)


def start_ranks(n: int, rate: float, sock_dir: str) -> list[subprocess.Popen[bytes]]:
    procs = []
    for rank in range(n):
        env = dict(
            os.environ,
            PYTHONPATH=str(REPO),
            GPUTUI_SOCKET_DIR=sock_dir,
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(n),
            LOCAL_WORLD_SIZE=str(n),
            TORCHELASTIC_RUN_ID=f"bench-{os.getpid()}-{n}",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(20000 + os.getpid() % 20000),
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", RANK, str(rate), "1" if rank == 1 else "0"],
                env=env,
                cwd=str(REPO),
            )
        )
    deadline = time.monotonic() + 60
    pids = {p.pid for p in procs}
    while not pids <= set(list_sockets()):
        if time.monotonic() > deadline:
            stop(procs)
            raise SystemExit("the ranks did not open their sockets")
        time.sleep(0.05)
    return procs


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()


async def headless(n: int, rate: float, history_s: float, window: float) -> dict[str, Any]:
    from gputui.client.job_group import find_job
    from gputui.session.rank_feeds import LiveRanksFeed
    from gputui.tui.attach.rank_screen import RanksApp

    procs = start_ranks(n, rate, os.environ["GPUTUI_SOCKET_DIR"])
    try:
        await asyncio.sleep(history_s)
        t0 = time.monotonic()
        job = find_job(os.getpid())
        if job is None or len(job.pids) != n:
            raise SystemExit(f"found {None if job is None else len(job.pids)} ranks, not {n}")
        feed = LiveRanksFeed(job)
        feed.watch_gpu = False
        app = RanksApp(feed)
        async with app.run_test(size=SIZE):
            screen = app.ranks_screen
            deadline = time.monotonic() + 30
            while screen.first_full_at is None:
                if time.monotonic() > deadline:
                    raise SystemExit("no full view within 30 s")
                await asyncio.sleep(0.005)
            first_full = screen.first_full_at - t0
            history = [len(link.state.snapshot().steps) for link in feed.links]
            await asyncio.sleep(2.0)  # the steady state, not the first reads
            refreshes0 = screen.refreshes
            received0 = sum(link.state.snapshot().steps_received for link in feed.links)
            cpu0, wall0 = time.process_time(), time.monotonic()
            await asyncio.sleep(window)
            cpu1, wall1 = time.process_time(), time.monotonic()
            received = sum(link.state.snapshot().steps_received for link in feed.links)
            refreshes = screen.refreshes - refreshes0
            findings = [f.rule for f in screen.findings]
        feed.close()
    finally:
        stop(procs)
    return {
        "mode": "headless",
        "ranks": n,
        "rate_per_rank": rate,
        "first_full_view_s": round(first_full, 3),
        "history_steps_per_rank": history,
        "cpu_pct_one_core": round(100 * (cpu1 - cpu0) / (wall1 - wall0), 2),
        "steps_received_per_s": round((received - received0) / (wall1 - wall0), 1),
        "view_builds_per_s": round(refreshes / (wall1 - wall0), 2),
        "findings": findings,
    }


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def in_tmux(n: int, rate: float, history_s: float, window: float) -> dict[str, Any]:
    procs = start_ranks(n, rate, os.environ["GPUTUI_SOCKET_DIR"])
    session = f"gputui-ranks-{os.getpid()}"
    env = (
        f"GPUTUI_SOCKET_DIR={os.environ['GPUTUI_SOCKET_DIR']} PYTHONPATH={REPO} TERM=xterm-256color"
    )
    command = f"exec env {env} {sys.executable} -m gputui attach {os.getpid()}"
    try:
        time.sleep(history_s)
        subprocess.run(
            ["tmux", "new-session", "-d", "-s", session, "-x", str(SIZE[0]), "-y",
             str(SIZE[1]), command],
            check=True,
        )  # fmt: skip
        out = subprocess.run(
            ["tmux", "list-panes", "-t", session, "-F", "#{pane_pid}"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        viewer = int(out.stdout.split()[0])
        time.sleep(4.0)  # start-up (imports, connections, history) is not the steady state
        cpu0, wall0 = _cpu_seconds(viewer), time.monotonic()
        time.sleep(window)
        cpu1, wall1 = _cpu_seconds(viewer), time.monotonic()
        screen = subprocess.run(
            ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
        ).stdout
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True, check=False)
        stop(procs)
    return {
        "mode": "tmux",
        "ranks": n,
        "rate_per_rank": rate,
        "cpu_pct_one_core": round(100 * (cpu1 - cpu0) / (wall1 - wall0), 2),
        "straggler_on_screen": "rank 1 is the straggler" in screen,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--rate", type=float, default=100.0, help="steps/s of each rank")
    p.add_argument("--history", type=float, default=5.0, help="seconds before attaching")
    p.add_argument("--seconds", type=float, default=10.0, help="measured window")
    p.add_argument("--modes", nargs="+", default=["headless", "tmux"])
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gtr-"))
    os.environ["GPUTUI_SOCKET_DIR"] = str(work / "s")
    results: dict[str, Any] = {
        "machine": f"{platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
        "runs": [],
    }
    for mode in args.modes:
        for n in (2, args.ranks):  # two ranks: the baseline
            if mode == "headless":
                run = asyncio.run(headless(n, args.rate, args.history, args.seconds))
            elif mode == "tmux":
                run = in_tmux(n, args.rate, args.history, args.seconds)
            else:
                raise SystemExit(f"unknown mode {mode}")
            results["runs"].append(run)
            print(json.dumps(run), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
