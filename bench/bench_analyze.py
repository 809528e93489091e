"""``gputui analyze`` against Holistic Trace Analysis 0.5.0 on the same traces, same run.

    .venv/bin/python bench/bench_analyze.py                    # 5, 50 and 500 MB
    .venv/bin/python bench/bench_analyze.py --sizes 5 50 --rounds 3 --out /tmp/bench.json
    .venv/bin/python bench/bench_analyze.py --data --out /tmp/bench.json  # tests/data's traces
    .venv/bin/python bench/bench_analyze.py --sizes 820 --no-hta --before /tmp/base
    .venv/bin/python bench/bench_analyze.py --data --before /tmp/base   # and the code before
    .venv/bin/python bench/bench_analyze.py --ranks 2 --rank-mb 200 --jobs-list 1 2
    .venv/bin/python bench/bench_analyze.py --file big.pt.trace.json --no-hta  # a real one

Every tiled size also runs the typed-decode floor (``bench/floor.py``: the file
read whole and decoded by msgspec into Structs of the fields gputui reads,
``args`` raw) in its own process, and gives gputui's wall time over the
floor's and gputui's peak RSS over the size of the JSON.  ``--before TREE``
runs a checkout of an earlier commit too (``git worktree add TREE COMMIT``; run
with ``PYTHONPATH=TREE`` and this environment), alternating with the others.
``--ranks N`` writes N rank files of ``--rank-mb`` MB each (one tiled trace, each
copy with its own ``distributedInfo.rank`` and ``trace_id``) and runs ``gputui
analyze DIR --json --jobs J`` for each J of ``--jobs-list``, and one rank alone:
wall time, and the peak of the summed RSS of gputui and its worker processes
(sampled every 20 ms) and of their summed PSS (every 100 ms: the pages a forked
worker shares with the command counted once, not once per process).

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


#: Runs the measured command and reports its own peak RSS (``wait4``: of the
#: command or of its largest worker), and the peak of the RSS summed over it
#: and its worker processes, sampled every 20 ms; and the peak of their summed
#: PSS (``/proc/PID/smaps_rollup``: each shared page counted once over the
#: processes that share it, where the RSS sum counts the pages forked workers
#: share with the command once per worker), sampled every 100 ms.  A child's
#: ``ru_maxrss`` counts the memory it shared with its parent before ``exec``, so
#: the command is started from this small fresh interpreter, not from the
#: benchmark process, which holds the source trace in memory.
LAUNCHER = r"""
import json, os, subprocess, sys, threading, time
t0 = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
peak = [0, 1]
peak_pss = [0]
def sample():
    # the RSS summed over the command and its descendants (worker processes)
    try:
        import psutil
        root = psutil.Process(proc.pid)
    except Exception:
        return
    tick = 0
    while proc.returncode is None:
        total = n = pss = 0
        with_pss = tick % 5 == 0
        tick += 1
        try:
            for p in [root, *root.children(recursive=True)]:
                try:
                    if with_pss:
                        full = p.memory_full_info()
                        total += full.rss
                        pss += full.pss
                    else:
                        total += p.memory_info().rss
                    n += 1
                except (psutil.Error, AttributeError):
                    pass
        except psutil.Error:
            return
        if total > peak[0]:
            peak[:] = [total, n]
        if pss > peak_pss[0]:
            peak_pss[0] = pss
        time.sleep(0.02)
threading.Thread(target=sample, daemon=True).start()
err = proc.stderr.read()
_, status, usage = os.wait4(proc.pid, 0)
proc.returncode = status
print(json.dumps({
    "wall_s": round(time.perf_counter() - t0, 3),
    "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
    "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
    "peak_tree_rss_mib": round(peak[0] / 2**20, 1),
    "peak_tree_pss_mib": round(peak_pss[0] / 2**20, 1) or None,
    "processes_at_peak": peak[1],
    "rc": os.waitstatus_to_exitcode(status),
    "error": (err.decode(errors="replace").strip().splitlines() or [None])[-1] if status else None,
}))
"""


def measure_rss(
    cmd: list[str], timeout: float, env: dict[str, str] | None = None, cwd: Path = REPO
) -> dict[str, Any]:
    """Run ``cmd`` through :data:`LAUNCHER` in ``cwd``: its wall time, its own
    peak RSS (``wait4``), exit status; killed after ``timeout`` seconds."""
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, *cmd],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=str(cwd),
        start_new_session=True,
        env=env,
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


FLOOR_SCRIPT = r"""
import gzip, sys
sys.path.insert(0, sys.argv[2])
from floor import decode_floor
with open(sys.argv[1], "rb") as fh:
    data = fh.read()
if data[:2] == b"\x1f\x8b":
    data = gzip.decompress(data)
print(decode_floor(data))
"""


def tools(
    path: Path, hta: bool, floor: bool, before: str | None, jobs1: bool = False
) -> list[tuple[str, list[str], dict[str, str] | None]]:
    """(name, command, environment) of every tool measured on ``path``."""
    gputui = [sys.executable, "-m", "gputui", "analyze", str(path), "--json"]
    out: list[tuple[str, list[str], dict[str, str] | None]] = [("gputui", gputui, None)]
    if jobs1:  # the same code in one process: no worker decodes a batch
        out.append(("jobs1", [*gputui, "--jobs", "1"], None))
    if before:
        # run in the earlier checkout: ``-m`` puts the working directory first on
        # the path, before PYTHONPATH and this checkout's editable install
        # (and before anything else already on PYTHONPATH, as a --target install)
        path_before = os.pathsep.join(p for p in (before, os.environ.get("PYTHONPATH")) if p)
        env = {**os.environ, "PYTHONPATH": path_before, "BENCH_CWD": before}
        out.append(
            ("before", [sys.executable, "-m", "gputui", "analyze", str(path), "--json"], env)
        )
    if hta:
        out.append(("hta", [sys.executable, "-c", HTA_SCRIPT, str(path)], None))
    if floor:
        out.append(
            ("floor", [sys.executable, "-c", FLOOR_SCRIPT, str(path), str(REPO / "bench")], None)
        )
    return out


def compare(
    path: Path,
    rounds: int,
    timeout: float,
    hta: bool = True,
    floor: bool = False,
    before: str | None = None,
    jobs1: bool = False,
) -> dict[str, Any]:
    """The tools on ``path``, alternating, ``rounds`` times each: every run, the
    median wall time, the peak RSS, and the ratios."""
    order = tools(path, hta, floor, before, jobs1)
    row: dict[str, Any] = {name: [] for name, _cmd, _env in order}
    for r in range(rounds):
        for name, cmd, env in order if r % 2 == 0 else order[::-1]:
            cwd = Path(env["BENCH_CWD"]) if env and "BENCH_CWD" in env else REPO
            got = measure_rss(cmd, timeout, env, cwd)
            row[name].append(got)
            print(f"  {name:6} {got}", flush=True)
    for name, _cmd, _env in order:
        ok = [g["wall_s"] for g in row[name] if g["rc"] == 0]
        row[f"{name}_median_s"] = statistics.median(ok) if ok else None
        cpu = [g["cpu_s"] for g in row[name] if g["rc"] == 0 and "cpu_s" in g]
        row[f"{name}_median_cpu_s"] = statistics.median(cpu) if cpu else None
        rss = [g["peak_rss_mib"] for g in row[name] if g["peak_rss_mib"] is not None]
        row[f"{name}_peak_rss_mib"] = max(rss) if rss else None
        tree = [g.get("peak_tree_rss_mib") or 0 for g in row[name]]
        row[f"{name}_peak_tree_rss_mib"] = max(tree) if any(tree) else None
        pss = [g.get("peak_tree_pss_mib") or 0 for g in row[name]]
        row[f"{name}_peak_tree_pss_mib"] = max(pss) if any(pss) else None
    ours = row["gputui_median_s"]
    ratios = (("hta", "speedup"), ("before", "before_over_gputui"), ("jobs1", "jobs1_over_gputui"))
    for name, key in ratios:
        if ours and row.get(f"{name}_median_s"):
            row[key] = round(row[f"{name}_median_s"] / ours, 2)
        cpu_ours = row["gputui_median_cpu_s"]
        if cpu_ours and row.get(f"{name}_median_cpu_s"):
            row[f"cpu_{key}"] = round(row[f"{name}_median_cpu_s"] / cpu_ours, 2)
    if before and row.get("hta_median_s") and row.get("before_median_s"):
        row["speedup_before"] = round(row["hta_median_s"] / row["before_median_s"], 2)
    if before and row.get("hta_median_cpu_s") and row.get("before_median_cpu_s"):
        row["cpu_speedup_before"] = round(row["hta_median_cpu_s"] / row["before_median_cpu_s"], 2)
    if ours and row.get("floor_median_s"):
        row["gputui_over_floor"] = round(ours / row["floor_median_s"], 2)
    print(
        "  median " + ", ".join(f"{n} {row[f'{n}_median_s']} s" for n, _c, _e in order),
        flush=True,
    )
    return row


def data_traces() -> list[Path]:
    """Every profiler trace kept in tests/data."""
    return sorted((REPO / "tests" / "data").rglob("*.pt.trace.json*"))


def run_data(
    rounds: int, timeout: float, results: dict[str, Any], before: str | None, hta: bool
) -> None:
    """The tools on each trace of tests/data (and ``--extra`` files); the median
    and lowest ratios."""
    for path in data_traces() + [Path(p).resolve() for p in results.get("extra", [])]:
        name = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)
        print(f"{name}: {path.stat().st_size / 1e6:.2f} MB", flush=True)
        row: dict[str, Any] = {"trace": name, "bytes": path.stat().st_size}
        row.update(compare(path, rounds, timeout, hta=hta, before=before))
        results["runs"].append(row)
    keys = ["speedup", "cpu_speedup", "speedup_before", "cpu_speedup_before"]
    keys += ["before_over_gputui", "cpu_before_over_gputui"]
    for key in keys:
        ratios = [r[key] for r in results["runs"] if r.get(key)]
        if ratios:
            results[f"median_{key}"] = statistics.median(ratios)
            results[f"min_{key}"] = min(ratios)
            print(f"{key}: median x{statistics.median(ratios):.2f}, lowest x{min(ratios):.2f}")


# -- ranks in parallel ---------------------------------------------------------------------
def write_ranks(source: Path, scratch: Path, ranks: int, megabytes: float) -> list[Path]:
    """``ranks`` copies of one tiled trace, each its own rank of one job."""
    one = scratch / "tiled-rank.json"
    tile(source, one, megabytes)
    text = one.read_text()
    one.unlink()
    head, sep, tail = text.partition('"traceEvents": [')
    doc_head = json.loads(head.rstrip().rstrip(",") + "}")
    out: list[Path] = []
    for r in range(ranks):
        doc_head["distributedInfo"] = {"backend": "nccl", "rank": r, "world_size": ranks}
        doc_head["trace_id"] = f"BENCHRANK{r:04d}"
        path = scratch / f"rank{r}.pt.trace.json"
        path.write_text(json.dumps(doc_head)[:-1] + ", " + sep + tail)
        out.append(path)
    return out


def run_ranks(args: argparse.Namespace, scratch: Path, results: dict[str, Any]) -> None:
    source = Path(args.source)
    files = write_ranks(source, scratch, args.ranks, args.rank_mb)
    rank_dir = scratch
    size = sum(p.stat().st_size for p in files)
    results["ranks"] = {
        "ranks": args.ranks,
        "bytes_each": files[0].stat().st_size,
        "bytes": size,
        "cpus": os.cpu_count(),
        "runs": [],
    }
    base = [sys.executable, "-m", "gputui", "analyze"]
    cases = [("one rank", [*base, str(files[0]), "--json"])]
    cases += [
        (f"{args.ranks} ranks, --jobs {j}", [*base, str(rank_dir), "--json", "--jobs", str(j)])
        if j
        else (f"{args.ranks} ranks", [*base, str(rank_dir), "--json"])  # 0: as the user runs it
        for j in args.jobs_list
    ]
    for r in range(args.rounds):
        for name, cmd in cases if r % 2 == 0 else cases[::-1]:
            got = {"case": name, **measure_rss(cmd, args.timeout)}
            results["ranks"]["runs"].append(got)
            print(f"  {got}", flush=True)
    summary = {}
    for name, _cmd in cases:
        ok = [g for g in results["ranks"]["runs"] if g["case"] == name and g["rc"] == 0]
        if ok:
            summary[name] = {
                "wall_s": statistics.median(g["wall_s"] for g in ok),
                "peak_tree_rss_mib": max(g["peak_tree_rss_mib"] for g in ok),
                "peak_tree_pss_mib": max((g["peak_tree_pss_mib"] or 0) for g in ok) or None,
            }
    one = summary.get("one rank", {}).get("wall_s")
    for got in summary.values():
        if one:
            got["over_one_rank"] = round(got["wall_s"] / one, 2)
    results["ranks"]["summary"] = summary
    print(json.dumps(summary, indent=2))
    for p in files:
        p.unlink()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=float, nargs="+", default=[5, 50, 500], help="MB of JSON")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=3600.0, help="per run, seconds")
    ap.add_argument("--dir", help="scratch directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the tiled traces")
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--data", action="store_true", help="the traces in tests/data instead")
    ap.add_argument("--extra", nargs="*", default=[], help="with --data: more trace files")
    ap.add_argument("--source", default=str(SOURCE), help="the trace to tile")
    ap.add_argument(
        "--file", nargs="+", default=[], help="uncompressed traces to read as they are (no tiling)"
    )
    ap.add_argument("--before", help="a checkout of an earlier commit, run too")
    ap.add_argument(
        "--jobs1", action="store_true", help="run gputui with --jobs 1 too (no decoding workers)"
    )
    ap.add_argument("--no-hta", action="store_true", help="leave HTA out")
    ap.add_argument("--ranks", type=int, default=0, help="rank files read in parallel")
    ap.add_argument("--rank-mb", type=float, default=200.0, help="MB of JSON per rank")
    ap.add_argument(
        "--jobs-list", type=int, nargs="+", default=[1, 2], help="--jobs to try (0: none given)"
    )
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
        if not args.no_hta:
            print("HolisticTraceAnalysis is not installed (pip install '.[test]')", file=sys.stderr)
            return 2
    with open("/proc/meminfo") as fh:
        results["mem_total"] = fh.readline().split(":", 1)[1].strip()
    # An installed package has its bytecode compiled (pip does it on install), as
    # HTA's and pandas' have; a checkout run with PYTHONDONTWRITEBYTECODE set would
    # compile gputui's modules from source in every run (about 0.2 s of CPU).
    import compileall

    compileall.compile_dir(str(REPO / "gputui"), quiet=1)
    if args.before:
        compileall.compile_dir(str(Path(args.before) / "gputui"), quiet=1)
        results["before"] = args.before
    results["bytecode"] = "gputui compiled before the runs, as an install does"
    results["loadavg_before"] = os.getloadavg()
    try:
        import subprocess as sp

        model = sp.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        results["cpu_model"] = next(
            (ln.split(":", 1)[1].strip() for ln in model.splitlines() if "Model name" in ln), None
        )
    except OSError:
        results["cpu_model"] = None
    if args.ranks:
        try:
            run_ranks(args, scratch, results)
        finally:
            if not args.keep and not args.dir:
                shutil.rmtree(scratch, ignore_errors=True)
        results["loadavg_after"] = os.getloadavg()
        if args.out:
            Path(args.out).write_text(json.dumps(results, indent=2))
        return 0
    if args.data:
        results["extra"] = args.extra
        run_data(args.rounds, args.timeout, results, args.before, not args.no_hta)
        results["loadavg_after"] = os.getloadavg()
        if args.out:
            Path(args.out).write_text(json.dumps(results, indent=2))
        return 0
    try:
        for size in args.file or args.sizes:
            if args.file:  # a real trace, as it is
                path = Path(size)
                info = {"copies": None, "steps": None, "bytes": path.stat().st_size}
            else:
                path = scratch / f"tiled-{size:g}MB.pt.trace.json"
                if not path.exists():
                    info = tile(Path(args.source), path, size)
                else:  # --dir with --keep: the trace written by an earlier run
                    info = {"copies": None, "steps": None, "bytes": path.stat().st_size}
            print(f"{path.name}: {info['bytes'] / 1e6:.0f} MB, {info['steps']} steps", flush=True)
            row: dict[str, Any] = {"size_mb": round(info["bytes"] / 1e6, 1), **info}
            row.update(
                compare(
                    path,
                    args.rounds,
                    args.timeout,
                    not args.no_hta,
                    floor=True,
                    before=args.before,
                    jobs1=args.jobs1,
                )
            )
            if row.get("gputui_peak_rss_mib"):
                row["gputui_rss_over_json"] = round(
                    row["gputui_peak_rss_mib"] * 2**20 / info["bytes"], 2
                )
            for key in ("tree_rss", "tree_pss"):
                if row.get(f"gputui_peak_{key}_mib"):
                    row[f"gputui_{key}_over_json"] = round(
                        row[f"gputui_peak_{key}_mib"] * 2**20 / info["bytes"], 2
                    )
            results["runs"].append(row)
            if not args.keep and not args.file:
                path.unlink()
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(scratch, ignore_errors=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
