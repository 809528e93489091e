"""What recording one sample costs the sampler thread while it holds the GIL
(the part the training thread can feel), and what building a profile costs
the I/O thread: this tree's sampler against a baseline copy of
``gputui/hook/_sampler.py`` (another checkout's), in the same process, on the
same frames.

    python bench/bench_sampler_record.py --baseline OTHER/gputui/hook/_sampler.py \
        [--depth 36] [--distinct 0] [--rounds 15] [--out record.json]
    python bench/bench_sampler_record.py --baseline OTHER/gputui/hook/_sampler.py \
        --live 60 [--out live.json]

Both samplers record the same stack (``--depth`` frames of the job's own code
calling into a library; with ``--distinct N``, N stacks on top of it, each at
another line, in turn: no two samples in a row alike) alternately,
``--rounds`` rounds of 2,000 samples each, the fold of a sampler that defers
its tables counted in; reported: the median time of one tick of each (the
GIL held by ``_record``: each call timed alone) and their ratio, the time per
sample all in (the folds included) and its ratio (median of the per-round
ratios, with quartiles), then the median time of ``snapshot()`` over
the tables they filled.  The baseline is loaded as its own module beside this
tree's (it imports this tree's recorder and protocol, which it shares).

``--live SECONDS``: instead, both samplers in turn on a real training loop in
this process (the hook installed), each sample's ``_record`` timed where it
runs, after the sampler's sleep (cold caches), the folds it triggers
included: the mean is what recording costs the GIL a tick.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import gputui.hook._sampler as current  # noqa: E402
from gputui.hook._recorder import Recorder  # noqa: E402

SAMPLES = 2000


def _module(name: str, path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load(path: str) -> ModuleType:
    """The baseline sampler; with its own checkout's profile rows
    (``_profile_rows.py`` beside it) where it has them, since the shape of its
    tables goes with them."""
    rows = Path(path).with_name("_profile_rows.py")
    key = "gputui.hook._profile_rows"
    if not rows.exists():
        return _module("baseline_sampler", path)
    ours = sys.modules[key]
    sys.modules[key] = _module("baseline_profile_rows", str(rows))
    try:
        return _module("baseline_sampler", path)
    finally:
        sys.modules[key] = ours


def stack(depth: int, count: int) -> tuple[list[FrameType], threading.Event, threading.Thread]:
    """The innermost frame of a thread parked ``depth`` calls deep (a library
    function at the bottom), or with ``count``, that many stacks on top of
    its, each stopped at its own line of one more function (frames kept after
    their calls returned): what a sampler sees when no two samples are alike;
    and what ends the thread."""
    lib = "def wait(ev):\n    ev.wait()\n"
    namespace: dict[str, Any] = {"sys": sys}
    exec(compile(lib, "/venv/lib/python3.11/site-packages/fakelib/core.py", "exec"), namespace)
    body = "\n".join(f"    if k == {j}: return sys._getframe()" for j in range(count))
    body = body or "    pass"
    exec(compile(f"def lines(k):\n{body}\n", "/project/lines.py", "exec"), namespace)
    wait, lines = namespace["wait"], namespace["lines"]
    parked: dict[str, list[FrameType]] = {}
    ready = threading.Event()
    done = threading.Event()

    def descend(n: int) -> None:
        if n:
            descend(n - 1)
            return
        parked["frames"] = [lines(k) for k in range(count)]
        ready.set()
        wait(done)

    thread = threading.Thread(target=descend, args=(depth,), daemon=True)
    thread.start()
    ready.wait(10)
    if parked.get("frames"):
        return parked["frames"], done, thread
    frame = sys._current_frames().get(thread.ident or 0)
    assert frame is not None
    return [frame], done, thread


def same_own(samplers: dict[str, Any]) -> None:
    """The baseline, loaded from another checkout, takes that checkout's files
    for gputui's own (transparent) frames: both take this tree's."""
    samplers["baseline"]._own = samplers["this tree"]._own


def per_sample(sampler: Any, frames: list[FrameType]) -> tuple[float, float]:
    """Seconds a sample: the median of the ticks (each timed alone: the tick
    that folds a sampler's pending samples is one of few), and all in, the
    fold of what they left included (a sampler that defers its tables)."""
    clock = time.perf_counter
    now = clock()
    count = len(frames)
    record = sampler._record
    ticks = []
    t0 = clock()
    with sampler.lock:
        for i in range(SAMPLES):
            t1 = clock()
            record(frames[i % count], 0.01, now + i * 0.01)
            ticks.append(clock() - t1)
        fold = getattr(sampler, "fold", None)
        if fold is not None:
            fold()
    return statistics.median(ticks), (clock() - t0) / SAMPLES


def live(base: ModuleType, seconds: float, block_s: float) -> dict[str, Any]:
    """Both samplers in turn on this process's training loop (the ~2 ms CPU
    MLP of bench_sampler.py, the hook installed, one torch thread), in rounds
    of blocks baseline, this tree, this tree, baseline: each sample's
    ``_record`` timed, the folds it does included, cold as in a job."""
    import tempfile

    import torch

    import gputui.hook
    from bench.bench_sampler import build, timed

    torch.set_num_threads(1)
    sock_dir = tempfile.mkdtemp(prefix="gtr-", dir="/tmp")
    os.rmdir(sock_dir)
    os.environ["GPUTUI_SOCKET_DIR"] = sock_dir
    hook = gputui.hook.install()
    assert hook is not None
    hook.sampler.stop()
    work = build("short", "cpu", 1.0)
    step_s = statistics.median(timed(work, 30))
    samplers = {
        "baseline": base.Sampler(hook.recorder, enabled=True),
        "this tree": current.Sampler(hook.recorder, enabled=True),
    }
    same_own(samplers)
    calls: dict[str, list[float]] = {name: [] for name in samplers}
    for name, sampler in samplers.items():  # the loop calls self._record: this one
        sampler._record = functools.partial(_timed, sampler._record, calls[name])
    steps = max(10, round(block_s / step_s))
    rounds = max(2, round(seconds / (4 * block_s)))
    means: dict[str, list[float]] = {name: [] for name in samplers}
    try:
        for r in range(rounds):
            order = ["baseline", "this tree"] if r % 2 == 0 else ["this tree", "baseline"]
            for name in order + order[::-1]:
                before = len(calls[name])
                samplers[name].start()
                timed(work, steps)
                samplers[name].stop()
                if len(calls[name]) > before:
                    means[name].append(statistics.mean(calls[name][before:]))
    finally:
        gputui.hook.uninstall()
    ratios = [c / b for b, c in zip(means["baseline"], means["this tree"], strict=False)]
    return {
        "step_ms": step_s * 1e3,
        "rounds": rounds,
        "ticks": {k: len(v) for k, v in calls.items()},
        "tick_mean_us": {k: statistics.mean(v) * 1e6 for k, v in calls.items() if v},
        "tick_median_us": {k: statistics.median(v) * 1e6 for k, v in calls.items() if v},
        "tick_p90_us": {
            k: statistics.quantiles(v, n=10)[-1] * 1e6 for k, v in calls.items() if len(v) > 1
        },
        "mean_ratio": statistics.median(ratios) if ratios else None,
    }


def _timed(record: Any, into: list[float], *args: Any) -> None:
    t0 = time.perf_counter()
    record(*args)
    into.append(time.perf_counter() - t0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", required=True, help="another checkout's gputui/hook/_sampler.py")
    p.add_argument("--depth", type=int, default=36)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument(
        "--distinct",
        type=int,
        default=0,
        help="samples cycle through this many different stacks (0: all alike)",
    )
    p.add_argument(
        "--live",
        type=float,
        default=0.0,
        help="seconds of the live comparison on a training loop instead",
    )
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args()
    base = load(args.baseline)
    result: dict[str, Any]
    if args.live:
        result = {
            "machine": platform.node(),
            "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "loadavg": os.getloadavg(),
            "live": live(base, args.live, 0.5),
        }
        print(json.dumps(result, indent=2))
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=2))
        return 0
    frames, done, thread = stack(args.depth, args.distinct)
    samplers = {
        "baseline": base.Sampler(Recorder(), enabled=True, window_s=1e9),
        "this tree": current.Sampler(Recorder(), enabled=True, window_s=1e9),
    }
    same_own(samplers)
    times: dict[str, list[float]] = {name: [] for name in samplers}
    ticks: dict[str, list[float]] = {name: [] for name in samplers}
    for sampler in samplers.values():  # warm: classify the codes once
        per_sample(sampler, frames)
    for r in range(args.rounds):
        order = list(samplers) if r % 2 == 0 else list(reversed(samplers))
        for name in order:
            tick, all_in = per_sample(samplers[name], frames)
            ticks[name].append(tick)
            times[name].append(all_in)
    snapshots: dict[str, float] = {}
    for name, sampler in samplers.items():
        took = []
        for _ in range(5):
            t0 = time.perf_counter()
            sampler.snapshot()
            took.append(time.perf_counter() - t0)
        snapshots[name] = statistics.median(took)
    done.set()
    thread.join(10)
    ratios = sorted(c / b for b, c in zip(times["baseline"], times["this tree"], strict=True))
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    tick_ratios = [c / b for b, c in zip(ticks["baseline"], ticks["this tree"], strict=True)]
    result = {
        "machine": platform.node(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "loadavg": os.getloadavg(),
        "depth": args.depth,
        "distinct": args.distinct,
        "rounds": args.rounds,
        "tick_us": {k: statistics.median(v) * 1e6 for k, v in ticks.items()},
        "tick_ratio": statistics.median(tick_ratios),
        "per_sample_us": {k: statistics.median(v) * 1e6 for k, v in times.items()},
        "ratio": statistics.median(ratios),
        "ratio_quartiles": [q[0], q[2]],
        "snapshot_ms": {k: v * 1e3 for k, v in snapshots.items()},
    }
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
