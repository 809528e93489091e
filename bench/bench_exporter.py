"""What an exporter costs: CPU per scrape, and CPU in the background between scrapes.

    .venv/bin/python bench/bench_exporter.py replay            # here: 8 GPUs x 40 processes
    python3 bench/bench_exporter.py compare \\
        --load "python3 bench/jobs/gpu_load.py --plan bf16mm:900"   # on a GPU

Each exporter runs as its own process.  Its CPU time (user + system, all threads,
from /proc/PID/stat) is read around a quiet period (background: the sampling
loop alone) and around a burst of scrapes made as Prometheus makes them (its
Accept and Accept-Encoding headers, one kept-alive connection); CPU per scrape is
the burst's CPU less the background's share of the burst's duration.

``replay``: ``gputui exporter --replay`` of a synthetic 8-GPU, 40-process
recording, with and without ``--processes``; the baseline in the same run is
``prometheus_client.generate_latest`` rendering the very same families in this
process (what the exporter would cost on prometheus_client's exposition).

``compare``: ``gputui exporter`` and ``nvitop-exporter`` (PyPI) live on this
machine's GPUs, the same interval (1 s), one after the other, same scrapes, on
one kept-alive connection and then with a new connection per scrape.

``connections``: ``gputui exporter --demo`` of each ``--tree NAME=DIR`` in turn
(ABAB, then BABA), both connection modes: a checkout against another in one run.

``prometheus``: ``gputui exporter --demo`` of every ``--tree`` at once, scraped
every second by one real Prometheus (Debian's ``prometheus``) for ``--duration``
seconds; each exporter's CPU over the same window.

    .venv/bin/python bench/bench_exporter.py connections --tree before=../base --tree after=.
    .venv/bin/python bench/bench_exporter.py prometheus --tree before=../base --tree after=.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

#: what Prometheus 2.x sends with every scrape
PROM_HEADERS = {
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
    "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
    "User-Agent": "Prometheus/2.42.0",
}
TICK = os.sysconf("SC_CLK_TCK")
#: both ways a client scrapes: one kept-alive connection, a new connection each time
BOTH = ("kept", "new")


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace")[-500:] if proc.stderr else ""
            raise SystemExit(f"exporter exited with {proc.returncode}: {err}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/metrics")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"exporter on port {port} did not answer in {timeout_s} s")


def scrape(
    port: int, count: int, pause_s: float, new_connection: bool = False
) -> tuple[list[float], int, int]:
    """``count`` scrapes; returns wall times, the body size and the sample count.
    Over one kept-alive connection (as Prometheus scrapes), or with
    ``new_connection`` a connection of its own for each (curl, some agents)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    walls = []
    body = b""
    for _ in range(count):
        start = time.perf_counter()
        if new_connection:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/metrics", headers=PROM_HEADERS)
        response = conn.getresponse()
        body = response.read()
        if new_connection:
            conn.close()
        walls.append(time.perf_counter() - start)
        if pause_s:
            time.sleep(pause_s)
    conn.close()
    if body[:2] == b"\x1f\x8b":
        import gzip

        body = gzip.decompress(body)
    lines = [ln for ln in body.decode().splitlines() if ln and not ln.startswith("#")]
    return walls, len(body), len(lines)


def measure(
    name: str,
    cmd: list[str],
    port: int,
    quiet_s: float,
    scrapes: int,
    pause_s: float,
    modes: tuple[str, ...] = ("kept",),
    cwd: Path = ROOT,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Background CPU over ``quiet_s``, then ``scrapes`` scrapes in each of
    ``modes`` ("kept": one kept-alive connection; "new": a connection a scrape)."""
    proc = subprocess.Popen(
        cmd, cwd=str(cwd), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    row: dict[str, Any] = {"exporter": name, "scrapes": scrapes, "quiet_s": quiet_s}
    try:
        wait_ready(port, proc)
        time.sleep(3.0)  # past start-up: caches filled, first samples taken
        c0, t0 = cpu_s(proc.pid), time.monotonic()
        time.sleep(quiet_s)
        c1, t1 = cpu_s(proc.pid), time.monotonic()
        background = (c1 - c0) / (t1 - t0)
        row["background_cpu_pct"] = background * 100
        row["rss_mb"] = rss_mb(proc.pid)
        for mode in modes:
            c1, t1 = cpu_s(proc.pid), time.monotonic()
            walls, size, series = scrape(port, scrapes, pause_s, new_connection=mode == "new")
            c2, t2 = cpu_s(proc.pid), time.monotonic()
            suffix = "" if mode == "kept" else "_new_connection"
            row[f"cpu_per_scrape_ms{suffix}"] = (
                ((c2 - c1) - background * (t2 - t1)) / scrapes * 1000
            )
            row[f"wall_per_scrape_ms_median{suffix}"] = statistics.median(walls) * 1000
            row["series"], row["body_bytes"] = series, size
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    return row


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def gputui_cmd(port: int, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "gputui",
        "exporter",
        "--listen",
        "127.0.0.1",
        "--port",
        str(port),
        *extra,
    ]


def render_baseline(recording: Path, processes: bool, rounds: int) -> dict[str, float]:
    """Our families rendered by our exposition and by prometheus_client, in-process."""
    from prometheus_client import CollectorRegistry, generate_latest

    from gputui.exporter.collector import ExporterCollector, ExporterOptions
    from gputui.exporter.promclient import PrometheusClientCollector
    from gputui.recording.replay import ReplaySource

    source = ReplaySource.from_file(recording)
    collector = ExporterCollector(
        ExporterOptions(hostname="bench", processes=processes), True, None
    )
    for _ in range(5):
        collector.on_snapshot(source.sample())
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PrometheusClientCollector(collector))  # type: ignore[arg-type]
    out = {}
    for label, fn in (
        ("gputui", collector.render),
        ("prometheus_client", lambda: generate_latest(registry)),
    ):
        fn()
        start = time.process_time()
        for _ in range(rounds):
            fn()
        out[label] = (time.process_time() - start) / rounds * 1000
    return out


def cmd_replay(args: argparse.Namespace) -> list[dict[str, Any]]:
    from synthetic import make_snapshots, write_recording

    tmp = Path(tempfile.mkdtemp(prefix="bench-exp-"))
    try:
        recording = write_recording(
            tmp / "r.jsonl.gz", make_snapshots(n_gpus=8, n_procs=40, n_steps=60), interval_s=1.0
        )
        rows = []
        for processes in (False, True):
            port = free_port()
            extra = ["--replay", str(recording), "--interval", "1"] + (
                ["--processes"] if processes else []
            )
            row = measure(
                "gputui" + (" --processes" if processes else ""),
                gputui_cmd(port, *extra),
                port,
                args.quiet,
                args.scrapes,
                args.pause,
            )
            row.update(
                {f"render_ms_{k}": v for k, v in render_baseline(recording, processes, 300).items()}
            )
            rows.append(row)
        return rows
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def cmd_compare(args: argparse.Namespace) -> list[dict[str, Any]]:
    load = None
    if args.load:
        # one busy GPU process for the whole comparison, as in the reference figures
        load = subprocess.Popen(args.load, shell=True, cwd=str(ROOT), stdout=subprocess.DEVNULL)
        time.sleep(10)
    try:
        return _compare_rounds(args)
    finally:
        if load is not None:
            load.terminate()
            load.wait(30)


def _compare_rounds(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for _ in range(args.rounds):
        port = free_port()
        rows.append(
            measure(
                "gputui",
                gputui_cmd(port, "--interval", "1"),
                port,
                args.quiet,
                args.scrapes,
                args.pause,
                modes=BOTH,
            )
        )
        port = free_port()
        nvitop = shutil.which("nvitop-exporter")
        cmd = ([nvitop] if nvitop else [sys.executable, "-m", "nvitop_exporter"]) + [
            "--bind-address",
            "127.0.0.1",
            "--port",
            str(port),
            "--interval",
            "1",
        ]
        rows.append(
            measure("nvitop-exporter", cmd, port, args.quiet, args.scrapes, args.pause, modes=BOTH)
        )
    return rows


def tree_env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree)
    return env


def cmd_connections(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each tree's ``exporter --demo`` in turn, both connection modes, ``--rounds`` rounds."""
    rows = []
    for i in range(args.rounds):
        for name, tree in args.tree if i % 2 == 0 else list(reversed(args.tree)):
            port = free_port()
            row = measure(
                name,
                gputui_cmd(port, "--demo", "--interval", "1"),
                port,
                args.quiet,
                args.scrapes,
                args.pause,
                modes=BOTH,
                cwd=tree,
                env=tree_env(tree),
            )
            rows.append(row)
    return rows


def cmd_prometheus(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every tree's ``exporter --demo`` at once, scraped by one real Prometheus every
    second for ``--duration`` seconds: each exporter's CPU over the same window."""
    sys.path.insert(0, str(ROOT / "tests" / "helpers"))
    from promutil import prometheus

    procs = []
    targets = []
    tmp = Path(tempfile.mkdtemp(prefix="bench-prom-"))
    try:
        for name, tree in args.tree:
            port = free_port()
            cmd = gputui_cmd(port, "--demo", "--interval", "1", "--hostname", name)
            procs.append(
                subprocess.Popen(
                    cmd,
                    cwd=str(tree),
                    env=tree_env(tree),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
            )
            wait_ready(port, procs[-1])
            targets.append(f"127.0.0.1:{port}")
        with prometheus(targets, tmp, scrape_interval="1s") as url:
            time.sleep(5.0)  # the first scrapes made
            start = [cpu_s(p.pid) for p in procs]
            t0 = time.monotonic()
            time.sleep(args.duration)
            elapsed = time.monotonic() - t0
            end = [cpu_s(p.pid) for p in procs]
            up = http_json(f"{url}/api/v1/query?query=up")
        rows = []
        for (name, _tree), proc, a, b in zip(args.tree, procs, start, end, strict=True):
            rows.append(
                {
                    "exporter": name,
                    "window_s": elapsed,
                    "cpu_s": b - a,
                    "cpu_pct": (b - a) / elapsed * 100,
                    "rss_mb": rss_mb(proc.pid),
                    "up": up,
                }
            )
        return rows
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


def http_json(url: str) -> Any:
    conn = http.client.HTTPConnection(url.split("/")[2], timeout=10)
    conn.request("GET", "/" + url.split("/", 3)[3])
    return json.loads(conn.getresponse().read())


TREE_HELP = "connections, prometheus: NAME=DIR, a checkout to run (repeat; default: this one)"


def tree_arg(text: str) -> tuple[str, Path]:
    name, _, path = text.partition("=")
    if not path:
        raise argparse.ArgumentTypeError("give NAME=DIR")
    return name, Path(path).resolve()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", choices=["replay", "compare", "connections", "prometheus"])
    parser.add_argument("--quiet", type=float, default=20.0, help="seconds without scrapes")
    parser.add_argument("--scrapes", type=int, default=2000)
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between scrapes")
    parser.add_argument("--rounds", type=int, default=2, help="compare: alternating rounds")
    parser.add_argument("--load", metavar="CMD", help="compare: a GPU job to run meanwhile")
    parser.add_argument("--tree", type=tree_arg, action="append", help=TREE_HELP)
    parser.add_argument("--duration", type=float, default=300.0, help="prometheus: seconds")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = parser.parse_args()
    args.tree = args.tree or [("gputui", ROOT)]
    load = os.getloadavg()
    modes = {"replay": cmd_replay, "compare": cmd_compare}
    modes.update(connections=cmd_connections, prometheus=cmd_prometheus)
    rows = modes[args.mode](args)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(f"{os.uname().nodename}  {time.strftime('%Y-%m-%d %H:%M')}  {os.cpu_count()} CPUs")
    print(f"load average: {load} at the start, {os.getloadavg()} at the end")
    if args.mode == "prometheus":
        for r in rows:
            print(
                f"{r['exporter']:<22} CPU {r['cpu_s']:.2f} s over {r['window_s']:.0f} s "
                f"({r['cpu_pct']:.3f}% of a core), RSS {r['rss_mb']:.1f} MB"
            )
        return 0
    head = f"{'exporter':<22}{'series':>7}{'CPU/scrape':>12}{'wall p50':>10}{'background':>12}"
    print(head)
    for r in rows:
        print(
            f"{r['exporter']:<22}{r['series']:>7}{r['cpu_per_scrape_ms']:>10.3f}ms"
            f"{r['wall_per_scrape_ms_median']:>8.2f}ms{r['background_cpu_pct']:>11.2f}%"
        )
        if "cpu_per_scrape_ms_new_connection" in r:
            print(
                f"{'  new connection each':<22}{'':>7}"
                f"{r['cpu_per_scrape_ms_new_connection']:>10.3f}ms"
                f"{r['wall_per_scrape_ms_median_new_connection']:>8.2f}ms"
                f"{'RSS':>6}{r['rss_mb']:>5.1f}MB"
            )
        if "render_ms_gputui" in r:
            print(
                f"{'':<22}render in-process: gputui {r['render_ms_gputui']:.3f} ms, "
                f"prometheus_client {r['render_ms_prometheus_client']:.3f} ms"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
