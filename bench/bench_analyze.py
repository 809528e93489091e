"""``gputui analyze`` against Holistic Trace Analysis 0.5.0 on the same traces, same run.

    .venv/bin/python bench/bench_analyze.py                    # 5, 50 and 500 MB
    .venv/bin/python bench/bench_analyze.py --sizes 5 50 --rounds 3 --out /tmp/bench.json
    .venv/bin/python bench/bench_analyze.py --data --out /tmp/bench.json  # tests/data's traces

``--data`` runs both tools on every trace kept in ``tests/data`` instead (the
H100 cases, the planted scenarios, the two-H100 NCCL pair), as they are on
disk (gzipped JSON, which both read), and reports the median and the lowest
ratio, of wall time and of CPU time (user + system, from ``wait4``: on a shared
machine it moves less with the load than wall time); the load average before
and after goes in the results.

The traces are a real H100 trace (tests/data/traces/healthy: 3 steps of a bf16
transformer, 6.4 MB of JSON) tiled in time: each copy is shifted past the end
of the previous one, with its correlation ids, external ids, flow ids and step
numbers renumbered, so the result reads as one long profile.  They are written
(uncompressed JSON, as torch.profiler's ``export_chrome_trace`` writes) to a
scratch directory and deleted afterwards; nothing is checked in.

Each tool runs in its own fresh process, alternating, ``--rounds`` times per
size: gputui as the user runs it (``python -m gputui analyze FILE --json``),
HTA as its documentation shows (``TraceAnalysis`` + ``get_temporal_breakdown`` +
``get_idle_time_breakdown``).  Wall time and peak resident memory (``wait4``)
per run; a run past ``--timeout`` is stopped and reported as such.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "tests" / "data" / "traces" / "healthy.pt.trace.json.gz"

HTA_SCRIPT = r"""
import logging, sys, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
from pathlib import Path
from hta.trace_analysis import TraceAnalysis
path = Path(sys.argv[1])
analysis = TraceAnalysis(trace_files={0: str(path)}, trace_dir=str(path.parent))
temporal = analysis.get_temporal_breakdown(visualize=False)
idle, _ = analysis.get_idle_time_breakdown(visualize=False)
row = temporal.iloc[0]
print("idle_pct", row["idle_time_pctg"], "compute_pct", row["compute_time_pctg"])
"""


def tile(source: Path, target: Path, megabytes: float) -> dict[str, Any]:
    """Write ``source`` repeated in time until the file reaches ``megabytes``."""
    doc = json.loads(gzip.decompress(source.read_bytes()))
    events: list[dict[str, Any]] = doc.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    start = min(e["ts"] for e in timed)
    end = max(e["ts"] + e.get("dur", 0) for e in timed if isinstance(e.get("dur", 0), (int, float)))
    shift = (end - start) + 1000.0  # one copy, then 1 ms of nothing
    ids = [
        v
        for e in events
        for v in (
            e.get("id"),
            (e.get("args") or {}).get("correlation"),
            (e.get("args") or {}).get("External id"),
        )
        if isinstance(v, int)
    ]
    id_step = max(ids) + 1
    step_names = sorted(
        {e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")}
    )
    steps_per_copy = len(step_names)
    # the profiler's own span and markers belong once, around everything
    once = [e for e in events if e.get("cat") == "Trace" or e.get("ph") in ("M", "i")]
    body = [e for e in events if e not in once]
    head = json.dumps(doc)[:-1] + ', "traceEvents": [\n'
    written = 0
    copies = 0
    budget = megabytes * 1e6
    with target.open("w") as fh:
        fh.write(head)
        written += len(head)
        for e in once:
            line = json.dumps(e) + ",\n"
            fh.write(line)
            written += len(line)
        first = True
        while written < budget:
            for e in body:
                ev = dict(e)
                if isinstance(ev.get("ts"), (int, float)):
                    ev["ts"] = round(ev["ts"] + copies * shift, 3)
                if isinstance(ev.get("id"), int):
                    ev["id"] += copies * id_step
                args = ev.get("args")
                if isinstance(args, dict):
                    args = dict(args)
                    for key in ("correlation", "External id"):
                        if isinstance(args.get(key), int):
                            args[key] += copies * id_step
                    ev["args"] = args
                name = ev.get("name")
                if isinstance(name, str) and name.startswith("ProfilerStep#"):
                    n = int(name.split("#", 1)[1])
                    ev["name"] = f"ProfilerStep#{n + copies * steps_per_copy}"
                line = ("" if first else ",\n") + json.dumps(ev)
                first = False
                fh.write(line)
                written += len(line)
            copies += 1
        fh.write('\n],\n"traceName": "tiled"\n}\n')
    return {"copies": copies, "steps": copies * steps_per_copy, "bytes": target.stat().st_size}


#: Runs the measured command and reports its own peak RSS.  A child's
#: ``ru_maxrss`` counts the memory it shared with its parent before ``exec``, so
#: the command is started from this small fresh interpreter, not from the
#: benchmark process, which holds the source trace in memory.
LAUNCHER = r"""
import json, os, subprocess, sys, time
t0 = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
err = proc.stderr.read()
_, status, usage = os.wait4(proc.pid, 0)
print(json.dumps({
    "wall_s": round(time.perf_counter() - t0, 3),
    "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
    "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
    "rc": os.waitstatus_to_exitcode(status),
    "error": (err.decode(errors="replace").strip().splitlines() or [None])[-1] if status else None,
}))
"""


def measure_rss(cmd: list[str], timeout: float) -> dict[str, Any]:
    """Run ``cmd`` through :data:`LAUNCHER`: its wall time, its own peak RSS
    (``wait4``), exit status; killed after ``timeout`` seconds."""
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, *cmd],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=str(REPO),
        start_new_session=True,
    )
    try:
        out, _ = launcher.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.communicate()
        return {"wall_s": timeout, "peak_rss_mib": None, "rc": None, "timed_out": True}
    got: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    got["timed_out"] = False
    return got


def compare(path: Path, rounds: int, timeout: float) -> dict[str, Any]:
    """Both tools on ``path``, alternating, ``rounds`` times each: every run, the
    median wall time, the peak RSS, and HTA's time over gputui's."""
    ours = [sys.executable, "-m", "gputui", "analyze", str(path), "--json"]
    theirs = [sys.executable, "-c", HTA_SCRIPT, str(path)]
    row: dict[str, Any] = {"gputui": [], "hta": []}
    for r in range(rounds):
        order = [("gputui", ours), ("hta", theirs)]
        if r % 2:
            order.reverse()
        for name, cmd in order:
            got = measure_rss(cmd, timeout)
            row[name].append(got)
            print(f"  {name:6} {got}", flush=True)
    for name in ("gputui", "hta"):
        ok = [g["wall_s"] for g in row[name] if g["rc"] == 0]
        row[f"{name}_median_s"] = statistics.median(ok) if ok else None
        cpu = [g["cpu_s"] for g in row[name] if g["rc"] == 0 and "cpu_s" in g]
        row[f"{name}_median_cpu_s"] = statistics.median(cpu) if cpu else None
        rss = [g["peak_rss_mib"] for g in row[name] if g["peak_rss_mib"] is not None]
        row[f"{name}_peak_rss_mib"] = max(rss) if rss else None
    if row["gputui_median_s"] and row["hta_median_s"]:
        row["speedup"] = round(row["hta_median_s"] / row["gputui_median_s"], 2)
    if row["gputui_median_cpu_s"] and row["hta_median_cpu_s"]:
        row["cpu_speedup"] = round(row["hta_median_cpu_s"] / row["gputui_median_cpu_s"], 2)
    print(
        f"  median gputui {row['gputui_median_s']} s, HTA {row['hta_median_s']} s, "
        f"x{row.get('speedup')}",
        flush=True,
    )
    return row


def data_traces() -> list[Path]:
    """Every profiler trace kept in tests/data."""
    return sorted((REPO / "tests" / "data").rglob("*.pt.trace.json*"))


def run_data(rounds: int, timeout: float, results: dict[str, Any]) -> None:
    """Both tools on each trace of tests/data; the median and lowest ratio."""
    for path in data_traces():
        print(f"{path.relative_to(REPO)}: {path.stat().st_size / 1e6:.2f} MB", flush=True)
        row: dict[str, Any] = {"trace": str(path.relative_to(REPO)), "bytes": path.stat().st_size}
        row.update(compare(path, rounds, timeout))
        results["runs"].append(row)
    for key in ("speedup", "cpu_speedup"):
        ratios = [r[key] for r in results["runs"] if r.get(key)]
        if ratios:
            results[f"median_{key}"] = statistics.median(ratios)
            results[f"min_{key}"] = min(ratios)
            print(f"{key}: median x{statistics.median(ratios):.2f}, lowest x{min(ratios):.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=float, nargs="+", default=[5, 50, 500], help="MB of JSON")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=3600.0, help="per run, seconds")
    ap.add_argument("--dir", help="scratch directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the tiled traces")
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--data", action="store_true", help="the traces in tests/data instead")
    args = ap.parse_args()
    scratch = Path(args.dir or tempfile.mkdtemp(prefix="gputui-bench-analyze-"))
    scratch.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs",
        "python": platform.python_version(),
        "runs": [],
    }
    try:
        import hta  # noqa: F401
        import pandas

        results["pandas"] = pandas.__version__
    except ImportError:
        print("HolisticTraceAnalysis is not installed (pip install '.[test]')", file=sys.stderr)
        return 2
    with open("/proc/meminfo") as fh:
        results["mem_total"] = fh.readline().split(":", 1)[1].strip()
    # An installed package has its bytecode compiled (pip does it on install), as
    # HTA's and pandas' have; a checkout run with PYTHONDONTWRITEBYTECODE set would
    # compile gputui's modules from source in every run (about 0.2 s of CPU).
    import compileall

    compileall.compile_dir(str(REPO / "gputui"), quiet=1)
    results["bytecode"] = "gputui compiled before the runs, as an install does"
    results["loadavg_before"] = os.getloadavg()
    if args.data:
        run_data(args.rounds, args.timeout, results)
        results["loadavg_after"] = os.getloadavg()
        if args.out:
            Path(args.out).write_text(json.dumps(results, indent=2))
        return 0
    try:
        for size in args.sizes:
            path = scratch / f"tiled-{size:g}MB.pt.trace.json"
            info = tile(SOURCE, path, size)
            print(f"{path.name}: {info['bytes'] / 1e6:.0f} MB, {info['steps']} steps", flush=True)
            row: dict[str, Any] = {"size_mb": round(info["bytes"] / 1e6, 1), **info}
            row.update(compare(path, args.rounds, args.timeout))
            results["runs"].append(row)
            if not args.keep:
                path.unlink()
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(scratch, ignore_errors=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
