"""Cost of one full live snapshot, gputui vs nvitop, on a GPU machine.

A child process runs a bf16 matmul loop on GPU 0 so there is one busy GPU
process.  Then, in this process, on a sampler-like thread:

* gputui: ``LiveSource().sample()`` - every device (with GPM), every process
  with its psutil details, and the host panel;
* nvitop: ``Device.as_snapshot()`` for every device, ``device.processes()`` and
  ``GpuProcess.take_snapshots(processes, failsafe=True)``.

Then the start-to-exit time of ``gputui --once`` vs ``nvitop --once`` (both as
``python -m``, so interpreter start-up is the same).  Prints a table, writes
JSON with ``--out``.  nvitop parts are skipped with a message if nvitop is
not importable.

    python3 bench/bench_snapshot.py --out docs/bench_snapshot.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import select
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gputui.sources.live import LiveSource  # noqa: E402

_BUSY = """
import sys, torch
a = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
torch.cuda.synchronize()
print("ready", flush=True)
while True:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
"""


def start_busy_child() -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", _BUSY], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], 180)
    if not ready or child.stdout.readline().strip() != "ready":
        child.kill()
        raise SystemExit("the torch matmul child did not start")
    return child


def timed_on_thread(
    fn: Callable[[], Any], samples: int, interval_s: float, warmup: int = 5
) -> list[float]:
    """Milliseconds per call, measured on a separate thread at a fixed cadence."""
    times: list[float] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            for _ in range(warmup):
                fn()
            next_start = time.perf_counter()
            for _ in range(samples):
                start = time.perf_counter()
                fn()
                times.append((time.perf_counter() - start) * 1000.0)
                next_start += interval_s
                delay = next_start - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
        except BaseException as exc:  # reported on the main thread
            failure.append(exc)

    thread = threading.Thread(target=run, name="bench-sampler")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return times


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "median_ms": statistics.median(ordered),
        "p90_ms": ordered[int(0.9 * (len(ordered) - 1))],
        "mean_ms": statistics.fmean(ordered),
        "max_ms": ordered[-1],
        "n": len(ordered),
    }


def bench_gputui(samples: int, interval_s: float, busy_pid: int) -> dict[str, Any]:
    start = time.perf_counter()
    source = LiveSource()
    first = source.sample()
    first_ms = (time.perf_counter() - start) * 1000.0
    times = timed_on_thread(source.sample, samples, interval_s)
    last = source.sample()
    source.close()
    busy = [p for p in last.processes if p.pid == busy_pid]
    gpm = last.devices[0].gpm if last.devices else None
    return {
        **summary(times),
        "open_and_first_sample_ms": first_ms,
        "devices": [d.name for d in first.devices],
        "processes": len(last.processes),
        "busy_process_seen": bool(busy),
        "busy_process_cmdline_seen": bool(busy and busy[0].cmdline),
        "gpm_sm_activity_pct": gpm.sm_activity_pct if gpm else None,
        "gpm_tensor_activity_pct": gpm.tensor_activity_pct if gpm else None,
        "util_gpu_pct": last.devices[0].util_gpu_pct if last.devices else None,
        "throttle_reasons": list(last.devices[0].throttle_reasons or ()) if last.devices else None,
        "error": last.error,
    }


def bench_nvitop(samples: int, interval_s: float) -> dict[str, Any]:
    try:
        import nvitop
        from nvitop import Device, GpuProcess
    except ImportError as exc:
        return {"skipped": f"nvitop is not importable: {exc}"}
    devices = Device.all()

    def snapshot() -> None:
        [device.as_snapshot() for device in devices]
        processes: dict[int, Any] = {}
        for device in devices:
            processes.update(device.processes())
        GpuProcess.take_snapshots(processes.values(), failsafe=True)

    times = timed_on_thread(snapshot, samples, interval_s)
    return {**summary(times), "version": getattr(nvitop, "__version__", None)}


def precompile(modules: list[str]) -> None:
    """Write .pyc files for both tools and what they import, as an installed
    package has them: a fresh checkout (or a --no-compile install) would otherwise
    make every run compile from source and measure the compiler, not the tool."""
    import compileall
    import importlib.util

    for name in modules:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue
        origin = Path(spec.origin)
        target = origin.parent if origin.name == "__init__.py" else origin
        if target.is_dir():
            compileall.compile_dir(target, quiet=1)
        else:
            compileall.compile_file(target, quiet=1)


def bench_once(commands: dict[str, list[str]], runs: int) -> dict[str, dict[str, Any]]:
    """Process start to exit of each command line, the commands taking turns run
    after run so that the machine's drift hits them alike."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    times: dict[str, list[float]] = {name: [] for name in commands}
    failed: dict[str, str] = {}
    for _ in range(runs):
        for name, argv in commands.items():
            if name in failed:
                continue
            start = time.perf_counter()
            done = subprocess.run(
                [sys.executable, *argv],
                capture_output=True,
                text=True,
                env=env,
                cwd=REPO,
                timeout=120,
            )
            elapsed = (time.perf_counter() - start) * 1000.0
            if done.returncode != 0:
                tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
                failed[name] = f"exit {done.returncode}: {' '.join(tail)}"
                continue
            times[name].append(elapsed)
    out: dict[str, dict[str, Any]] = {}
    for name, values in times.items():
        if name in failed:
            out[name] = {"failed": failed[name]}
        else:
            out[name] = {"median_ms": statistics.median(values), "min_ms": min(values), "n": runs}
    return out


def nvitop_available() -> str | None:
    try:
        import nvitop  # noqa: F401
    except ImportError as exc:
        return f"nvitop is not importable: {exc}"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument(
        "--interval",
        type=float,
        default=0.1,
        help="seconds between samples (0.1, the sampler's minimum: GPM needs that much)",
    )
    parser.add_argument("--once-runs", type=int, default=20)
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args()

    child = start_busy_child()
    try:
        ours = bench_gputui(args.samples, args.interval, child.pid)
        theirs = bench_nvitop(args.samples, args.interval)
        missing = nvitop_available()
        precompile(["gputui", "pynvml", "psutil", "rich", "nvitop"])
        commands = {
            "gputui": ["-m", "gputui", "--once"],
            # rates need a window: what --once costs with GPM activity shown
            "gputui_window": ["-m", "gputui", "--once", "--window", "0.1"],
        }
        if not missing:
            commands["nvitop"] = ["-m", "nvitop", "--once"]
        once = bench_once(commands, args.once_runs)
        if missing:
            once["nvitop"] = {"skipped": missing}
    finally:
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()

    result: dict[str, Any] = {
        "host": platform.node(),
        "python": platform.python_version(),
        "interval_s": args.interval,
        "snapshot": {"gputui": ours, "nvitop": theirs},
        "once": once,
    }
    if "median_ms" in theirs:
        result["snapshot"]["nvitop_over_gputui_median"] = theirs["median_ms"] / ours["median_ms"]
        result["snapshot"]["nvitop_over_gputui_p90"] = theirs["p90_ms"] / ours["p90_ms"]
    if "median_ms" in once["gputui"] and "median_ms" in once["nvitop"]:
        result["once"]["nvitop_over_gputui_median"] = (
            once["nvitop"]["median_ms"] / once["gputui"]["median_ms"]
        )

    print_table(result)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


def print_table(result: dict[str, Any]) -> None:
    snap = result["snapshot"]
    ours, theirs = snap["gputui"], snap["nvitop"]
    print(
        f"devices: {', '.join(ours['devices'])}  (busy process seen: {ours['busy_process_seen']})"
    )
    print(f"{'one full snapshot':<28}{'median ms':>12}{'p90 ms':>12}{'mean ms':>12}")
    print(
        f"{'gputui LiveSource':<28}{ours['median_ms']:>12.3f}{ours['p90_ms']:>12.3f}"
        f"{ours['mean_ms']:>12.3f}"
    )
    if "median_ms" in theirs:
        print(
            f"{'nvitop snapshot':<28}{theirs['median_ms']:>12.3f}{theirs['p90_ms']:>12.3f}"
            f"{theirs['mean_ms']:>12.3f}"
        )
        print(
            f"{'ratio nvitop / gputui':<28}{snap['nvitop_over_gputui_median']:>12.1f}"
            f"{snap['nvitop_over_gputui_p90']:>12.1f}"
        )
    else:
        print(f"nvitop: {theirs['skipped']}")
    print(
        f"gputui open + first sample: {ours['open_and_first_sample_ms']:.1f} ms; "
        f"GPM SM activity {ours['gpm_sm_activity_pct']}, tensor {ours['gpm_tensor_activity_pct']}, "
        f"util {ours['util_gpu_pct']}, throttle {ours['throttle_reasons']}"
    )
    once = result["once"]
    print(f"{'--once start to exit':<28}{'median ms':>12}")
    labels = {"gputui": "gputui --once", "gputui_window": "... --window 0.1"}
    for name in ("gputui", "gputui_window", "nvitop"):
        entry = once[name]
        label = labels.get(name, f"{name} --once")
        if "median_ms" in entry:
            print(f"{label:<28}{entry['median_ms']:>12.1f}")
        else:
            print(f"{label:<28}  {entry.get('failed') or entry.get('skipped')}")
    if "nvitop_over_gputui_median" in once:
        print(f"{'ratio nvitop / gputui':<28}{once['nvitop_over_gputui_median']:>12.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
