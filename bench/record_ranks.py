"""Record a multi-rank session (every local rank of a job) with one synchronized
capture, through the same feed the rank view uses (``gputui attach PID --record``).

    python bench/record_ranks.py PID -o ranks.jsonl.gz [--seconds 25] [--capture-at 12]

PID: any rank's or the launcher's; waits for the ranks' sockets to appear.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gputui.client.job_group import find_job
from gputui.session.rank_feeds import LiveRanksFeed


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("pid", type=int)
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--seconds", type=float, default=25.0)
    p.add_argument("--capture-at", type=float, default=12.0)
    p.add_argument("--capture-steps", type=int, default=3)
    p.add_argument("--ranks", type=int, default=2, help="wait for this many ranks")
    args = p.parse_args()
    deadline = time.monotonic() + 120
    while True:
        job = find_job(args.pid)
        if job is not None and len(job.pids) >= args.ranks:
            break
        if time.monotonic() > deadline:
            print(f"no job of {args.ranks} ranks under pid {args.pid}", file=sys.stderr)
            return 1
        time.sleep(0.5)
    feed = LiveRanksFeed(job, record_path=args.output)
    feed.connect()
    start = time.monotonic()
    asked = None
    while time.monotonic() - start < args.seconds:
        if asked is None and time.monotonic() - start >= args.capture_at:
            asked = feed.request_capture(args.capture_steps)
        time.sleep(0.2)
    feed.close()
    recorder = feed.recorder
    count = 0 if recorder is None else recorder.count
    note = "" if asked is None else f"; capture of steps from {asked.start_step} on {asked.asked}"
    print(f"recorded {count} messages of {len(job.pids)} ranks{note}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
