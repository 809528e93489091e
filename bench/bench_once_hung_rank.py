"""How long ``gputui attach LAUNCHER --once`` takes on a job whose rank hangs:
a 2-rank DDP job on the CPU (``bench/jobs/train_ddp_cpu.py`` under torchrun,
gloo), rank 1's data loading made to sleep for good a moment before the
command starts (rank 0 then waits in the all-reduce): the command finds the
job steady, asks for the automatic capture of both ranks, and the capture is
armed for a step neither reaches.  Each tree's ``gputui`` is timed from the
start of the command to its exit, with the automatic capture's outcome.

    .venv/bin/python bench/bench_once_hung_rank.py --tree before=/tmp/base --tree after=. --rounds 2

A tree is a checkout (``git worktree add``); the job itself runs this
checkout's hook.  Needs torch (CPU is enough).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
JOB = REPO / "bench" / "jobs" / "train_ddp_cpu.py"
#: steps the job runs before its rank hangs (the command must find it steady)
RUN_S = 8.0


def one(tree: Path, timeout: float) -> dict[str, object]:
    scratch = Path(tempfile.mkdtemp(prefix="gputui-hung-"))
    sockets = scratch / "sock"
    sockets.mkdir(mode=0o700)
    env = {**os.environ, "GPUTUI_SOCKET_DIR": str(sockets)}
    torchrun = Path(sys.executable).with_name("torchrun")
    job = subprocess.Popen(
        [sys.executable, "-m", "gputui", "run", "--", str(torchrun), "--standalone",
         "--nproc-per-node=2", str(JOB), "--steps", "0", "--data-sleep", "0.002",
         "--hang-rank", "1", "--hang-file", str(scratch / "hang")],
        cwd=str(REPO), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180.0
        while len(list(sockets.glob("*.sock"))) < 2:
            if job.poll() is not None or time.monotonic() > deadline:
                return {"error": "the job did not start"}
            time.sleep(0.2)
        time.sleep(RUN_S)
        (scratch / "hang").touch()
        t0 = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-m", "gputui", "attach", str(job.pid), "--once", "--json"],
            cwd=str(tree), env=env, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        wall = time.perf_counter() - t0
        try:
            auto = json.loads(out.stdout).get("auto_capture")
        except ValueError:
            auto = None
        return {"wall_s": round(wall, 1), "rc": out.returncode, "auto_capture": auto}
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", required=True, help="NAME=PATH")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300.0)
    args = ap.parse_args()
    trees = [(name, Path(path).resolve()) for name, path in (t.split("=", 1) for t in args.tree)]
    for r in range(args.rounds):
        for name, tree in trees if r % 2 == 0 else trees[::-1]:
            print(json.dumps({"round": r + 1, "tree": name, **one(tree, args.timeout)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
