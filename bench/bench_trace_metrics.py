"""The trace metrics and a rank's summary, against the code before the shared
scan, on the same timelines, in one process.

    .venv/bin/python bench/bench_trace_metrics.py                      # tests/data's traces
    .venv/bin/python bench/bench_trace_metrics.py /tmp/tiled-200MB.json --rounds 1

For each trace: ``trace.trace_metrics.compute`` (what the hook runs at the end
of a capture, inside the job: HTA's metrics, the step breakdown, the step
account, the markers) and ``analysis.trace_summary.summarize`` (what ``gputui
analyze`` runs per rank: the metrics and the tables), each on a fresh copy of
the trace's timeline, against ``tests/helpers/trace_reference.compute`` (one
function per metric, the code before ``trace/scan.py``), with CPU time
(``time.process_time``, the least of ``--rounds``) and the memory they add to
the timeline's (``tracemalloc``'s peak over the call, in a second run).  The
two must agree: the script checks that they give the same metrics.
"""

from __future__ import annotations

import argparse
import gc
import pickle
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gputui.analysis.trace_summary import summarize  # noqa: E402
from gputui.trace.timeline import Timeline  # noqa: E402
from gputui.trace.trace_metrics import compute  # noqa: E402
from gputui.tracefile.reader import read_trace  # noqa: E402
from tests.helpers import trace_reference  # noqa: E402


def timed(fn: Callable[[Timeline], Any], blob: bytes, rounds: int) -> tuple[float, float, Any]:
    """The least CPU time of ``fn`` over ``rounds`` fresh timelines, and the peak
    memory it allocated (MiB) in one more run."""
    best = float("inf")
    out: Any = None
    for _ in range(rounds):
        timeline = pickle.loads(blob)
        t0 = time.process_time()
        out = fn(timeline)
        best = min(best, time.process_time() - t0)
        del timeline
    timeline = pickle.loads(blob)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    fn(timeline)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return best, peak / 2**20, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", help="traces (default: tests/data's)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    paths = [Path(p) for p in args.paths] or sorted(
        (REPO / "tests" / "data").rglob("*.pt.trace.json*")
    )
    gc.disable()  # as gputui analyze runs
    rows = []
    for path in paths:
        tf = read_trace(path)
        blob = pickle.dumps(tf.timeline)
        records = len(tf.timeline.gpu) + len(tf.timeline.runtime) + len(tf.timeline.ranges)
        del tf
        before, before_mib, want = timed(trace_reference.compute, blob, args.rounds)
        now, now_mib, got = timed(compute, blob, args.rounds)
        assert got == want, f"{path}: the metrics differ"
        whole, whole_mib, _ = timed(
            lambda tl, p=path: summarize(tl, 0, "order", str(p)), blob, args.rounds
        )
        row = {
            "trace": path.name,
            "records": records,
            "compute_before_s": round(before, 4),
            "compute_s": round(now, 4),
            "compute_before_mib": round(before_mib, 1),
            "compute_mib": round(now_mib, 1),
            "summarize_s": round(whole, 4),
            "summarize_mib": round(whole_mib, 1),
        }
        rows.append(row)
        print(row, flush=True)
    if len(rows) > 1:
        ratios = [r["compute_before_s"] / r["compute_s"] for r in rows if r["compute_s"]]
        median = statistics.median(ratios)
        print(f"compute: before / now, median {median:.2f}x, lowest {min(ratios):.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
