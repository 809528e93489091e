"""The monitor's cost against the number of GPU processes: a sweep.

    python bench/bench_scale.py --out /tmp/scale.json
    python bench/bench_scale.py --tree before=/path/to/main --tree after=. --out /tmp/scale.json

For each size (``--sizes``, default 100, 1,000 and 2,000 processes on 8 GPUs,
and 20,000 on one GPU), a synthetic recording is made once by
``bench/scale_recording.py`` (a tenth of the processes change their numbers
each second, 0.2% are replaced), and the embedded demo (one GPU, one process)
is measured too.  Each checkout plays the recording its gputui writes
(``--format own``: from 1,000 processes a compact one, where the checkout
writes and reads those; ``--format full``: every checkout the full one).  For
each checkout (``--tree LABEL=PATH``, this one by
default), in turns:

- ``once``: ``gputui --replay FILE --once`` into a pipe (every row), with
  ``--rows 50`` (where the checkout has it), and ``--json``: wall time from
  start to exit, CPU time (user + system) and the peak RSS (``wait4``); the
  median of ``--rounds``;
- ``monitor``: ``gputui --replay FILE --interval 1`` in a 120x40 tmux pane
  (``bench/bench_tui.py``): the process tree's CPU time over ``--seconds``
  after ``--warmup`` (the recording is counted and the first snapshots drawn
  meanwhile), as % of one core, i.e. milliseconds of CPU per 1 s refresh / 10,
  and its RSS at the end of the window; ``--windows`` windows per checkout,
  in turns, their median;

- ``--ls N``: ``gputui ls`` with N processes carrying the hook (this checkout);
- ``--live N``: the live monitor with NVML faked (``bench/live_scale.py``) on N
  real processes (``sleep``, started here and ended at exit) over 8 GPUs:
  the live source alone (its first sample, which reads every process's facts,
  and a later one: CPU seconds), ``--once`` and the monitor window, as above,
  each checkout in turns;
- ``host``: the live collector's host side (psutil) on every process this
  machine has: CPU per process and refresh of ``HostCollector.enrich``, the
  part of a live refresh that grows with the GPU processes (NVML's process
  lists are one call per GPU).

Prints a table and writes JSON (machine, date, load average before and after).
Needs tmux for ``monitor``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_tui import measure
from scale_recording import write_recording

ROOT = Path(__file__).resolve().parent.parent
#: (label, processes, GPUs)
SIZES = {"100": (100, 8), "1000": (1000, 8), "2000": (2000, 8), "20000": (20000, 1)}


def recording(cache: Path, size: str, compact: bool = False) -> Path:
    if size == "demo":
        return ROOT / "gputui" / "data" / "demo.jsonl.gz"
    processes, gpus = SIZES[size]
    path = cache / f"scale-{processes}x{gpus}{'-compact' if compact else ''}.jsonl.gz"
    if not path.exists():
        print(f"making {path}", file=sys.stderr)
        write_recording(path, processes, gpus, compact=compact)
    return path


def writes_compact(tree: Path, size: str) -> bool:
    """Whether the gputui of ``tree`` writes a recording of ``size`` compact (and
    reads one): the recording each checkout plays with ``--format own``."""
    if size == "demo":
        return False
    # the writer's place before and after collectors/ was split by subject
    writers = (
        tree / "gputui" / "recording" / "writer.py",
        tree / "gputui" / "collectors" / "recording_writer.py",
    )
    source = next((w.read_text() for w in writers if w.exists()), "")
    match = re.search(r"^COMPACT_FROM = (\d+)", source, re.M)
    return match is not None and SIZES[size][0] >= int(match.group(1))


def recording_for(args: argparse.Namespace, tree: Path, size: str) -> Path:
    if args.format == "full":
        return recording(args.cache, size)
    return recording(args.cache, size, compact=writes_compact(tree, size))


def run_once(
    tree: Path, args: list[str], program: list[str] | None = None
) -> tuple[float, float, bool, float]:
    """Wall seconds, peak RSS (MB), success and CPU seconds (user + system) of
    ``gputui ARGS`` (or ``program ARGS``) from ``tree``."""
    env = dict(os.environ, PYTHONPATH=str(tree), COLUMNS="120")
    start = time.perf_counter()
    proc = subprocess.Popen(
        [*(program or [sys.executable, "-m", "gputui"]), *args],
        cwd=tree,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if proc.stderr is not None:
        proc.stderr.close()
    cpu = usage.ru_utime + usage.ru_stime
    return wall, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status) == 0, cpu


def has_rows(tree: Path) -> bool:
    return "--rows" in (tree / "gputui" / "cli.py").read_text()


def sweep(args: argparse.Namespace) -> dict[str, Any]:
    trees = [
        (label, Path(path).resolve()) for label, _, path in (t.partition("=") for t in args.tree)
    ]
    if not trees:
        trees = [("gputui", ROOT)]
    results: dict[str, Any] = {}
    for size in args.sizes:
        entry: dict[str, Any] = {}
        for label, tree in trees:
            path = recording_for(args, tree, size)
            runs: dict[str, list[tuple[float, float, bool, float]]] = {
                "once": [],
                "json": [],
                "rows": [],
            }
            for _ in range(args.rounds):
                if "once" in args.skip:
                    break
                runs["once"].append(run_once(tree, ["--replay", str(path), "--once"]))
                runs["json"].append(run_once(tree, ["--replay", str(path), "--once", "--json"]))
                if has_rows(tree):
                    rows = ["--replay", str(path), "--once", "--rows", "50"]
                    runs["rows"].append(run_once(tree, rows))
            mine: dict[str, Any] = {}
            for name, items in runs.items():
                if items:
                    mine[f"{name}_wall_s"] = statistics.median(item[0] for item in items)
                    mine[f"{name}_rss_mb"] = statistics.median(item[1] for item in items)
                    mine[f"{name}_ok"] = all(item[2] for item in items)
                    mine[f"{name}_cpu_s"] = statistics.median(item[3] for item in items)
            mine["recording"] = path.name
            entry[label] = mine
        for _ in range(args.windows if "monitor" not in args.skip else 0):
            for label, tree in trees:  # in turns: the machine's drift hits both alike
                path = recording_for(args, tree, size)
                command = (
                    f"{shlex.quote(sys.executable)} -m gputui --replay {shlex.quote(str(path))} "
                    "--interval 1"
                )
                window = measure(command, label, args.warmup, args.seconds, tree)
                entry[label].setdefault("monitor_windows", []).append(
                    (window.cpu_pct_of_core, window.rss_mb)
                )
        for label, mine in entry.items():
            windows = mine.get("monitor_windows")
            if windows:
                mine["monitor_cpu_pct"] = statistics.median(c for c, _r in windows)
                mine["monitor_rss_mb"] = statistics.median(r for _c, r in windows)
            print(size, label, mine, file=sys.stderr)
        results[size] = entry
    return results


def host_cost(tree: Path, refreshes: int = 20) -> dict[str, Any]:
    """The live collector's host side on the processes this machine has: CPU per
    process and refresh of ``HostCollector.enrich`` (psutil), after a first refresh
    (which reads each process's command line and user once)."""
    code = f"""
import json, os, time
from gputui.host.collector import HostCollector
from gputui.snapshot.model import ProcessSnapshot
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
procs = tuple(ProcessSnapshot(pid=p, gpu_index=0, gpu_uuid="GPU-0", type="compute") for p in pids)
host = HostCollector()
host.enrich(procs)
start = time.process_time()
for _ in range({refreshes}):
    host.enrich(procs)
per = 1e6 * (time.process_time() - start) / {refreshes} / len(pids)
print(json.dumps({{"processes": len(pids), "us_per_process": per}}))
"""
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run(  # from the tree: `python -c` puts the working directory first
        [sys.executable, "-c", code], env=env, cwd=tree, capture_output=True, text=True, check=True
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def reference_loop_s(rounds: int = 5) -> float:
    """CPU seconds of a fixed pure-Python loop (the least of ``rounds``): how
    fast this machine runs Python now; a shared VM's speed drifts by tens of
    percent within an hour, and the monitor's CPU with it."""
    best = math.inf
    for _ in range(rounds):
        start = time.process_time()
        total = 0
        for i in range(1_000_000):
            total += i
        best = min(best, time.process_time() - start)
    return round(best, 4)


def start_sleepers(count: int, groups: int = 4) -> tuple[list[int], list[subprocess.Popen[bytes]]]:
    """``count`` real, idle processes (``sleep``), in ``groups`` process groups of
    their own (each under a shell that leads it): their pids and the shells."""
    per = -(-count // groups)
    shells = []
    for group in range(groups):
        n = min(per, count - group * per)
        if n <= 0:
            break
        loop = f"i=0; while [ $i -lt {n} ]; do sleep 3600 & i=$((i+1)); done; wait"
        shells.append(subprocess.Popen(["sh", "-c", loop], start_new_session=True))
    pids: list[int] = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        pids = [c.pid for s in shells for c in psutil.Process(s.pid).children()]
        if len(pids) >= count:
            break
        time.sleep(0.2)
    return pids[:count], shells


def stop_sleepers(shells: list[subprocess.Popen[bytes]]) -> None:
    for shell in shells:  # each shell leads the process group of its sleeps
        try:
            os.killpg(shell.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for shell in shells:
        shell.wait(30)


def collect_cost(tree: Path, program: list[str], refreshes: int = 5) -> dict[str, Any]:
    """The live source alone (``live_scale.py --collect``): CPU seconds of its first
    sample and of a later one, in ``tree``."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    command = [*program[:-1], "--collect", str(refreshes)]  # without the "--"
    out = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def live_cost(args: argparse.Namespace, trees: list[tuple[str, Path]]) -> dict[str, Any]:
    """The live monitor with NVML faked (``bench/live_scale.py``) on ``--live`` N real
    processes spread over 8 GPUs: ``--once`` (every row into a pipe) and the
    monitor at 1 s in tmux, each checkout in turns."""
    results: dict[str, Any] = {}
    driver = [sys.executable, str(ROOT / "bench" / "live_scale.py")]
    for count in args.live:
        pids, shells = start_sleepers(count)
        try:
            pid_file = args.cache / f"live-{count}.pids"
            pid_file.write_text("\n".join(map(str, pids)))
            program = [*driver, "--pids", str(pid_file), "--gpus", "8", "--"]
            entry: dict[str, Any] = {"processes": len(pids)}
            for label, tree in trees:
                collect = [collect_cost(tree, program) for _ in range(args.rounds)]
                runs = [run_once(tree, ["--once"], program) for _ in range(args.rounds)]
                entry[label] = {
                    "collect_first_s": statistics.median(c["first_s"] for c in collect),
                    "collect_later_s": statistics.median(c["later_s"] for c in collect),
                    "once_wall_s": statistics.median(r[0] for r in runs),
                    "once_cpu_s": statistics.median(r[3] for r in runs),
                    "once_rss_mb": statistics.median(r[1] for r in runs),
                    "once_ok": all(r[2] for r in runs),
                }
            for _ in range(args.windows if "monitor" not in args.skip else 0):
                for label, tree in trees:
                    command = " ".join(map(shlex.quote, [*program, "--interval", "1"]))
                    window = measure(command, label, args.warmup, args.seconds, tree)
                    entry[label].setdefault("monitor_windows", []).append(
                        (window.cpu_pct_of_core, window.rss_mb)
                    )
            for label, _tree in trees:
                windows = entry[label].get("monitor_windows")
                if windows:
                    entry[label]["monitor_cpu_pct"] = statistics.median(c for c, _r in windows)
                    entry[label]["monitor_rss_mb"] = statistics.median(r for _c, r in windows)
            print("live", count, entry, file=sys.stderr)
            results[str(count)] = entry
        finally:
            stop_sleepers(shells)
    return results


def ls_cost(tree: Path, hooked: int, rounds: int = 5) -> dict[str, Any]:
    """``gputui ls`` with ``hooked`` processes carrying the hook (``tests/jobs/step_job.py``,
    one step a second): wall time from start to exit, the median of ``rounds``."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    job = [sys.executable, str(tree / "tests" / "jobs" / "step_job.py"), "--install"]
    job += ["--steps", "0", "--step-sleep", "1"]
    with tempfile.TemporaryDirectory() as ready:
        procs = [
            subprocess.Popen(
                [*job, "--ready-file", f"{ready}/{i}"],
                env=env,
                cwd=tree,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for i in range(hooked)
        ]
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and len(os.listdir(ready)) < hooked:
                time.sleep(0.2)
            walls, listed = [], 0
            for _ in range(rounds):
                start = time.perf_counter()
                out = subprocess.run(
                    [sys.executable, "-m", "gputui", "ls", "--json"],
                    env=env,
                    cwd=tree,
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                walls.append(time.perf_counter() - start)
                listed = len(json.loads(out.stdout or "[]"))
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(10)
    return {"hooked": hooked, "listed": listed, "ls_wall_s": statistics.median(walls)}


def table(results: dict[str, Any]) -> str:
    lines = [
        "| processes | code | --once | --once --rows 50 | --once --json "
        "| monitor CPU | monitor RSS |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for size, entry in results.items():
        for label, m in entry.items():

            def cell(name: str, m: dict[str, Any] = m) -> str:
                if f"{name}_wall_s" not in m:
                    return ""
                ok = "" if m.get(f"{name}_ok", True) else " (failed)"
                cpu = f" (CPU {m[f'{name}_cpu_s']:.2f} s)" if f"{name}_cpu_s" in m else ""
                return f"{m[f'{name}_wall_s']:.2f} s{cpu}, {m[f'{name}_rss_mb']:.0f} MB{ok}"

            cpu = f"{m['monitor_cpu_pct']:.1f}%" if "monitor_cpu_pct" in m else ""
            rss = f"{m['monitor_rss_mb']:.0f} MB" if "monitor_rss_mb" in m else ""
            lines.append(
                f"| {size} | {label} | {cell('once')} | {cell('rows')} | {cell('json')} "
                f"| {cpu} | {rss} |"
            )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", nargs="*", default=["demo", *SIZES], choices=["demo", *SIZES])
    p.add_argument("--tree", action="append", default=[], metavar="LABEL=PATH")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--windows", type=int, default=1, help="monitor windows per checkout")
    p.add_argument("--warmup", type=float, default=8.0)
    p.add_argument("--skip", nargs="*", default=[], choices=["once", "monitor", "host"])
    p.add_argument("--cache", type=Path, default=Path("/tmp/gputui-scale"))
    p.add_argument(
        "--live",
        nargs="*",
        type=int,
        default=[],
        metavar="N",
        help="the live monitor, NVML faked, on N real processes over 8 GPUs",
    )
    p.add_argument("--ls", nargs="*", type=int, default=[], metavar="N", help="ls with N hooked")
    p.add_argument(
        "--format",
        choices=["own", "full"],
        default="own",
        help="own: each checkout plays the recording it writes (compact from the size its "
        "gputui writes so); full: every checkout the full recording",
    )
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TERM", "xterm-256color")
    load_before = os.getloadavg()
    speed_before = reference_loop_s()
    results = sweep(args) if args.sizes else {}
    if args.live:
        trees = [
            (label, Path(path).resolve())
            for label, _, path in (t.partition("=") for t in args.tree or ["gputui=" + str(ROOT)])
        ]
        results["live"] = live_cost(args, trees)
    for hooked in args.ls:
        results.setdefault("ls", []).append(ls_cost(ROOT, hooked))
    if "host" not in args.skip:
        for label, _, path in (t.partition("=") for t in args.tree or ["gputui=" + str(ROOT)]):
            results.setdefault("host", {})[label] = host_cost(Path(path).resolve())
    doc = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load_before": load_before,
            "load_after": os.getloadavg(),
            # the VM's speed: the same CPU-bound loop before and after (its run
            # to run spread explains that of the monitors' figures across runs)
            "reference_loop_s": [speed_before, reference_loop_s()],
        },
        "results": results,
    }
    print(table({k: v for k, v in results.items() if k not in ("host", "ls", "live")}))
    for extra in ("host", "ls", "live"):
        if extra in results:
            print(json.dumps(results[extra]))
    print(json.dumps(doc["machine"]))
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
