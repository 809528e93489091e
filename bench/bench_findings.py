"""What the live analyzer costs the attach screen, and how soon a capture's
findings are on screen.

    .venv/bin/python bench/bench_findings.py --out /tmp/bench-findings.json

- ``rules``: one analyzer pass (evidence + every job rule) over the real H100
  recording's state at the end of the session (1,000 steps, memory, a capture,
  30 GPU samples), timed many times (wall and CPU time); the attach screen runs
  it once per second while steps arrive (and at once when a capture arrives),
  so its share of a core is the pass time over one second; also the step
  account between captures, rebuilt with the statistics once a second.
- ``viewer``: the attach screen (headless, in this process) following a
  synthetic job at 100 steps/s, with the analyzer and without it (replaced by
  one that finds nothing), in alternating rounds of the same run: the
  difference is what the live rules cost the viewer.
- ``latency``: on the demo recording, a capture result handed to the state
  from another thread (as the reader thread does), and the time until the
  screen has rebuilt its view with that capture's findings; the refresh timer
  keeps running, as for a user.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import bench_attach  # noqa: E402

from gputui.analysis.engine import analyze  # noqa: E402
from gputui.analysis.evidence import ordinary  # noqa: E402
from gputui.analysis.live_account import since_capture  # noqa: E402
from gputui.session import attach as model  # noqa: E402


def _demo_state_snapshot() -> model.StateSnapshot:
    from gputui.session.feeds import ReplayFeed

    feed = ReplayFeed.demo()
    state = model.AttachState()
    feed.connect(state, autoplay=False)
    feed.advance_to(feed.duration_s + 1)
    return state.snapshot()


def rules(repeats: int) -> dict[str, Any]:
    snap = _demo_state_snapshot()
    ev = model.evidence(snap)
    findings = analyze(ev)
    times, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.thread_time()
        analyze(model.evidence(snap))
        times.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
    account = []
    for _ in range(repeats):
        c0 = time.thread_time()
        since_capture(ordinary(snap.steps[-model.STATS_WINDOW :]), snap.capture)
        account.append(time.thread_time() - c0)
    evidence_only = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        model.evidence(snap)
        evidence_only.append(time.perf_counter() - t0)
    median = statistics.median(times)
    return {
        "steps": len(snap.steps),
        "findings": [f.rule for f in findings],
        "pass_ms_median": round(median * 1000, 3),
        "pass_ms_p90": round(sorted(times)[int(0.9 * len(times))] * 1000, 3),
        "evidence_ms_median": round(statistics.median(evidence_only) * 1000, 3),
        "core_pct_at_1_pass_per_s": round(100 * median / 1.0, 3),
        # CPU time (this thread's): what a pass costs a core on a loaded machine,
        # where the wall time also counts the time other processes held the CPU
        "pass_cpu_ms_median": round(statistics.median(cpu) * 1000, 3),
        "core_pct_cpu_at_1_pass_per_s": round(100 * statistics.median(cpu), 3),
        # the step account between captures, rebuilt with the statistics once a second
        "account_cpu_ms_median": round(statistics.median(account) * 1000, 3),
    }


async def _viewer_rounds(rate: float, window: float, rounds: int) -> dict[str, Any]:
    real = model.analyze
    results: dict[str, list[float]] = {"with": [], "without": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(rounds):
            for label in ("with", "without") if i % 2 == 0 else ("without", "with"):
                model.analyze = real if label == "with" else (lambda ev: [])  # type: ignore[assignment]
                try:
                    work = Path(tmp) / f"{label}{i}"
                    work.mkdir()
                    out = await bench_attach.headless(rate, window, work)
                finally:
                    model.analyze = real  # type: ignore[assignment]
                results[label].append(out["cpu_pct_one_core"])
    with_ = statistics.median(results["with"])
    without = statistics.median(results["without"])
    return {
        "rate_steps_per_s": rate,
        "window_s": window,
        "rounds": rounds,
        "cpu_pct_with_analyzer": results["with"],
        "cpu_pct_without_analyzer": results["without"],
        "median_with": with_,
        "median_without": without,
        "analyzer_pct_of_core": round(with_ - without, 2),
    }


async def _latency(repeats: int) -> dict[str, Any]:
    from gputui.tui.attach import ReplayFeed, make_attach_app

    app = make_attach_app(ReplayFeed.demo(), autostart=False)
    times = []
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        screen = app.attach_screen
        screen.replay_to(40.0)
        await pilot.pause()
        old = screen.state.snapshot().capture
        if old is None:
            raise SystemExit("the demo recording has no capture at 40 s")
        for i in range(repeats):
            fresh = dataclasses.replace(old, id=f"bench-{i}")
            t0 = time.perf_counter()
            reader = threading.Thread(target=screen.state.add, args=(fresh,))
            reader.start()
            deadline = t0 + 5.0
            while True:
                view = screen.view
                if view is not None and view.snap.capture is fresh:
                    break
                if time.perf_counter() > deadline:
                    raise SystemExit("the capture never reached the screen")
                await asyncio.sleep(0.001)
            times.append(time.perf_counter() - t0)
            reader.join()
            # let a refresh tick pass so each repeat starts at a random phase of it
            await asyncio.sleep(0.13)
    return {
        "repeats": repeats,
        "ms_median": round(statistics.median(times) * 1000, 1),
        "ms_max": round(max(times) * 1000, 1),
        "ms_all": [round(t * 1000, 1) for t in times],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200, help="rule passes timed")
    parser.add_argument("--rate", type=float, default=100.0, help="viewer: job steps per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="viewer: window per round")
    parser.add_argument("--rounds", type=int, default=2, help="viewer: A/B rounds")
    parser.add_argument("--skip-viewer", action="store_true")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()
    result: dict[str, Any] = {"rules": rules(args.repeats)}
    print("rules:", json.dumps(result["rules"]))
    result["latency"] = asyncio.run(_latency(20))
    print("latency:", json.dumps(result["latency"]))
    if not args.skip_viewer:
        result["viewer"] = asyncio.run(_viewer_rounds(args.rate, args.seconds, args.rounds))
        print("viewer:", json.dumps(result["viewer"]))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
