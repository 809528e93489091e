"""The monitor's cost against the number of GPU processes: a sweep.

    python bench/bench_scale.py --out /tmp/scale.json
    python bench/bench_scale.py --tree before=/path/to/main --tree after=. --out /tmp/scale.json

For each size (``--sizes``, default 100, 1,000 and 2,000 processes on 8 GPUs,
and 20,000 on one GPU), a synthetic recording is made once by
``bench/scale_recording.py`` (a tenth of the processes change their numbers
each second, 0.2% are replaced), and the embedded demo (one GPU, one process)
is measured too.  For each checkout (``--tree LABEL=PATH``, this one by
default), in turns:

- ``once``: ``gputui --replay FILE --once`` into a pipe (every row), with
  ``--rows 50`` (where the checkout has it), and ``--json``: wall time from
  start to exit and the peak RSS (``wait4``); the median of ``--rounds``;
- ``monitor``: ``gputui --replay FILE --interval 1`` in a 120x40 tmux pane
  (``bench/bench_tui.py``): the process tree's CPU time over ``--seconds``
  after ``--warmup`` (the recording is counted and the first snapshots drawn
  meanwhile), as % of one core, i.e. milliseconds of CPU per 1 s refresh / 10,
  and its RSS at the end of the window.

Prints a table and writes JSON (machine, date, load average before and after).
Needs tmux for ``monitor``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_tui import measure
from scale_recording import write_recording

ROOT = Path(__file__).resolve().parent.parent
#: (label, processes, GPUs)
SIZES = {"100": (100, 8), "1000": (1000, 8), "2000": (2000, 8), "20000": (20000, 1)}


def recording(cache: Path, size: str) -> Path:
    if size == "demo":
        return ROOT / "gputui" / "data" / "demo.jsonl.gz"
    processes, gpus = SIZES[size]
    path = cache / f"scale-{processes}x{gpus}.jsonl.gz"
    if not path.exists():
        print(f"making {path}", file=sys.stderr)
        write_recording(path, processes, gpus)
    return path


def run_once(tree: Path, args: list[str]) -> tuple[float, float, bool]:
    """Wall seconds, peak RSS (MB) and success of ``gputui ARGS`` from ``tree``."""
    env = dict(os.environ, PYTHONPATH=str(tree), COLUMNS="120")
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputui", *args],
        cwd=tree,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if proc.stderr is not None:
        proc.stderr.close()
    return wall, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status) == 0


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
        path = recording(args.cache, size)
        entry: dict[str, Any] = {}
        for label, tree in trees:
            runs: dict[str, list[tuple[float, float, bool]]] = {"once": [], "json": [], "rows": []}
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
                    mine[f"{name}_wall_s"] = statistics.median(w for w, _r, _ok in items)
                    mine[f"{name}_rss_mb"] = statistics.median(r for _w, r, _ok in items)
                    mine[f"{name}_ok"] = all(ok for _w, _r, ok in items)
            if "monitor" not in args.skip:
                command = (
                    f"{shlex.quote(sys.executable)} -m gputui --replay {shlex.quote(str(path))} "
                    "--interval 1"
                )
                window = measure(command, label, args.warmup, args.seconds, tree)
                mine["monitor_cpu_pct"] = window.cpu_pct_of_core
                mine["monitor_rss_mb"] = window.rss_mb
            entry[label] = mine
            print(size, label, mine, file=sys.stderr)
        results[size] = entry
    return results


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
                return f"{m[f'{name}_wall_s']:.2f} s, {m[f'{name}_rss_mb']:.0f} MB{ok}"

            cpu = f"{m['monitor_cpu_pct']:.1f}%" if "monitor_cpu_pct" in m else ""
            rss = f"{m['monitor_rss_mb']:.0f} MB" if "monitor_rss_mb" in m else ""
            lines.append(
                f"| {size} | {label} | {cell('once')} | {cell('rows')} | {cell('json')} "
                f"| {cpu} | {rss} |"
            )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", nargs="+", default=["demo", *SIZES], choices=["demo", *SIZES])
    p.add_argument("--tree", action="append", default=[], metavar="LABEL=PATH")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--warmup", type=float, default=8.0)
    p.add_argument("--skip", nargs="*", default=[], choices=["once", "monitor"])
    p.add_argument("--cache", type=Path, default=Path("/tmp/gputui-scale"))
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TERM", "xterm-256color")
    load_before = os.getloadavg()
    results = sweep(args)
    doc = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load_before": load_before,
            "load_after": os.getloadavg(),
        },
        "results": results,
    }
    print(table(results))
    print(json.dumps(doc["machine"]))
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
