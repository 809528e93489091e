"""What the monitor holds and what each refresh costs, headless (Textual's test driver).

    .venv/bin/python bench/profile_tui.py [--refreshes 300] [--replay FILE] [--profile]

The monitor app of ``gputui --demo`` (or ``--replay FILE``) is started headless at
120x40 with its sampler thread off; the script feeds it one snapshot at a time
(``app.advance``) and lets Textual draw each before the next, as the live monitor
does at every interval.  It prints:

- CPU time per refresh (this thread, ``time.thread_time``), and with ``--profile``
  the functions that take it (cProfile, cumulative);
- RSS after the refreshes, Python's own allocations by file (tracemalloc, started
  after the imports: what the running monitor adds), and the size of the history
  buffers;
- the modules loaded, by top-level package.

A headless screen is drawn but not written to a terminal: the figures of a real
terminal come from ``bench_tui.py`` (tmux).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import json
import os
import pstats
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent


def history_bytes(history: Any) -> dict[str, int]:
    """Bytes the history's series hold: a deque slot (8) and its float (24)."""
    per_point = 8 + 24
    gpu = sum(len(s) for series in history.gpu.values() for s in series.values())
    host = sum(len(s) for s in history.host.values()) + len(history.times)
    procs = sum(len(s) for p in history.processes.values() for s in p.series.values())
    return {
        "gpu_points": gpu,
        "host_points": host,
        "process_points": procs,
        "processes": len(history.processes),
        "bytes": (gpu + host + procs) * per_point,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from gputui.recording.replay import ReplaySource
    from gputui.tui.app import make_app

    source = ReplaySource.from_file(args.replay) if args.replay else ReplaySource.demo()
    app = make_app(source, interval_s=1.0, autostart=False)
    out: dict[str, Any] = {"refreshes": args.refreshes}
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        for _ in range(args.warmup):
            app.advance()
            await pilot.pause()
        if not args.no_memory:
            tracemalloc.start(1)
        profiler = cProfile.Profile() if args.profile else None
        cpu = 0.0
        for _ in range(args.refreshes):
            t0 = time.thread_time()
            if profiler is not None:
                profiler.enable()
            app.advance()
            await pilot.pause()
            if profiler is not None:
                profiler.disable()
            cpu += time.thread_time() - t0
        traced = tracemalloc.take_snapshot() if not args.no_memory else None
        tracemalloc.stop()
        out["cpu_ms_per_refresh"] = cpu / args.refreshes * 1000
        out["rss_mb"] = psutil.Process().memory_info().rss / 2**20
        out["history"] = history_bytes(app.session.history)
        by_file: collections.Counter[str] = collections.Counter()
        for stat in traced.statistics("filename") if traced is not None else ():
            name = stat.traceback[0].filename
            for prefix in (str(ROOT) + "/", sys.prefix + "/", sys.base_prefix + "/"):
                name = name.removeprefix(prefix)
            by_file[name] += stat.size
        out["traced_kb"] = sum(by_file.values()) / 1024
        out["traced_top_kb"] = {k: v / 1024 for k, v in by_file.most_common(args.top)}
        if profiler is not None:
            stats = pstats.Stats(profiler)
            stats.sort_stats(args.sort).print_stats(args.top)
        app.exit()
    tops = collections.Counter(m.split(".")[0] for m in sys.modules)
    out["modules"] = len(sys.modules)
    out["modules_by_package"] = dict(tops.most_common(12))
    out["gputui_modules"] = sorted(m for m in sys.modules if m.startswith("gputui"))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--refreshes", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20, help="refreshes before measuring")
    parser.add_argument("--replay", metavar="FILE", help="a recording instead of the demo")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions")
    parser.add_argument(
        "--no-memory",
        action="store_true",
        help="no tracemalloc during the refreshes (it slows each allocation: for CPU figures)",
    )
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument(
        "--sort", default="cumulative", help="cProfile's order: cumulative (default) or tottime"
    )
    parser.add_argument("--out", type=Path, help="also write the figures as JSON")
    args = parser.parse_args()
    load = os.getloadavg()
    result = asyncio.run(run(args))
    result["loadavg"] = [load, os.getloadavg()]
    print(json.dumps({k: v for k, v in result.items() if k != "gputui_modules"}, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
