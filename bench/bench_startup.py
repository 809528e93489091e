"""What a one-shot command costs from process start to exit: CPU, wall and peak RSS.

    .venv/bin/python bench/bench_startup.py --tree before=../gputui-base --tree after=. \\
        --case once --runs 20 --pyc cached --out startup.json

Each run is a fresh ``python -m gputui ARGS`` with the tree on ``PYTHONPATH``; its
CPU time (user + system) and peak RSS come from the kernel's accounting of the
child (``os.wait4``; the peak RSS from GNU time, which starts it from a small
process).  The trees take turns within every round (ABAB, then BABA:
neither always runs first), so load from other processes falls on all of them;
ratios are against the first tree, over the same rounds.

``--pyc cached`` compiles each tree's byte code first (what an installed package
has); ``--pyc none`` removes the tree's byte code and runs with
``PYTHONDONTWRITEBYTECODE=1``, so every run compiles the package's modules it
imports (a checkout run in place without write access to it).  The standard
library and site-packages keep their own byte code in both.

``--imports`` prints, for each case and tree, the package's and the other modules
that the command loads (one run each, not timed).
"""

from __future__ import annotations

import argparse
import compileall
import http.server
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from bench_exporter import free_port, tree_arg, wait_ready  # noqa: E402

#: a small trace that analyze reads in full (tests keep it)
TRACE = ROOT / "tests" / "data" / "h100_fp32_matmul_flops.pt.trace.json.gz"

#: case -> the command's arguments; "{trace}" and "{prom}" filled in at run time
CASES: dict[str, list[str]] = {
    # the floor: the interpreter and its site packages, no gputui
    "python": ["-c", "pass"],
    "once": ["--demo", "--once"],
    "json": ["--demo", "--once", "--json"],
    "help": ["--help"],
    "attach-help": ["attach", "--help"],
    "attach-demo-once": ["attach", "--demo", "--once"],
    "analyze": ["analyze", "{trace}"],
    "ls": ["ls"],
    "exporter-help": ["exporter", "--help"],
    # --imports only: served until the first scrape; live (no GPU here: job series only)
    "exporter": ["exporter"],
    "cluster-once": ["cluster", "--once", "--prometheus", "{prom}"],
}


def machine() -> dict[str, Any]:
    return {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "loadavg": os.getloadavg(),
    }


class _EmptyPrometheus(http.server.BaseHTTPRequestHandler):
    """Answers every query with an empty vector: a cluster with no nodes yet."""

    protocol_version = "HTTP/1.1"
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}})

    def do_POST(self) -> None:  # the name http.server dispatches to
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        data = self.body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST

    def log_message(self, *args: Any) -> None:
        pass


def empty_prometheus() -> str:
    """The URL of an ``_EmptyPrometheus`` served on loopback by a thread of this process."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _EmptyPrometheus)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def argv(case: str, prom: str) -> list[str]:
    return [a.format(trace=TRACE, prom=prom) for a in CASES[case]]


def env_for(tree: Path, pyc: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree)
    env["COLUMNS"] = "120"
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if pyc == "none":
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def prepare(tree: Path, pyc: str) -> None:
    package = tree / "gputui"
    if pyc == "cached":
        compileall.compile_dir(str(package), quiet=1)
    else:
        for cache in package.rglob("__pycache__"):
            shutil.rmtree(cache, ignore_errors=True)


#: GNU time, when installed, starts the command from a small process: a child's peak
#: RSS counts the memory of the process it was forked from, this script's otherwise
GNU_TIME = shutil.which("time") or ("/usr/bin/time" if os.path.exists("/usr/bin/time") else None)


def run_once(tree: Path, args: list[str], pyc: str, cwd: str) -> dict[str, float]:
    command = [sys.executable, *(args if args[:1] == ["-c"] else ["-m", "gputui", *args])]
    with tempfile.NamedTemporaryFile("r") as rss:
        if GNU_TIME:
            command = [GNU_TIME, "-q", "-f", "%M", "-o", rss.name, *command]
        start = time.perf_counter()
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            env=env_for(tree, pyc),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        text = rss.read().strip()
    return {
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "wall_s": wall,
        "rss_kb": float(text.splitlines()[-1]) if GNU_TIME and text else float("nan"),
        "rc": float(proc.returncode),
    }


def loaded(tree: Path, args: list[str], pyc: str, cwd: str) -> list[str]:
    """The modules the command imports (``-X importtime``), in order.  A serving
    command (the exporter) is stopped once it has answered one scrape."""
    serve = args == ["exporter"]
    port = free_port()
    if serve:
        args = [*args, "--listen", "127.0.0.1", "--port", str(port)]
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-X", "importtime", "-m", "gputui", *args],
            cwd=cwd,
            env=env_for(tree, pyc),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        if serve:
            wait_ready(port, proc)
            proc.terminate()
        proc.wait(120)
        err.seek(0)
        text = err.read().decode(errors="replace")
    names = []
    for line in text.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.rsplit("|", 1)[1].strip()
            if name != "package":  # the header line
                names.append(name)
    return names


def bench(trees: list[tuple[str, Path]], case: str, runs: int, pyc: str) -> dict[str, Any]:
    args = argv(case, empty_prometheus())
    cwd = tempfile.mkdtemp(prefix="bench-startup-")
    try:
        for _, tree in trees:
            prepare(tree, pyc)
            run_once(tree, args, pyc, cwd)  # warm the page cache
        samples: dict[str, list[dict[str, float]]] = {name: [] for name, _ in trees}
        for i in range(runs):
            order = trees if i % 2 == 0 else list(reversed(trees))
            for name, tree in order:
                samples[name].append(run_once(tree, args, pyc, cwd))
    finally:
        shutil.rmtree(cwd, ignore_errors=True)
    base = trees[0][0]
    out: dict[str, Any] = {"case": case, "argv": args, "pyc": pyc, "runs": runs, "trees": {}}
    for name, tree in trees:
        rows = samples[name]
        cpu = [r["cpu_s"] for r in rows]
        paired = [r["cpu_s"] / b["cpu_s"] for r, b in zip(rows, samples[base], strict=True)]
        out["trees"][name] = {
            "path": str(tree),
            "exit_codes": sorted({int(r["rc"]) for r in rows}),
            "cpu_ms_median": statistics.median(cpu) * 1000,
            "cpu_ms_min": min(cpu) * 1000,
            "wall_ms_median": statistics.median(r["wall_s"] for r in rows) * 1000,
            "rss_mb_median": statistics.median(r["rss_kb"] for r in rows) / 1024,
            "cpu_ratio_of_medians": statistics.median(cpu)
            / statistics.median([b["cpu_s"] for b in samples[base]]),
            "cpu_ratio_paired_median": statistics.median(paired),
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tree", type=tree_arg, action="append", help="NAME=DIR (repeat)")
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="(repeat)")
    parser.add_argument("--runs", type=int, default=20, help="rounds; each tree once a round")
    parser.add_argument("--pyc", choices=["cached", "none"], default="cached")
    parser.add_argument("--imports", action="store_true", help="list what each case loads")
    parser.add_argument("--out", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args()
    trees = args.tree or [("after", ROOT)]
    cases = args.case or ["once"]
    result: dict[str, Any] = {"machine": machine(), "results": []}
    if args.imports:
        cwd = tempfile.mkdtemp(prefix="bench-startup-")
        prom = empty_prometheus()
        for case in cases:
            for name, tree in trees:
                mods = loaded(tree, argv(case, prom), args.pyc, cwd)
                ours = [m for m in mods if m.startswith("gputui")]
                print(f"{case} [{name}]: {len(mods)} modules, {len(ours)} of gputui")
                print("  " + " ".join(ours))
                result["results"].append({"case": case, "tree": name, "modules": mods})
        shutil.rmtree(cwd, ignore_errors=True)
    else:
        m = result["machine"]
        print(f"{m['host']}  {m['date']}  {m['cpus']} CPUs  Python {m['python']}")
        print(f"load average at start: {' '.join(f'{x:.2f}' for x in m['loadavg'])}")
        for case in cases:
            res = bench(trees, case, args.runs, args.pyc)
            result["results"].append(res)
            shown = " ".join(res["argv"])
            shown = f"python {shown}" if case == "python" else f"gputui {shown}"
            print(f"\n{case}: {shown}  ({args.runs} rounds, pyc {args.pyc})")
            print(
                f"{'tree':<10}{'CPU med':>10}{'CPU min':>10}{'wall med':>10}{'RSS':>9}"
                f"{'ratio':>8}{'paired':>8}"
            )
            for name, row in res["trees"].items():
                print(
                    f"{name:<10}{row['cpu_ms_median']:>8.1f}ms{row['cpu_ms_min']:>8.1f}ms"
                    f"{row['wall_ms_median']:>8.1f}ms{row['rss_mb_median']:>7.1f}MB"
                    f"{row['cpu_ratio_of_medians']:>8.2f}{row['cpu_ratio_paired_median']:>8.2f}"
                    + ("" if row["exit_codes"] == [0] else f"  exit {row['exit_codes']}")
                )
        result["machine"]["loadavg_end"] = os.getloadavg()
        print(f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
