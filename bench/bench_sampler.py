"""What the hook's Python stack sampler costs the job: step time with the
sampler on against off, in the same run, at ~2 ms and ~50 ms steps, with the
bench's own resolution beside it.

    python3 bench/bench_sampler.py [--device cpu|cuda] [--threads N] [--seconds 80] \
        [--block-s 0.25] [--workloads short,long] [--viewer] [--out bench-sampler.json]

The hook is installed in this process (a private socket directory).  Two
training loops through torch, each step ending with ``loss.item()``: an MLP
sized for ~2 ms steps (``short``) and one for ~50 ms steps (``long``), stepped
by AdamW (on the CPU fed by a DataLoader; on the GPU, ``--device cuda``, the
short one launch-bound, the long one compute-bound); ``pure`` adds a step of
pure Python (the GIL never released).  Each is calibrated to its step time
first.  On the CPU, torch runs ``--threads`` intra-op threads (default 4, at
most the CPUs less two, so the sampler thread and the hook's own have a core).

Four measurements, for each workload:

1. Direct: the time each sampler tick holds the GIL, from its wake-up to its
   next sleep (the sampler adds it up when a bench asks:
   ``gputui.hook._sampler.TICK_TIME``), over the wall time: the most the
   training thread can wait for the GIL behind the sampler's work.  Taken in
   blocks of its own after the rounds (reading the thread's CPU clock costs a
   tick two system calls).
2. A control thread that wakes at the sampler's rate and does nothing but take
   the GIL: the wake-up and hand-over cost alone, without the sampler's work.
3. Paired step times: rounds of eight blocks of about ``--block-s`` seconds in
   the order off, off', sampler, control, control, sampler, off', off (a
   palindrome: a linear drift of the machine cancels in every pair), for about
   ``--seconds`` per workload.  Each round gives three ratios, the median step
   of the sampler's (control's, off''s) blocks over the median step of the off
   blocks; reported: the median of each over the rounds with a bootstrap 95%
   interval.  off' against off (A/A) is the bench's own resolution: a cost is
   shown only where its interval clears the A/A one.
4. Per tick, within the blocks: each step is timed, and each tick's wake-up
   (``gputui.hook._sampler.TICK_LOG``; the control's own) falls in one step.
   Within each block, the slope of step time on the number of ticks in the
   step is what a tick adds to the step it falls in; the block's drift and
   the machine's state are the same for the steps with and without a tick.
   A step that falls a tick is likelier to be a long one (a longer step
   spans more time): the same slope over the off blocks, with ticks drawn at
   random at the same rate, measures that bias, and is subtracted.  Steps
   longer than ``CUT`` times their block's median (the machine's hiccups) are
   left out of the slopes and counted.  Reported: the cost a tick, times the
   ticks a second, as a share of the step time, with a bootstrap 95% interval
   over the rounds (each round's blocks drawn together).

``--viewer`` keeps a subscribed viewer (another process) attached during the
whole run, so the profile is also built and sent every 2 s (in every block).
Results as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import gputui.hook  # noqa: E402
from gputui.hook import _sampler  # noqa: E402

#: the block order of a round: O off, A off again (A/A), S sampler, C control
ORDER = "OASCCSAO"
#: per-tick estimate: steps longer than this many times their block's median are left out
CUT = 4.0
TARGET_MS = {"short": 2.0, "long": 50.0, "pure": 3.0}


class Mlp:
    """An MLP training step: a batch (a DataLoader on the CPU, fixed tensors on
    the GPU), forward, backward, AdamW, ``loss.item()``."""

    def __init__(self, name: str, device: str, width: int, layers: int, batch: int) -> None:
        self.name = name
        self.size = (width, layers, batch)
        mods: list[torch.nn.Module] = []
        for _ in range(layers):
            mods += [torch.nn.Linear(width, width), torch.nn.GELU()]
        self.model = torch.nn.Sequential(*mods).to(device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.loader: DataLoader[Any] | None = None
        if device == "cpu":
            n = batch * 16
            data = TensorDataset(torch.randn(n, width), torch.randn(n, width))
            self.loader = DataLoader(data, batch_size=batch)
            self.iter = iter(self.loader)
        else:
            self.x = torch.randn(batch, width, device=device)
            self.y = torch.randn(batch, width, device=device)

    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.loader is None:
            return self.x, self.y
        try:
            return next(self.iter)  # type: ignore[no-any-return]
        except StopIteration:
            self.iter = iter(self.loader)
            return next(self.iter)  # type: ignore[no-any-return]

    def step(self) -> None:
        x, y = self.batch()
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        loss.item()


class PurePython:
    """A step that never releases the GIL: arithmetic in a Python loop."""

    def __init__(self, n: int) -> None:
        self.name = "pure_python"
        self.size = (n,)
        self.n = n

    def step(self) -> None:
        total = 0
        for i in range(self.n):
            total += i * i
        gputui.hook.step()


def build(kind: str, device: str, scale: float) -> Any:
    """The workload ``kind`` at ``scale`` (1: the starting size)."""
    if kind == "pure":
        return PurePython(max(1000, int(40_000 * scale)))
    if device == "cpu":
        if kind == "short":
            return Mlp("mlp_2ms", device, 64, max(2, round(8 * scale)), 16)
        return Mlp("mlp_50ms", device, 512, 8, max(16, int(256 * scale)))
    if kind == "short":  # launch-bound: many small layers
        return Mlp("gpu_mlp_2ms", device, 256, max(2, round(24 * scale)), 64)
    return Mlp("gpu_mlp_50ms", device, 4096, 8, max(64, int(1024 * scale)))


def timed(work: Any, steps: int) -> list[float]:
    return [end - start for start, end in spans(work, steps)]


def spans(work: Any, steps: int) -> list[tuple[float, float]]:
    """Each step's start and end (``time.perf_counter``)."""
    out = []
    clock = time.perf_counter
    step = work.step
    push = out.append
    for _ in range(steps):
        t0 = clock()
        step()
        push((t0, clock()))
    return out


def calibrated(kind: str, device: str) -> tuple[Any, float]:
    """The workload sized for its target step time, and its step time (s)."""
    target = TARGET_MS[kind] / 1e3
    work = build(kind, device, 1.0)
    timed(work, 5)
    measured = statistics.median(timed(work, 9))
    work = build(kind, device, target / measured)
    timed(work, 10)
    return work, statistics.median(timed(work, 15))


class Control:
    """A thread that wakes at the sampler's rate and only takes the GIL."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.ticks = 0
        #: each tick's wake-up (time.perf_counter), as the sampler's TICK_LOG
        self.log: list[float] = []
        self._stop = False
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        sleep, period, clock, log = time.sleep, self.interval_s, time.perf_counter, self.log
        while not self._stop:
            sleep(period)
            log.append(clock())
            self.ticks += 1

    def start(self) -> None:
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="bench-control", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop = True
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None


def bootstrap(values: list[float], draws: int = 2000) -> tuple[float, float]:
    """A 95% interval of the median of ``values`` (rounds resampled)."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    return medians[int(0.025 * draws)], medians[int(0.975 * draws) - 1]


def ticks_per_step(steps: list[tuple[float, float]], ticks: list[float]) -> list[int]:
    """How many of ``ticks`` (sorted times) fall in each step."""
    out = []
    j, n = 0, len(ticks)
    for start, end in steps:
        while j < n and ticks[j] < start:
            j += 1
        k = 0
        while j < n and ticks[j] < end:
            k += 1
            j += 1
        out.append(k)
    return out


def random_ticks(start: float, end: float, rate: float, rng: random.Random) -> list[float]:
    """Times at about ``rate`` a second, spaced at random (the off blocks' null)."""
    out = []
    t = start + rng.uniform(0, 1 / rate)
    while t < end:
        out.append(t)
        t += rng.uniform(0.5, 1.5) / rate
    return out


class Block:
    """One block's steps, reduced to what the per-tick estimate sums: the
    centred cross and square sums of step time and ticks (each block centred
    on its own means), its ticks, step time, steps, the steps cut and its wall
    time."""

    __slots__ = ("cut", "steps", "steps_s", "sxx", "sxy", "ticks", "wall_s")

    def __init__(self, steps: list[tuple[float, float]], ticks: list[float]) -> None:
        per_step = ticks_per_step(steps, sorted(ticks))
        durations = [end - start for start, end in steps]
        limit = CUT * statistics.median(durations)
        kept = [(d, k) for d, k in zip(durations, per_step, strict=True) if d <= limit]
        self.cut = len(durations) - len(kept)
        self.steps = len(kept)
        self.steps_s = sum(d for d, _ in kept)
        self.ticks = sum(k for _, k in kept)
        self.sxy = self.sxx = 0.0
        if len(kept) >= 2:
            md, mk = self.steps_s / len(kept), self.ticks / len(kept)
            self.sxy = sum((d - md) * (k - mk) for d, k in kept)
            self.sxx = sum((k - mk) ** 2 for _, k in kept)
        self.wall_s = steps[-1][1] - steps[0][0]


def slope(blocks: list[Block]) -> float:
    """Seconds a tick adds to its step: step time on ticks in the step,
    within each block, pooled."""
    sxx = sum(b.sxx for b in blocks)
    return sum(b.sxy for b in blocks) / sxx if sxx else 0.0


def per_tick(rounds: list[dict[str, list[Block]]], mode: str, draws: int = 1000) -> dict[str, Any]:
    """The per-tick estimate of ``mode`` against the off blocks' null, with a
    bootstrap interval over rounds."""

    def estimate(picked: list[dict[str, list[Block]]]) -> tuple[float, float, float]:
        on = [b for r in picked for b in r[mode]]
        off = [b for r in picked for b in r["O"]]
        ticks = sum(b.ticks for b in on)
        steps_s = sum(b.steps_s for b in on)
        cost, null = slope(on), slope(off)
        share = (cost - null) * ticks / steps_s if steps_s else 0.0
        return share, cost, null

    share, cost, null = estimate(rounds)
    rng = random.Random(1)
    shares = sorted(estimate(rng.choices(rounds, k=len(rounds)))[0] for _ in range(draws))
    on = [b for r in rounds for b in r[mode]]
    off = [b for r in rounds for b in r["O"]]
    steps_on = sum(b.steps + b.cut for b in on)
    steps_off = sum(b.steps + b.cut for b in off)
    return {
        "share": share,
        "ci95": [shares[int(0.025 * draws)], shares[int(0.975 * draws) - 1]],
        "us_per_tick": 1e6 * (cost - null),
        "slope_us": 1e6 * cost,
        "null_us": 1e6 * null,
        "ticks_per_s": sum(b.ticks for b in on) / sum(b.wall_s for b in on),
        "cut_per_1000": 1000 * sum(b.cut for b in on) / steps_on if steps_on else 0.0,
        "cut_per_1000_off": 1000 * sum(b.cut for b in off) / steps_off if steps_off else 0.0,
    }


def summary(ratios: list[float]) -> dict[str, Any]:
    low, high = bootstrap(ratios)
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    return {
        "median": statistics.median(ratios),
        "ci95": [low, high],
        "quartiles": [q[0], q[2]],
        "rounds": len(ratios),
    }


class Modes:
    """Starts and stops what each block runs beside the training loop, and
    adds up what the sampler and its thread did."""

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler
        self.control = Control(sampler.interval_s)
        self.tick = [0.0, 0, 0.0]
        self.samples = 0
        self.sampler_wall_s = 0.0
        self.sampler_cpu_s = 0.0
        self.control_wall_s = 0.0
        self.control_ticks = 0
        self.timing_wall_s = 0.0  # the T blocks'
        self.log: list[float] = []
        self._clock: int | None = None
        self._cpu0 = self._t0 = 0.0
        self._samples0 = self._ticks0 = 0

    def start(self, mode: str) -> None:
        """``mode``: O, A (off), S (the sampler, its ticks logged), C (the
        control), T (the sampler, each tick's GIL time measured)."""
        self.log = []
        if mode in "ST":
            if mode == "S":
                _sampler.TICK_LOG = self.log  # read by the sampler thread as it starts
            else:
                _sampler.TICK_TIME = self.tick
            self._samples0 = self.sampler.samples
            self.sampler.start()
            thread = self.sampler._thread
            self._clock = time.pthread_getcpuclockid(thread.ident)
            self._cpu0 = time.clock_gettime(self._clock)
        elif mode == "C":
            self._ticks0 = self.control.ticks
            self.control.log = self.log
            self.control.start()
        self._t0 = time.perf_counter()

    def stop(self, mode: str) -> list[float]:
        """Ends the block; its ticks' wake-up times (none for O, A, T)."""
        wall = time.perf_counter() - self._t0
        if mode in "ST":
            assert self._clock is not None
            cpu_s = time.clock_gettime(self._clock) - self._cpu0
            self.sampler.stop()
            _sampler.TICK_LOG = _sampler.TICK_TIME = None
            if mode == "S":
                self.sampler_cpu_s += cpu_s
                self.samples += self.sampler.samples - self._samples0
                self.sampler_wall_s += wall
            else:
                self.timing_wall_s += wall
        elif mode == "C":
            self.control.stop()
            self.control_ticks += self.control.ticks - self._ticks0
            self.control_wall_s += wall
        return self.log if mode in "SC" else []


def run(work: Any, modes: Modes, step_s: float, seconds: float, block_s: float) -> dict[str, Any]:
    """The rounds of one workload, then the direct measurement."""
    steps = max(8, round(block_s / step_s))
    rounds = max(3, round(seconds / (len(ORDER) * steps * step_s)))
    ratios: dict[str, list[float]] = {"S": [], "C": [], "A": []}
    blocks: list[dict[str, list[Block]]] = []
    all_off: list[float] = []
    rate = 1 / modes.sampler.interval_s
    rng = random.Random(0)
    for _ in range(rounds):
        got: dict[str, list[float]] = {m: [] for m in "OASC"}
        kept: dict[str, list[Block]] = {m: [] for m in "OASC"}
        for mode in ORDER:
            modes.start(mode)
            block = spans(work, steps)
            ticks = modes.stop(mode)
            if mode in "OA":
                ticks = random_ticks(block[0][0], block[-1][1], rate, rng)
            got[mode] += [end - start for start, end in block]
            kept[mode].append(Block(block, ticks))
        off = statistics.median(got["O"])
        for mode, into in ratios.items():
            into.append(statistics.median(got[mode]) / off)
        all_off += got["O"]
        blocks.append(kept)
    # the direct measurement: the GIL each tick holds, in blocks of its own
    for _ in range(max(4, rounds // 4)):
        modes.start("T")
        timed(work, steps)
        modes.stop("T")
    tick_s, ticks, tick_cpu_s = modes.tick
    return {
        "workload": work.name,
        "size": list(work.size),
        "steps_per_block": steps,
        "rounds": rounds,
        "step_off_ms": statistics.median(all_off) * 1e3,
        "sampler": summary(ratios["S"]),
        "control": summary(ratios["C"]),
        "a_a": summary(ratios["A"]),
        # what a tick adds to the step it falls in, as a share of the step time
        "per_tick": {"sampler": per_tick(blocks, "S"), "control": per_tick(blocks, "C")},
        "samples": modes.samples,
        "mean_interval_ms": 1e3 * modes.sampler_wall_s / modes.samples if modes.samples else None,
        # the direct bound: the GIL held by the sampler's ticks, over the wall time
        "gil_us_per_tick": 1e6 * tick_s / ticks if ticks else None,
        "gil_pct_of_wall": 100 * tick_s / modes.timing_wall_s if modes.timing_wall_s else None,
        # the sampler thread's own CPU time in those spans (the rest: preempted)
        "gil_cpu_us_per_tick": 1e6 * tick_cpu_s / ticks if ticks else None,
        "sampler_cpu_us_per_sample": 1e6 * modes.sampler_cpu_s / modes.samples
        if modes.samples
        else None,
        "sampler_cpu_pct": 100 * modes.sampler_cpu_s / modes.sampler_wall_s
        if modes.sampler_wall_s
        else None,
        "control_interval_ms": 1e3 * modes.control_wall_s / modes.control_ticks
        if modes.control_ticks
        else None,
    }


VIEWER = r"""
import sys
from gputui.client.hook import HookClient
client = HookClient.connect(int(sys.argv[1]))
client.subscribe(history=0)
client.start()
print("ready", flush=True)
for _ in client.events(timeout=None):
    pass
"""


def pct(ratio: float) -> str:
    return f"{100 * (ratio - 1):+.2f}%"


def line(r: dict[str, Any]) -> str:
    def est(key: str) -> str:
        s = r[key]
        low, high = s["ci95"]
        return f"{key} {pct(s['median'])} [{pct(low)}, {pct(high)}]"

    def tick(key: str) -> str:
        t = r["per_tick"][key]
        low, high = t["ci95"]
        return (
            f"{key} {100 * t['share']:+.2f}% [{100 * low:+.2f}%, {100 * high:+.2f}%] "
            f"({t['us_per_tick']:.1f} us a tick, {t['ticks_per_s']:.0f} a second; "
            f"cut {t['cut_per_1000']:.1f}/1000 steps, off {t['cut_per_1000_off']:.1f})"
        )

    return (
        f"{r['workload']:<13} step {r['step_off_ms']:7.3f} ms, {r['rounds']} rounds of "
        f"{r['steps_per_block']} steps a block: {est('sampler')}  {est('control')}  "
        f"{est('a_a')};  per tick: {tick('sampler')}  {tick('control')};  "
        f"GIL held {r['gil_us_per_tick'] or 0:.1f} us a tick "
        f"({r['gil_cpu_us_per_tick'] or 0:.1f} us of it on a CPU) = "
        f"{r['gil_pct_of_wall'] or 0:.3f}% of the wall; sampler thread CPU "
        f"{r['sampler_cpu_us_per_sample'] or 0:.0f} us a sample, "
        f"{r['samples']} samples every {r['mean_interval_ms'] or float('nan'):.1f} ms"
    )


def default_threads() -> int:
    return max(1, min(4, (os.cpu_count() or 1) - 2))


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--threads", type=int, default=default_threads(), help="torch CPU threads")
    p.add_argument("--seconds", type=float, default=80.0, help="about this long per workload")
    p.add_argument("--block-s", type=float, default=0.25, help="seconds a block (8 steps or more)")
    p.add_argument("--workloads", default="short,long", help="of short, long, pure")
    p.add_argument("--viewer", action="store_true", help="a subscribed viewer attached")
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args()
    kinds = [k.strip() for k in args.workloads.split(",") if k.strip()]
    if not kinds or any(k not in TARGET_MS for k in kinds):
        print(f"--workloads: a list of {', '.join(TARGET_MS)}", file=sys.stderr)
        return 2
    if args.device not in ("cpu", "cuda") or (
        args.device == "cuda" and not torch.cuda.is_available()
    ):
        print(f"--device {args.device}: cpu, or cuda where torch sees a GPU", file=sys.stderr)
        return 2

    torch.set_num_threads(max(1, args.threads))
    load_before = list(os.getloadavg())
    sock_dir = tempfile.mkdtemp(prefix="gtb-", dir="/tmp")
    os.rmdir(sock_dir)
    os.environ["GPUTUI_SOCKET_DIR"] = sock_dir
    hook = gputui.hook.install()
    if hook is None or hook.server is None:
        print("the hook did not install", file=sys.stderr)
        return 1
    hook.sampler.stop()
    viewer = None
    results = []
    try:
        # the hook's socket opens at the first step: the viewer attaches after it
        first: tuple[Any, float] | None = calibrated(kinds[0], args.device)
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
        for kind in kinds:
            work, step_s = first or calibrated(kind, args.device)
            first = None
            result = run(work, Modes(hook.sampler), step_s, args.seconds, args.block_s)
            print(line(result), flush=True)
            results.append(result)
            del work
    finally:
        if viewer is not None:
            viewer.kill()
            viewer.wait()
        gputui.hook.uninstall()
    doc = {
        "bench": "sampler",
        "load_average": {"before": load_before, "after": list(os.getloadavg())},
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": {
            "node": platform.node(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "platform": platform.platform(),
            "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
        },
        "device": args.device,
        "threads": torch.get_num_threads(),
        "viewer": args.viewer,
        "interval_s": hook.sampler.interval_s,
        "order": ORDER,
        "results": results,
    }
    print(
        f"load average (1 min) {load_before[0]:.1f} before, {doc['load_average']['after'][0]:.1f}"
        f" after, on {os.cpu_count()} CPUs; {args.device}, {doc['threads']} torch threads; "
        f"viewer attached: {args.viewer}"
    )
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
