"""The cluster view on a large cluster: 64 nodes x 8 GPUs, 8 jobs of 8 ranks.

    .venv/bin/python bench/bench_cluster.py [--nodes 64] [--viewer-seconds 60]

1. Writes ten minutes of history in the OpenMetrics text format, with the series
   and labels ``gputui exporter`` serves (plus the ``instance``/``job`` labels and
   ``up`` that Prometheus adds), and backfills it with
   ``promtool tsdb create-blocks-from openmetrics``.
2. Starts Prometheus on that data (loopback, nothing to scrape).
3. Times ``ClusterSource.fetch`` (every query of one refresh, with the first
   node's GPU history) evaluated at the end of the history, 30 times.
4. Runs ``gputui cluster --interval 1 --at END`` in tmux (a real terminal) for
   ``--viewer-seconds`` and reads its CPU time from /proc, and checks that the
   screen lists the nodes.

Needs Debian's ``prometheus`` (prometheus, promtool) and tmux.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from promutil import prometheus  # noqa: E402

STEP_S = 15
HISTORY_S = 600
REASONS = ("sw_power_cap", "sw_thermal_slowdown", "hw_slowdown", "hw_thermal_slowdown")
PHASES = ("data", "forward", "backward", "optimizer")


def write_openmetrics(path: Path, nodes: int, gpus: int, end_s: int, jobs: int, ranks: int) -> int:
    rng = random.Random(7)
    times = list(range(end_s - HISTORY_S, end_s - STEP_S + 1, STEP_S))
    lines = 0
    with path.open("w") as out:

        def family(name: str, kind: str) -> None:
            out.write(f"# TYPE {name} {kind}\n")

        def series(name: str, labels: str, values: list[float]) -> None:
            # Prometheus spreads its targets over the scrape interval: node n is
            # scraped n/nodes of an interval after node 0
            a, b = labels.split('instance="10.0.', 1)[1].split(":", 1)[0].split(".")
            offset = (int(a) * 256 + int(b)) * STEP_S / nodes
            nonlocal lines
            out.writelines(
                f"{name}{{{labels}}} {v:.6g} {t + offset:.3f}\n"
                for t, v in zip(times, values, strict=True)
            )
            lines += len(values)

        def host_labels(n: int) -> str:
            target = f"10.0.{n // 256}.{n % 256}:9445"
            return f'instance="{target}",job="gputui",hostname="gpu-node-{n:03d}"'

        def gpu_labels(n: int, g: int) -> str:
            return (
                f'{host_labels(n)},gpu="{g}",UUID="GPU-{n:04x}{g:04x}-0000-4000-8000-000000000000",'
                f'pci_bus_id="00000000:{0x18 + g * 0x10:02X}:00.0",device="nvidia{g}",'
                'modelName="NVIDIA H100 80GB HBM3"'
            )

        load = {(n, g): rng.uniform(0.2, 1.0) for n in range(nodes) for g in range(gpus)}
        family("up", "gauge")
        for n in range(nodes):
            series(
                "up", f'instance="10.0.{n // 256}.{n % 256}:9445",job="gputui"', [1.0] * len(times)
            )
        family("gputui_exporter_build_info", "gauge")
        for n in range(nodes):
            series(
                "gputui_exporter_build_info",
                f'{host_labels(n)},version="0.1.0"',
                [1.0] * len(times),
            )
        gauges = {
            "gputui_gpu_utilization_ratio": lambda x: min(1.0, x + rng.uniform(-0.05, 0.05)),
            "gputui_gpu_sm_active_ratio": lambda x: x * rng.uniform(0.85, 0.95),
            "gputui_gpu_tensor_active_ratio": lambda x: x * rng.uniform(0.4, 0.6),
            "gputui_gpu_dram_active_ratio": lambda x: x * rng.uniform(0.3, 0.5),
            "gputui_gpu_power_watts": lambda x: 100 + 600 * x + rng.uniform(-5, 5),
            "gputui_gpu_memory_used_bytes": lambda x: float(int(x * 80e9 + rng.uniform(0, 1e8))),
            "gputui_gpu_memory_total_bytes": lambda x: 85520809984.0,
            "gputui_gpu_temperature_celsius": lambda x: 35 + 40 * x + rng.uniform(-1, 1),
        }
        for name, fn in gauges.items():
            family(name, "gauge")
            for (n, g), x in load.items():
                series(name, gpu_labels(n, g), [fn(x) for _ in times])
        family("gputui_gpu_clock_event_seconds", "counter")
        for (n, g), x in load.items():
            for reason in REASONS:
                held = STEP_S if reason == "sw_power_cap" and x > 0.9 else 0
                series(
                    "gputui_gpu_clock_event_seconds_total",
                    f'{gpu_labels(n, g)},reason="{reason}"',
                    [float(held * i) for i in range(len(times))],
                )
        # jobs: job j runs on nodes j*ranks/gpus ..., one rank per GPU; rank 3 straggles
        train = [
            (j, r, (j * ranks + r) // gpus % nodes, (j * ranks + r) % gpus)
            for j in range(jobs)
            for r in range(ranks)
        ]

        def rank_labels(j: int, r: int, n: int) -> str:
            return f'{host_labels(n)},job_id="run-{j:02d}",rank="{r}"'

        family("gputui_train_info", "gauge")
        for j, r, n, g in train:
            series(
                "gputui_train_info",
                f'{rank_labels(j, r, n)},local_rank="{g}",world_size="{ranks}",'
                f'pid="{4000 + r}",gpu="{g}"',
                [1.0] * len(times),
            )
        steps_per_s = 10.0
        family("gputui_train_steps", "counter")
        for j, r, n, _ in train:
            series(
                "gputui_train_steps_total",
                rank_labels(j, r, n),
                [steps_per_s * STEP_S * i for i in range(len(times))],
            )
        family("gputui_train_step_duration_seconds", "summary")
        for j, r, n, _ in train:
            series(
                "gputui_train_step_duration_seconds_sum",
                rank_labels(j, r, n),
                [0.1 * steps_per_s * STEP_S * i for i in range(len(times))],
            )
            series(
                "gputui_train_step_duration_seconds_count",
                rank_labels(j, r, n),
                [steps_per_s * STEP_S * i for i in range(len(times))],
            )
        family("gputui_train_phase_seconds", "counter")
        for j, r, n, _ in train:
            slow = 0.02 if r == 3 else 0.0
            per_step = {
                "data": 0.01,
                "forward": 0.03 + slow,
                "backward": 0.05 - slow,
                "optimizer": 0.01,
            }
            for phase in PHASES:
                series(
                    "gputui_train_phase_seconds_total",
                    f'{rank_labels(j, r, n)},phase="{phase}"',
                    [per_step[phase] * steps_per_s * STEP_S * i for i in range(len(times))],
                )
        family("gputui_train_last_step_timestamp_seconds", "gauge")
        for j, r, n, _ in train:
            series(
                "gputui_train_last_step_timestamp_seconds",
                rank_labels(j, r, n),
                [float(t) for t in times],
            )
        out.write("# EOF\n")
    return lines


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--fetches", type=int, default=30)
    parser.add_argument("--viewer-seconds", type=float, default=60.0)
    parser.add_argument("--keep", metavar="DIR", help="keep the backfilled data here")
    args = parser.parse_args()
    for tool in ("prometheus", "promtool", "tmux"):
        if shutil.which(tool) is None:
            print(f"{tool} is not installed", file=sys.stderr)
            return 2
    tmp = Path(args.keep or tempfile.mkdtemp(prefix="bench-cluster-"))
    tmp.mkdir(parents=True, exist_ok=True)
    end = int(time.time()) - 120
    om = tmp / "history.om"
    t0 = time.perf_counter()
    samples = write_openmetrics(om, args.nodes, args.gpus, end, args.jobs, args.ranks)
    data = tmp / "prom-data"
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    om.unlink()
    print(f"backfilled {samples} samples in {time.perf_counter() - t0:.0f} s")
    with prometheus([], tmp) as url:
        from gputui.cluster.client import PrometheusClient
        from gputui.cluster.source import ClusterSource

        source = ClusterSource(PrometheusClient(url, timeout_s=30), clock=lambda: float(end))
        first = source.fetch(["gpu-node-000"])  # the TSDB loads the blocks' chunks
        latencies = []
        for _ in range(args.fetches):
            snap = source.fetch(["gpu-node-000"])
            latencies.append(snap.latency_s)
        source.close()
        gpus = sum(n.gpu_count for n in snap.nodes)
        ranks = sum(len(j.ranks) for j in snap.jobs)
        print(
            f"refresh ({len(snap.nodes)} nodes, {gpus} GPUs, {len(snap.jobs)} jobs, {ranks} ranks, "
            f"history of 1 node): first {first.latency_s * 1000:.0f} ms, then median "
            f"{statistics.median(latencies) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms"
        )
        session = f"gputui-bench-{os.getpid()}"
        cmd = f"{sys.executable} -m gputui cluster --prometheus {url} --interval 1 --at {end}"
        subprocess.run(
            ["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "50", cmd],
            check=True,
            cwd=str(ROOT),
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        try:
            pid = int(
                subprocess.run(
                    ["tmux", "list-panes", "-t", session, "-F", "#{pane_pid}"],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout.split()[0]
            )
            time.sleep(8)  # start-up and the first refreshes
            c0, w0 = cpu_s(pid), time.monotonic()
            time.sleep(args.viewer_seconds)
            c1, w1 = cpu_s(pid), time.monotonic()
            screen = subprocess.run(
                ["tmux", "capture-pane", "-t", session, "-p"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        finally:
            subprocess.run(["tmux", "kill-session", "-t", session], check=False)
        shown = sum(1 for line in screen.splitlines() if "gpu-node-" in line)
        status = next((ln.strip() for ln in screen.splitlines() if " nodes, " in ln), "?")
        print(
            f"viewer: {100 * (c1 - c0) / (w1 - w0):.2f}% of a core "
            f"over {w1 - w0:.0f} s at 1 refresh/s"
        )
        print(f"screen: {status}; {shown} node lines visible")
        for speed, what in (
            (1.0, "time moving at its own pace"),
            (15.0, "every value new at every refresh"),
        ):
            moving = asyncio.run(viewer_moving(url, float(end), args.viewer_seconds / 2, speed))
            print(f"viewer headless, {what}: {moving:.2f}% of a core")
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


async def viewer_moving(url: str, end: float, seconds: float, speed: float) -> float:
    """The screen at 1 refresh/s with its clock running through the history at
    ``speed`` (1: as it was, each node's values changing once per 15 s scrape;
    15: one scrape interval per refresh, every value new): CPU of this process."""
    from gputui.cluster.client import PrometheusClient
    from gputui.cluster.source import ClusterSource
    from gputui.tui.cluster.screen import make_cluster_app

    t0 = time.monotonic()
    start = end - 300.0
    source = ClusterSource(
        PrometheusClient(url, timeout_s=30), clock=lambda: start + speed * (time.monotonic() - t0)
    )
    app = make_cluster_app(source, interval_s=1.0)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause(4.0)
        c0, w0 = time.process_time(), time.monotonic()
        await pilot.pause(seconds)
        c1, w1 = time.process_time(), time.monotonic()
    source.close()
    return 100 * (c1 - c0) / (w1 - w0)


if __name__ == "__main__":
    raise SystemExit(main())
