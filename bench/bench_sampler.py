"""What the hook's Python stack sampler costs the job: step time with the
sampler on against off, in the same run, at ~2 ms and ~50 ms steps.

    python bench/bench_sampler.py [--out bench-sampler.json] [--viewer]

The hook is installed in this process (a private socket directory); the
workloads are CPU training loops through torch (one intra-op thread): an MLP
sized for ~2 ms steps and one for ~50 ms steps, each fed by a DataLoader and
stepped by AdamW, so every hook point runs as in a real job.  For each
workload, ``--rounds`` rounds of four blocks of steps, off-on-on-off (the
order cancels a slow drift of the machine), the sampler thread started for
the "on" blocks and stopped (joined) for the "off" ones.  Reported: the median
step time off and on over all blocks, and the ratio on/off as the median of
the per-round ratios (each round: median of its on steps over median of its
off steps), with quartiles; the samples taken and the sampler's mean interval.

``--viewer`` keeps a subscribed viewer (another process) attached during the
whole run, so the profile is also built and sent every 2 s (both modes get
the viewer; only the sampler differs).  ``--pure-python`` adds a third
workload whose step is pure Python (the GIL is never released: the worst case
for a sampler thread).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import gputui.hook  # noqa: E402


class Mlp:
    """An MLP training step on the CPU: DataLoader batch, forward, backward,
    AdamW step."""

    def __init__(self, name: str, width: int, layers: int, batch: int) -> None:
        self.name = name
        mods: list[torch.nn.Module] = []
        for _ in range(layers):
            mods += [torch.nn.Linear(width, width), torch.nn.GELU()]
        self.model = torch.nn.Sequential(*mods)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        n = batch * 16
        data = TensorDataset(torch.randn(n, width), torch.randn(n, width))
        self.loader = DataLoader(data, batch_size=batch)
        self.iter = iter(self.loader)

    def step(self) -> None:
        try:
            x, y = next(self.iter)
        except StopIteration:
            self.iter = iter(self.loader)
            x, y = next(self.iter)
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


class PurePython:
    """A step that never releases the GIL: arithmetic in a Python loop."""

    name = "pure_python"

    def __init__(self, n: int) -> None:
        self.n = n

    def step(self) -> None:
        total = 0
        for i in range(self.n):
            total += i * i
        gputui.hook.step()


def thread_clock(sampler: Any) -> int:
    """The CPU-time clock of the sampler's thread."""
    thread = sampler._thread
    assert thread is not None and thread.ident is not None
    return time.pthread_getcpuclockid(thread.ident)


def timed(work: Any, steps: int) -> list[float]:
    out = []
    clock = time.perf_counter
    for _ in range(steps):
        t0 = clock()
        work.step()
        out.append(clock() - t0)
    return out


def quartiles(values: list[float]) -> dict[str, float]:
    if len(values) < 2:
        v = values[0] if values else float("nan")
        return {"p25": v, "median": v, "p75": v}
    q = statistics.quantiles(values, n=4)
    return {"p25": q[0], "median": statistics.median(values), "p75": q[2]}


def run(work: Any, hook: Any, rounds: int, block: int) -> dict[str, Any]:
    sampler = hook.sampler
    sampler.stop()
    timed(work, block)  # warm-up
    ratios = []
    all_off: list[float] = []
    all_on: list[float] = []
    samples = 0
    on_s = 0.0
    sampler_cpu_s = 0.0
    for _ in range(rounds):
        off: list[float] = []
        on: list[float] = []
        for mode in ("off", "on", "on", "off"):
            if mode == "on":
                before = sampler.samples
                sampler.start()
                clock = thread_clock(sampler)
                cpu0 = time.clock_gettime(clock)
                t0 = time.perf_counter()
                on += timed(work, block)
                on_s += time.perf_counter() - t0
                sampler_cpu_s += time.clock_gettime(clock) - cpu0
                sampler.stop()
                samples += sampler.samples - before
            else:
                off += timed(work, block)
        ratios.append(statistics.median(on) / statistics.median(off))
        all_off += off
        all_on += on
    return {
        "workload": work.name,
        "steps_per_block": block,
        "rounds": rounds,
        "step_off_ms": statistics.median(all_off) * 1e3,
        "step_on_ms": statistics.median(all_on) * 1e3,
        "ratio": quartiles(ratios),
        "samples": samples,
        "mean_interval_ms": on_s / samples * 1e3 if samples else None,
        # the sampler thread's CPU time over the "on" blocks' wall time: what it
        # can take of the GIL at most (a bound that contention does not blur)
        "sampler_cpu_pct": 100 * sampler_cpu_s / on_s if on_s else None,
        "sampler_cpu_us_per_sample": 1e6 * sampler_cpu_s / samples if samples else None,
    }


VIEWER = r"""
import sys
from gputui.collectors.hook_client import HookClient
client = HookClient.connect(int(sys.argv[1]))
client.subscribe(history=0)
client.start()
print("ready", flush=True)
for _ in client.events(timeout=None):
    pass
"""


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--short-block", type=int, default=150, help="steps per block, ~2 ms steps")
    p.add_argument("--long-block", type=int, default=12, help="steps per block, ~50 ms steps")
    p.add_argument("--viewer", action="store_true", help="a subscribed viewer attached")
    p.add_argument("--pure-python", action="store_true", help="also a pure-Python step")
    args = p.parse_args()

    torch.set_num_threads(1)
    load_before = list(os.getloadavg())
    sock_dir = tempfile.mkdtemp(prefix="gtb-", dir="/tmp")
    os.rmdir(sock_dir)
    os.environ["GPUTUI_SOCKET_DIR"] = sock_dir
    hook = gputui.hook.install()
    if hook is None or hook.server is None:
        print("the hook did not install", file=sys.stderr)
        return 1
    workloads: list[Any] = [
        Mlp("mlp_2ms", width=64, layers=8, batch=16),
        Mlp("mlp_50ms", width=512, layers=8, batch=256),
    ]
    if args.pure_python:
        workloads.append(PurePython(40_000))
    blocks = [args.short_block, args.long_block, args.short_block][: len(workloads)]
    viewer = None
    try:
        workloads[0].step()  # the hook's socket opens at the first step
        if args.viewer:
            env = dict(os.environ, PYTHONPATH=str(REPO))
            viewer = subprocess.Popen(
                [sys.executable, "-c", VIEWER, str(os.getpid())],
                env=env,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert viewer.stdout is not None
            viewer.stdout.readline()
        results = [run(w, hook, args.rounds, b) for w, b in zip(workloads, blocks, strict=True)]
    finally:
        if viewer is not None:
            viewer.kill()
            viewer.wait()
        gputui.hook.uninstall()
    doc = {
        "bench": "sampler",
        "load_average": {"before": load_before, "after": list(os.getloadavg())},
        "date": time.strftime("%Y-%m-%d"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "platform": platform.platform(),
        },
        "viewer": args.viewer,
        "interval_s": hook.sampler.interval_s,
        "results": results,
    }
    print(
        f"load average (1 min) {load_before[0]:.1f} before, {doc['load_average']['after'][0]:.1f}"
        f" after, on {os.cpu_count()} CPUs; viewer attached: {args.viewer}"
    )
    for r in results:
        q = r["ratio"]
        print(
            f"{r['workload']:<12} off {r['step_off_ms']:7.3f} ms  on {r['step_on_ms']:7.3f} ms  "
            f"on/off {q['median']:.4f} (quartiles {q['p25']:.4f}-{q['p75']:.4f})  "
            f"{r['samples']} samples, every {r['mean_interval_ms'] or float('nan'):.1f} ms; "
            f"sampler thread CPU {r['sampler_cpu_pct'] or 0:.2f}% of the wall time, "
            f"{r['sampler_cpu_us_per_sample'] or 0:.0f} us a sample"
        )
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
