"""``gputui --once`` on a live GPU against nvitop's ``--once`` and the floor.

    python3 bench/bench_once_live.py [--runs 10] [--load] [--out once-live.json]

Three commands take turns, ``--runs`` rounds (the order rotates each round):
``python3 -m gputui --once`` (this tree on ``PYTHONPATH``), ``python3 -m nvitop
--once``, and the floor: ``python3`` importing pynvml and psutil, ``nvmlInit``
and two queries (the device count and the first device's utilization).  Each
run's wall time (``time.perf_counter`` around the child) and peak RSS
(``os.wait4``) are kept; reported: medians, and gputui's median against
nvitop's and against the floor.  Byte code is compiled first for this tree
(what an installed package has).  ``--load`` runs a bf16 matrix-product loop
on the GPU meanwhile (``bench/jobs/gpu_load.py``), as with a job on it.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FLOOR = (
    "import pynvml, psutil; pynvml.nvmlInit(); n = pynvml.nvmlDeviceGetCount(); "
    "pynvml.nvmlDeviceGetUtilizationRates(pynvml.nvmlDeviceGetHandleByIndex(0))"
)
COMMANDS = {
    "gputui": [sys.executable, "-m", "gputui", "--once"],
    "nvitop": [sys.executable, "-m", "nvitop", "--once"],
    "floor": [sys.executable, "-c", FLOOR],
}


def one(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one run."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        raise SystemExit(f"{argv}: exit status {status}: {err[-400:]}")
    return wall, usage.ru_maxrss / 1024.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--load", action="store_true")
    parser.add_argument("--out", default="once-live.json")
    args = parser.parse_args()
    compileall.compile_dir(str(REPO / "gputui"), quiet=1)
    load = None
    if args.load:
        plan = ["--plan", f"bf16mm:{30 + args.runs * 6}"]
        job = [sys.executable, str(REPO / "bench/jobs/gpu_load.py"), *plan]
        load = subprocess.Popen(job, stdout=subprocess.DEVNULL)
        time.sleep(5)
    names = list(COMMANDS)
    for name in names:  # one untimed run each: the page cache, the driver
        one(COMMANDS[name])
    runs: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    try:
        for r in range(args.runs):
            for name in names[r % 3 :] + names[: r % 3]:
                runs[name].append(one(COMMANDS[name]))
    finally:
        if load is not None:
            load.kill()
    med = {
        n: {
            "wall_s": statistics.median(w for w, _ in v),
            "rss_mb": statistics.median(m for _, m in v),
            "wall_all_s": [round(w, 4) for w, _ in v],
        }
        for n, v in runs.items()
    }
    result: dict[str, Any] = {
        "machine": platform.node(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "loadavg": os.getloadavg(),
        "load_on_gpu": args.load,
        "runs": args.runs,
        "pyc": "compiled",
        "medians": med,
        "gputui_over_nvitop": med["gputui"]["wall_s"] / med["nvitop"]["wall_s"],
        "gputui_minus_floor_s": med["gputui"]["wall_s"] - med["floor"]["wall_s"],
    }
    Path(args.out).write_text(json.dumps(result, indent=1))
    for n in names:
        print(f"{n:8} wall {med[n]['wall_s'] * 1000:7.1f} ms  peak RSS {med[n]['rss_mb']:6.1f} MB")
    print(
        f"gputui/nvitop {result['gputui_over_nvitop']:.2f}; "
        f"gputui - floor {result['gputui_minus_floor_s'] * 1000:.0f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
