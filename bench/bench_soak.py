"""Soak: a job at 1,000 steps/s for N minutes, a viewer that reconnects every 10 s.

    .venv/bin/python bench/bench_soak.py                    # 10 minutes
    .venv/bin/python bench/bench_soak.py --minutes 1 --out /tmp/soak.json

A synthetic job (no torch: ``gputui.hook.install()`` + ``gputui.hook.step()``,
paced by sleeping to an absolute schedule, so its CPU is the hook's and the
loop's, not a spin) steps at ``--rate`` for ``--minutes``, then idles 3 s
and exits.  A viewer in its own process connects, subscribes with the hook's
whole history, reads for ``--reconnect-s`` seconds, disconnects and connects
again, until the job says bye.

Every step record is accounted for by index: seen by some connection, or
reported missed by the hook (a ``steps`` frame's ``missed``: fell out of the
ring, or dropped before it, which the hook's status counts as ``dropped``).
``unaccounted`` (made but neither seen nor reported) must be 0.  The job's and
the viewer's RSS, CPU and open descriptors are sampled every 5 s from /proc; the
per-minute figures show whether memory and descriptors are flat (the job's ring
of 16,384 records, trimmed at twice that, is full after ~33 s at 1,000 steps/s).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

FIXED_RATE = REPO / "bench" / "jobs" / "fixed_rate.py"


# -- the viewer (its own process: --viewer) ------------------------------------------------
def viewer_main(pid: int, reconnect_s: float, out: str) -> int:
    from gputui.client.hook import AttachError, Disconnected, HookClient
    from gputui.protocol.paths import pid_alive
    from gputui.protocol.schema import Status, StepBatch

    seen: list[list[int]] = []  # runs [lo, hi] of indices received
    missed_runs: list[list[int]] = []  # runs the hook said this viewer will never get
    connections = refused = received = 0
    dropped = 0  # the hook's own count of records lost before its ring
    bye = False
    deadline_idle = time.monotonic() + 60
    while not bye:
        try:
            client = HookClient.connect(pid, timeout=5)
        except AttachError:
            refused += 1
            if not pid_alive(pid) or time.monotonic() > deadline_idle:
                break
            time.sleep(0.05)
            continue
        connections += 1
        client.subscribe(history=client.hello.history_capacity, memory=True)
        client.start()
        last: int | None = None
        until = time.monotonic() + reconnect_s
        while True:
            event = client.get(timeout=max(0.0, until - time.monotonic()))
            if event is None:
                break
            if isinstance(event, StepBatch) and event.steps:
                first = event.steps[0].index
                if event.missed and last is not None:
                    missed_runs.append([last + 1, first - 1])
                if last is None or event.missed or not seen:
                    seen.append([first, event.steps[-1].index])
                else:
                    seen[-1][1] = event.steps[-1].index
                last = event.steps[-1].index
                received += len(event.steps)
            elif isinstance(event, Status):
                dropped = max(dropped, event.dropped)
            elif isinstance(event, Disconnected):
                bye = event.clean
                break
        client.close()
        deadline_idle = time.monotonic() + 60
    Path(out).write_text(
        json.dumps(
            {
                "connections": connections,
                "refused": refused,
                "received": received,
                "seen": _merge(seen),
                "missed": _merge(missed_runs),
                "dropped": dropped,
                "bye": bye,
            }
        )
    )
    return 0


def _merge(runs: list[list[int]]) -> list[list[int]]:
    out: list[list[int]] = []
    for lo, hi in sorted(runs):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return out


def _count(runs: list[list[int]]) -> int:
    return sum(hi - lo + 1 for lo, hi in runs)


def _subtract(runs: list[list[int]], minus: list[list[int]]) -> int:
    """How many indices of ``runs`` are not in ``minus`` (both merged)."""
    total = 0
    for lo, hi in runs:
        covered = 0
        for mlo, mhi in minus:
            a, b = max(lo, mlo), min(hi, mhi)
            if a <= b:
                covered += b - a + 1
        total += hi - lo + 1 - covered
    return total


# -- sampling -------------------------------------------------------------------------------
def _proc(pid: int) -> tuple[float, int, int] | None:
    """(CPU seconds, RSS bytes, open descriptors) of a process, None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/status") as fh:
            rss = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:"))
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, StopIteration, IndexError, ValueError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), rss, fds


def _per_minute(samples: list[tuple[float, float, int, int]]) -> list[dict[str, float]]:
    """Mean RSS, CPU % and most descriptors of each minute from (t, cpu_s, rss, fds)."""
    out: list[dict[str, float]] = []
    if len(samples) < 2:
        return out
    t0 = samples[0][0]
    minute = 0
    while True:
        inside = [s for s in samples if minute * 60 <= s[0] - t0 <= (minute + 1) * 60]
        if len(inside) < 2:
            return out
        cpu = (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
        out.append(
            {
                "minute": minute + 1,
                "rss_mib": round(sum(s[2] for s in inside) / len(inside) / 2**20, 2),
                "cpu_pct_one_core": round(100 * cpu, 2),
                "fds_max": max(s[3] for s in inside),
            }
        )
        minute += 1


def run(minutes: float, rate: float, reconnect_s: float) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="gts-", dir="/tmp"))
    env = dict(os.environ, PYTHONPATH=str(REPO), GPUTUI_SOCKET_DIR=str(work / "sock"))
    done = work / "job.steps"
    job = subprocess.Popen(
        [sys.executable, str(FIXED_RATE), str(rate), str(minutes * 60), str(done), "--linger", "3"],
        env=env,
    )
    from gputui.protocol import find_socket

    os.environ["GPUTUI_SOCKET_DIR"] = env["GPUTUI_SOCKET_DIR"]
    deadline = time.monotonic() + 30
    while find_socket(job.pid) is None:
        if job.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the job did not open its socket (exit {job.poll()})")
        time.sleep(0.02)
    viewer_out = work / "viewer.json"
    viewer = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--viewer",
            str(job.pid),
            "--reconnect-s",
            str(reconnect_s),
            "--viewer-out",
            str(viewer_out),
        ],
        env=env,
    )
    job_samples: list[tuple[float, float, int, int]] = []
    viewer_samples: list[tuple[float, float, int, int]] = []
    next_sample = time.monotonic()
    while job.poll() is None or viewer.poll() is None:
        now = time.monotonic()
        if now >= next_sample:
            next_sample += 5.0
            for pid, into in ((job.pid, job_samples), (viewer.pid, viewer_samples)):
                got = _proc(pid)
                if got is not None and not done.exists():  # the stepping part only
                    into.append((now, *got))
        time.sleep(0.1)
    calls_s, elapsed_s = done.read_text().split()
    # The first phase() starts step 0 and every step() call ends one: as many
    # finished steps as calls.
    made = int(calls_s)
    seen_view = json.loads(viewer_out.read_text())
    shutil.rmtree(work, ignore_errors=True)
    seen_runs, missed_runs = seen_view["seen"], seen_view["missed"]
    seen = _count(seen_runs)
    missed_only = _subtract(missed_runs, seen_runs)  # reported missed, never seen later
    job_minutes = _per_minute(job_samples)
    viewer_minutes = _per_minute(viewer_samples)
    return {
        "minutes": minutes,
        "rate": rate,
        "achieved_rate": round(int(calls_s) / float(elapsed_s), 1),
        "reconnect_s": reconnect_s,
        "made": made,
        "seen": seen,
        "missed_reported": missed_only,
        "hook_dropped": seen_view["dropped"],
        "unaccounted": made - seen - missed_only,
        "exact": made == seen + missed_only,
        "connections": seen_view["connections"],
        "records_received": seen_view["received"],
        "bye": seen_view["bye"],
        "job": {"per_minute": job_minutes},
        "viewer": {"per_minute": viewer_minutes},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=1000.0, help="steps per second")
    parser.add_argument("--reconnect-s", type=float, default=10.0)
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--viewer", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--viewer-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.viewer is not None:
        return viewer_main(args.viewer, args.reconnect_s, args.viewer_out)
    result = run(args.minutes, args.rate, args.reconnect_s)
    result["env"] = {
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "date": time.strftime("%Y-%m-%d"),
    }
    jm, vm = result["job"]["per_minute"], result["viewer"]["per_minute"]
    print(
        f"steps made {result['made']}, seen {result['seen']}, reported missed "
        f"{result['missed_reported']} (hook dropped {result['hook_dropped']}), unaccounted "
        f"{result['unaccounted']}; {result['connections']} connections; "
        f"{result['achieved_rate']} steps/s"
    )
    for name, rows in (("job", jm), ("viewer", vm)):
        if rows:
            print(
                f"{name}: RSS {rows[0]['rss_mib']} MiB (minute 1) -> {rows[-1]['rss_mib']} MiB "
                f"(minute {rows[-1]['minute']}); CPU {rows[0]['cpu_pct_one_core']}% -> "
                f"{rows[-1]['cpu_pct_one_core']}% of one core; descriptors "
                f"{rows[0]['fds_max']} -> {rows[-1]['fds_max']}"
            )
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    return 0 if result["exact"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
