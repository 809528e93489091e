"""The CPU of one refresh of the live monitor's screen, in-process and headless.

    python bench/screen_cost.py [--cycles 300] [--rounds 3] [--tree NAME=DIR ...]
    python bench/screen_cost.py --profile FILE   # where, under cProfile (pstats FILE)

Each tree (default: this checkout) runs in its own interpreter, the trees taking
turns ``--rounds`` times.  Inside, the monitor's app runs headless (Textual's
test driver at 120x40) on the tests' fake NVML: one busy H100 whose gauges move
at every sample, one GPU process (``--procs N``: N, a tenth of them with new
%SM and %BW at every sample).  A cycle takes a sample on the main thread
(``sample``), hands it to the app as a second of data (``ingest``: the session's
history and findings, the panels' text) and lets the screen draw the lines that
changed (``draw``: Textual's update, through the app's compositor).  The figures
are microseconds of CPU (``time.thread_time`` of the main thread) per cycle,
over ``--cycles`` cycles after 60 of warm-up; a slower machine or a busy one
scales every tree alike, so compare the trees of one run.  No terminal is
written: a real terminal adds the escape codes' writing
(``bench/monitor_breakdown.py`` measures that).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def inside(
    tree: Path, cycles: int, profile_to: str | None = None, procs: int = 1
) -> dict[str, float]:
    sys.path.insert(0, str(tree))
    sys.path.append(str(ROOT))  # the tests' fake NVML, for a tree of the package alone
    import asyncio

    from gputui.nvml import startup as nvml_open
    from tests.helpers.fake_gpus import busy_node, churn
    from tests.helpers.fake_nvml import FakeNvml

    # this process, and pids no process has (their host side is missing, as for a
    # process in another pid namespace)
    gpus = busy_node([os.getpid(), *range(4_000_000, 4_000_000 + procs - 1)], 1)
    nvml = FakeNvml(gpus)
    nvml_open.import_pynvml = lambda: nvml
    from gputui.sources.live import open_live
    from gputui.tui.app import make_app

    try:
        source = open_live(screen=True)
    except TypeError:  # a tree from before the screen's own source
        source = open_live()
    app = make_app(source, interval_s=3600.0, autostart=False)
    # the live monitor's interval for what follows it (the findings' cadence); the
    # poller is never started, each cycle is a second of data
    session = getattr(app, "session", None)
    if session is not None:
        from gputui.session.monitor import Reading

        session.poller._interval_s = 1.0

        def reading(snapshot: Any, data_time_s: float) -> Any:
            return Reading(snapshot, data_time_s)  # made on the poller's thread

        take = app._take
    else:  # a tree from before the monitor's session
        app.sampler._interval_s = 1.0

        def reading(snapshot: Any, data_time_s: float) -> Any:
            return (snapshot, data_time_s)

        def take(item: Any) -> None:
            app.ingest(*item)

    start_s = time.time()
    gpu = gpus[0]

    def move(step: int) -> None:
        # the gauges of a busy GPU: each sample differs a little
        gpu.util_gpu = 90 + step % 9
        gpu.power_mw = 640_000 + (step * 7919) % 60_000
        gpu.clock_sm = 1700 + (step * 13) % 280
        churn(gpus, step)  # a tenth of the processes get new %SM and %BW

    async def run() -> dict[str, float]:
        totals = {"sample": 0.0, "ingest": 0.0, "draw": 0.0}
        profile = None
        if profile_to:
            import cProfile

            profile = cProfile.Profile()
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            for step in range(60 + cycles):
                move(step)
                if profile is not None and step == 60:
                    profile.enable()
                t0 = time.thread_time()
                item = reading(source.sample(), start_s + step)
                t1 = time.thread_time()
                take(item)
                t2 = time.thread_time()
                await asyncio.sleep(0.04)  # the screen's update runs in here
                t3 = time.thread_time()
                if step >= 60:
                    totals["sample"] += t1 - t0
                    totals["ingest"] += t2 - t1
                    totals["draw"] += t3 - t2
        if profile is not None:
            profile.disable()
            profile.dump_stats(profile_to)
        return {key: round(value / cycles * 1e6, 1) for key, value in totals.items()}

    return asyncio.run(run())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cycles", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--procs", type=int, default=1, help="GPU processes on the fake H100")
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=DIR")
    parser.add_argument(
        "--profile", metavar="FILE", help="one run of this checkout under cProfile, stats to FILE"
    )
    parser.add_argument("--inside", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        print(json.dumps(inside(Path(args.inside), args.cycles, procs=args.procs)))
        return 0
    if args.profile:
        print(json.dumps(inside(ROOT, args.cycles, args.profile, args.procs)))
        return 0
    trees = [
        (name, str(Path(tree).resolve()))
        for name, tree in (spec.split("=", 1) for spec in args.tree)
    ] or [("this", str(ROOT))]
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in trees}
    for round_ in range(args.rounds):
        for name, tree in trees:
            out = subprocess.run(
                [
                    *(sys.executable, __file__, "--inside", tree),
                    *("--cycles", str(args.cycles), "--procs", str(args.procs)),
                ],
                capture_output=True,
                text=True,
                cwd=tree,
                env={
                    **os.environ,
                    "PYTHONPATH": os.pathsep.join(
                        p for p in (tree, os.environ.get("PYTHONPATH", "")) if p
                    ),
                },
                timeout=600,
            )
            if out.returncode:
                print(out.stderr, file=sys.stderr)
                return 1
            results[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"round {round_ + 1} {name}: {results[name][-1]}", file=sys.stderr)
    summary = {
        name: {
            key: statistics.median(run[key] for run in runs) for key in ("sample", "ingest", "draw")
        }
        for name, runs in results.items()
    }
    for item in summary.values():
        item["screen"] = round(item["ingest"] + item["draw"], 1)
    print(json.dumps({"us_per_cycle_median": summary, "runs": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
