"""Overhead and latency of the gputui hook, against its performance targets.

    python bench/bench_hook.py --out bench-hook.json          # on a GPU machine
    python bench/bench_hook.py --cpu --out /tmp/bench.json    # small sizes, CPU only

1. Overhead: the same training loop with and without the hook, in blocks of a
   few steps that alternate many times, the hook installed once and its hook
   points taken out and put back between blocks (see ``interleaved``), with an
   A/A "control"; without and with a viewer (a separate process at the default
   rates).  The median of the per-cycle ratios, their quartiles, and the I/O
   thread's own CPU time per step, added in full for an upper bound.  Two
   models: a launch-bound MLP (2-5 ms steps on an H100) and a ~50 ms
   transformer.  ``--install-blocks`` adds the older method: the hook installed
   before and removed after each block.
2. Capture of 5 steps on the transformer: what our code adds to the step that
   ends the window beyond torch.profiler's own stop, the time until the table
   reaches a viewer after the window ends, and, in the same run, the
   ``key_averages()`` route vs. our raw-event reduction on the same profile.
3. 1,000 steps/s to a connected viewer: every record delivered, or the dropped
   count exact.

``--ddp`` adds the MLP under DistributedDataParallel (one rank, gloo, in this
process): the hook's blocks train a DDP model built after the hook was
installed (its gradient all-reduce timed as "comm"), the other blocks a twin
built before (DDP's own C++ all-reduce).  ``--tree PATH`` measures the gputui
package of another checkout (before/after a change: see bench_hook_trees.py);
``--interleaved-only`` skips the capture and throughput parts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# --tree PATH: the gputui package of that checkout (read before importing it)
TREE = Path(sys.argv[sys.argv.index("--tree") + 1]) if "--tree" in sys.argv[:-1] else REPO
sys.path.insert(0, str(TREE))

import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import gputui.hook  # noqa: E402
from gputui.client.hook import HookClient  # noqa: E402
from gputui.hook._server import IDLE_TICK_S  # noqa: E402

# The capture part's imports are in capture(): the interleaved part also runs
# against older checkouts (--tree), which lack some of them.

VIEWER = r"""
import json, sys
from gputui.client.hook import HookClient, StepBatch, Synced
pid, target = int(sys.argv[1]), int(sys.argv[2])
c = HookClient.connect(pid)
c.subscribe(history=0)
c.start()
received = missed = 0
last = -1
print("ready", flush=True)
for ev in c.events():
    if isinstance(ev, StepBatch):
        received += len(ev.steps)
        missed += ev.missed
        last = ev.steps[-1].index
        if target >= 0 and last >= target - 1:
            break
print(json.dumps({"received": received, "missed": missed, "last": last}), flush=True)
"""


def start_viewer(target: int = -1) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(TREE))
    proc = subprocess.Popen(
        [sys.executable, "-c", VIEWER, str(os.getpid()), str(target)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # blocks until subscribed
    if line.strip() != "ready":
        raise RuntimeError(f"viewer failed to start: {line!r}")
    return proc


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


class Workload:
    def __init__(
        self,
        name: str,
        model: torch.nn.Module,
        make_batch: Any,
        loss_fn: Any,
        device: torch.device,
        batch: int,
    ) -> None:
        self.name = name
        self.model = model.to(device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.device = device
        self.loss_fn = loss_fn
        x, y = make_batch()
        # A DataLoader over a small in-memory set, so the data hook is exercised;
        # pinned, so that copies to the GPU do not wait for it (a launch-bound job
        # stays launch-bound instead of waiting for the GPU at every step).
        self.loader = DataLoader(
            TensorDataset(x, y),
            batch_size=batch,
            shuffle=False,
            pin_memory=device.type == "cuda",
        )
        self.iter = iter(self.loader)

    def step(self) -> None:
        try:
            x, y = next(self.iter)
        except StopIteration:
            self.iter = iter(self.loader)
            x, y = next(self.iter)
        x = x.to(self.device, non_blocking=True)
        y = y.to(self.device, non_blocking=True)
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def block(self, steps: int) -> float:
        """Mean step time over ``steps``; per-step times are kept in ``last_steps``.

        Without a sync between steps, a step's time is how long the training thread
        took to issue it, and once the launch queue is full, how long the GPU took:
        the median over many steps ignores the machine's occasional stalls."""
        sync(self.device)
        clock = time.perf_counter
        t0 = prev = clock()
        per_step = []
        for _ in range(steps):
            self.step()
            now = clock()
            per_step.append(now - prev)
            prev = now
        sync(self.device)
        self.last_steps = per_step
        return (clock() - t0) / steps


def mlp(device: torch.device, cpu: bool, layers: int) -> Workload:
    width, batch = (64, 16) if cpu else (1024, 64)
    mods: list[torch.nn.Module] = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.GELU()]
    model = torch.nn.Sequential(*mods)
    n = batch * 8
    return Workload(
        f"mlp{layers}",
        model,
        lambda: (torch.randn(n, width), torch.randn(n, width)),
        torch.nn.functional.mse_loss,
        device,
        batch,
    )


class DdpPair(Workload):
    """The MLP under DistributedDataParallel, twice: ``plain`` built before the
    hook is installed (DDP's C++ all-reduce), ``timed`` after (the hook times
    its all-reduce wait); ``use`` picks the one the next block trains."""

    def __init__(self, base: Workload) -> None:
        import copy
        import socket

        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        if not dist.is_initialized():
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            dist.init_process_group(
                "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1
            )
        self.__dict__.update(base.__dict__)
        self.name = f"ddp-{base.name}"
        self._ddp = DistributedDataParallel
        self._twin = copy.deepcopy(base.model)
        self.plain = (DistributedDataParallel(base.model), self.opt)
        self.timed: tuple[Any, Any] | None = None
        self.model, self.opt = self.plain

    def prepare_hooked(self) -> None:
        if self.timed is None:
            model = self._ddp(self._twin)
            self.timed = (model, torch.optim.AdamW(model.parameters(), lr=1e-4))

    def use(self, hooked: bool) -> None:
        assert self.timed is not None
        self.model, self.opt = self.timed if hooked else self.plain


def transformer(device: torch.device, cpu: bool) -> Workload:
    d, layers, seq, batch = (64, 2, 32, 4) if cpu else (1024, 6, 512, 8)
    layer = torch.nn.TransformerEncoderLayer(
        d, nhead=8 if d >= 64 else 2, dim_feedforward=4 * d, batch_first=True
    )
    model = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
    n = batch * 4
    return Workload(
        "transformer",
        model,
        lambda: (torch.randn(n, seq, d), torch.randn(n, seq, d)),
        torch.nn.functional.mse_loss,
        device,
        batch,
    )


#: A viewer that stays up across the benchmark's install/uninstall cycles: each
#: line on its stdin makes it connect to the new hook and read until the hook
#: goes away.  It waits on stdin in between, so it costs nothing to the blocks
#: without a viewer.
PERSISTENT_VIEWER = r"""
import sys, time
from gputui.client.hook import HookClient
pid = int(sys.argv[1])
print("ready", flush=True)
for _ in sys.stdin:
    client = None
    for _attempt in range(500):
        try:
            client = HookClient.connect(pid, timeout=1.0)
            break
        except Exception:
            time.sleep(0.002)
    if client is None:
        continue
    try:
        client.subscribe(history=0)
        client.start()
        for _ in client.events():
            pass
    except Exception:
        pass
    finally:
        client.close()
"""


def start_persistent_viewer() -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(TREE))
    proc = subprocess.Popen(
        [sys.executable, "-c", PERSISTENT_VIEWER, str(os.getpid())],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError("viewer failed to start")
    return proc


def attach_viewer(viewer: subprocess.Popen[str], hook: Any) -> bool:
    """Tell the viewer to connect to the hook just installed; True once it has."""
    assert viewer.stdin is not None
    viewer.stdin.write("connect\n")
    viewer.stdin.flush()
    return wait_for_viewer(hook)


def wait_for_viewer(hook: Any, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        server = hook.server
        if server is not None and any(v.subscribed for v in list(server.viewers.values())):
            return True
        time.sleep(0.001)
    return False


def thread_cpu_ns(native_id: int | None) -> int:
    """CPU time of one thread of this process (Linux schedstat), 0 if unknown."""
    if native_id is None:
        return 0
    try:
        with open(f"/proc/self/task/{native_id}/schedstat") as f:
            return int(f.read().split()[0])
    except OSError:
        return 0


def io_thread_id() -> int | None:
    import threading

    for thread in threading.enumerate():
        if thread.name.startswith("gputui"):
            return thread.native_id
    return None


def overhead(work: Workload, block: int, cycles: int) -> dict[str, Any]:
    """Short blocks of ``block`` steps, the modes alternating ``cycles`` times.

    Blocks of a fraction of a second, in a rotating order, so the machine's drift
    (whole seconds of ±10% on a shared VM) hits every mode alike; the hook is
    installed before and uninstalled after each of its blocks, and its first two
    steps (root-module detection) are not timed.  A viewer process stays up and
    reconnects to every new hook before its block starts."""
    # "control" is "no_hook" again: its ratio to "no_hook" is the method's noise
    modes = ["no_hook", "control", "hook", "hook_viewer"]
    per_block: dict[str, list[float]] = {m: [] for m in modes}
    steps: dict[str, list[float]] = {m: [] for m in modes}
    work.block(max(3, block))  # warm-up (allocator, cuBLAS handles, autotuning)
    viewer = start_persistent_viewer()
    unattached = 0
    try:
        for c in range(cycles):
            order = modes[c % 4 :] + modes[: c % 4]  # no mode always runs first
            for mode in order:
                hooked = mode.startswith("hook")
                if not hooked:
                    work.block(2)
                else:
                    hook = gputui.hook.install()
                    if mode == "hook_viewer" and not attach_viewer(viewer, hook):
                        unattached += 1
                    work.block(2)  # root-module detection happens in the first step
                # the block's mean step, GPU work included (synchronized at both ends)
                per_block[mode].append(work.block(block))
                steps[mode].extend(work.last_steps)
                if hooked:
                    gputui.hook.uninstall()
    finally:
        viewer.terminate()
        viewer.wait()

    def paired(mode: str) -> list[float]:
        return [a / b for a, b in zip(per_block[mode], per_block["no_hook"], strict=True)]

    def quartiles(values: list[float]) -> list[float]:
        q = statistics.quantiles(values, n=4)
        return [round(q[0], 4), round(q[2], 4)]

    med = {m: statistics.median(v) for m, v in per_block.items()}
    med_all = {m: statistics.median(v) for m, v in steps.items()}
    return {
        "workload": work.name,
        "steps_per_block": block,
        "cycles": cycles,
        "viewer_not_attached_blocks": unattached,
        # the median over blocks of a mode's mean step time, and its ratio to no hook
        "median_step_ms": {m: round(v * 1000, 4) for m, v in med.items()},
        "ratio": {m: round(med[m] / med["no_hook"], 4) for m in modes},
        # per cycle: a mode's block over the no-hook block of the same cycle; the
        # median of those ratios, and their quartiles (the noise)
        "paired_ratio_median": {m: round(statistics.median(paired(m)), 4) for m in modes},
        # the median of every single step (the time to issue it, for a job that
        # runs ahead of the GPU), and its ratio to no hook
        "per_step_median_ms": {m: round(v * 1000, 4) for m, v in med_all.items()},
        "per_step_ratio": {m: round(med_all[m] / med_all["no_hook"], 4) for m in modes},
        "paired_ratio_quartiles": {m: quartiles(paired(m)) for m in modes[1:]},
        "io_thread_cpu_us_per_step": io_thread_cost(work, steps=20 * block),
    }


def interleaved(work: Workload, block: int, cycles: int, with_viewer: bool) -> dict[str, Any]:
    """The hook installed once; its hook points taken out and put back between
    blocks of a few steps (``TorchHooks.suspend``/``resume``, outside the timed
    steps), so that a block with the hook and one without are a few milliseconds
    apart and the VM's drift cancels in their ratio.  "control" is a block
    without the hook compared with another one: the method's own noise.

    The I/O thread's periodic rounds are held during the blocks, and its CPU
    time per step (it may hold the GIL meanwhile) is measured on its own, over
    a run of hooked steps, and added in full to the per-block ratio: an upper
    bound, as if the training thread waited for all of it."""
    hook = gputui.hook.install()
    assert hook is not None
    th = hook.torch_hooks
    pair = work if isinstance(work, DdpPair) else None
    if pair is not None:
        pair.prepare_hooked()
        pair.use(True)
    viewer = None
    if with_viewer:
        viewer = start_persistent_viewer()
        if not attach_viewer(viewer, hook):
            raise RuntimeError("viewer did not attach")
    work.block(max(20, block))  # root detection, warm-up
    modes = ["hook", "no_hook", "control"]
    per_block: dict[str, list[float]] = {m: [] for m in modes}
    server = hook.server
    assert server is not None
    # The I/O thread's rounds are held while the blocks alternate: a round that
    # is due runs at the next backward, so it would always land in a hooked block
    # and weigh on it as if every step had paid for it (the steps pile up in the
    # training thread's deque meanwhile, well within its 16,384).
    run_round = server._tick
    server._tick = lambda now: None  # type: ignore[method-assign]
    try:
        for c in range(cycles):
            for mode in modes[c % 3 :] + modes[: c % 3]:
                # The same two toggles before every block, in the order that
                # leaves the block's mode: each one changes classes and module
                # globals, which costs the next steps a little (caches refill).
                if mode == "hook":
                    th.suspend()
                    th.resume()
                else:
                    th.resume()
                    th.suspend()
                if pair is not None:
                    pair.use(mode == "hook")
                per_block[mode].append(work.block(block))
        # The I/O thread's time per step, over a run of steps all hooked.
        server._tick = run_round  # type: ignore[method-assign]
        th.resume()
        if pair is not None:
            pair.use(True)
        # First the held steps (thousands) are replayed, and sent to the viewer:
        # not a steady-state cost, so a few rounds go by before measuring.
        settle = time.perf_counter() + 4 * IDLE_TICK_S
        while time.perf_counter() < settle:
            work.step()
        sync(work.device)
        io_tid = io_thread_id()
        # at least 2 s of steps: several of the I/O thread's rounds
        io_steps = max(
            int(cycles * block / 2), int(2.0 / statistics.median(per_block["no_hook"])) + 1
        )
        io0 = thread_cpu_ns(io_tid)
        work.block(io_steps)
        io_us = (thread_cpu_ns(io_tid) - io0) / io_steps / 1000
    finally:
        gputui.hook.uninstall()
        if viewer is not None:
            viewer.terminate()
            viewer.wait()

    def paired(mode: str) -> list[float]:
        return [a / b for a, b in zip(per_block[mode], per_block["no_hook"], strict=True)]

    base = statistics.median(per_block["no_hook"])
    ratio = statistics.median(paired("hook"))
    q = {m: statistics.quantiles(paired(m), n=4) for m in ("hook", "control")}
    return {
        "workload": work.name,
        "viewer": with_viewer,
        "steps_per_block": block,
        "cycles": cycles,
        "median_step_ms": {m: round(statistics.median(v) * 1000, 4) for m, v in per_block.items()},
        "paired_ratio_median": {
            m: round(statistics.median(paired(m)), 4) for m in ("hook", "control")
        },
        "paired_ratio_quartiles": {m: [round(q[m][0], 4), round(q[m][2], 4)] for m in q},
        "io_thread_cpu_us_per_step": round(io_us, 2),
        # the per-block ratio plus the whole I/O thread time per step
        "overhead_upper_bound": round(ratio - 1 + io_us / 1e6 / base, 4),
    }


def io_thread_cost(work: Workload, steps: int) -> dict[str, float]:
    """What the hook's I/O thread spends per step (it holds the GIL meanwhile),
    without and with a viewer, over one long block each."""
    out: dict[str, float] = {}
    for mode in ("hook", "hook_viewer"):
        hook = gputui.hook.install()
        viewer = start_persistent_viewer() if mode == "hook_viewer" else None
        if viewer is not None:
            attach_viewer(viewer, hook)
        work.block(2)
        tid = io_thread_id()
        cpu0 = thread_cpu_ns(tid)
        work.block(steps)
        out[mode] = round((thread_cpu_ns(tid) - cpu0) / steps / 1000, 2)
        gputui.hook.uninstall()
        if viewer is not None:
            viewer.terminate()
            viewer.wait()
    return out


def capture(work: Workload, device: torch.device) -> dict[str, Any]:
    from gputui.hook._reduce import extract, reduce_events
    from gputui.protocol.capture import CaptureResult
    from gputui.trace.trace_metrics import compute as compute_trace_metrics

    hook = gputui.hook.install()
    assert hook is not None
    client = HookClient.connect(os.getpid())
    client.start()
    work.block(3)
    step_ms: list[float] = []
    cid = client.request_capture(steps=5, warmup=1)
    got: list[tuple[float, CaptureResult]] = []

    def done() -> bool:
        while (ev := client.get(timeout=0)) is not None:
            if isinstance(ev, CaptureResult) and ev.id == cid:
                got.append((time.time(), ev))
        return bool(got)

    deadline = time.monotonic() + 300
    while not done() and time.monotonic() < deadline:
        t0 = time.perf_counter()
        work.step()
        sync(device)
        step_ms.append((time.perf_counter() - t0) * 1000)
    client.close()
    gputui.hook.uninstall()
    if not got:
        return {"error": "no capture result"}
    arrived, res = got[0]
    window_end = res.window_end_wall or arrived
    out = {
        "events": res.events,
        "profiler_stop_ms": res.stop_ms,
        "hook_stall_ms": res.hook_stall_ms,
        "reduce_ms": res.reduce_ms,
        "export_ms": res.export_ms,
        "table_ready_after_window_ms": res.ready_after_ms,
        "table_at_viewer_after_window_ms": round((arrived - window_end) * 1000, 1),
        "trace_bytes": res.trace_bytes,
        "step_ms_during": [round(x, 3) for x in step_ms],
        "top_kernels": [k.name[:80] for k in res.kernels[:5]],
    }
    # The key_averages() route, same workload, same run: what we avoid.
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    work.step()  # the warm-up step
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(5):
            work.step()
    sync(device)
    t0 = time.perf_counter()
    events = prof.profiler.kineto_results.events()
    reduce_events(events)
    t1 = time.perf_counter()
    prof.key_averages()
    t2 = time.perf_counter()
    # the trace metrics' part of that reduction (included in it), same events
    timeline = extract(events)[3]
    t3 = time.perf_counter()
    compute_trace_metrics(timeline)
    t4 = time.perf_counter()
    out["same_profile_raw_reduce_ms"] = round((t1 - t0) * 1000, 1)
    out["same_profile_key_averages_ms"] = round((t2 - t1) * 1000, 1)
    out["same_profile_trace_metrics_ms"] = round((t4 - t3) * 1000, 1)
    return out


def rate(steps_per_s: float, seconds: float) -> dict[str, Any]:
    gputui.hook.install()
    total = int(steps_per_s * seconds)
    viewer = start_viewer(target=total)
    period = 1.0 / steps_per_s
    gputui.hook.step()  # starts step 0
    t_next = time.perf_counter()
    t0 = t_next
    for _ in range(total):
        t_next += period
        while time.perf_counter() < t_next:
            pass
        gputui.hook.step()
    elapsed = time.perf_counter() - t0
    assert viewer.stdout is not None
    try:
        out, _ = viewer.communicate(timeout=60)
        result = json.loads(out.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        viewer.kill()
        result = {"error": "viewer did not report"}
    gputui.hook.uninstall()
    result.update(
        steps=total,
        achieved_steps_per_s=round(total / elapsed, 1),
        exact=result.get("received", 0) + result.get("missed", 0) == total,
    )
    return result


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--cpu", action="store_true", help="small sizes on the CPU")
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--cycles", type=int, default=1500, help="MLP: cycles of the three modes")
    p.add_argument("--mlp-layers", type=int, default=16)
    p.add_argument("--mlp-block", type=int, default=5, help="MLP steps per block")
    p.add_argument("--tf-block", type=int, default=2, help="transformer steps per block")
    p.add_argument("--tf-cycles", type=int, default=40)
    p.add_argument("--ddp", action="store_true", help="also the MLP under DDP (gloo, 1 rank)")
    p.add_argument("--tree", help="measure the gputui package of this checkout")
    p.add_argument("--interleaved-only", action="store_true", help="no capture, no throughput run")
    p.add_argument(
        "--install-blocks",
        action="store_true",
        help="also the older method: the hook installed before and removed after each block",
    )
    args = p.parse_args()
    if not args.cpu and not torch.cuda.is_available():
        p.error("no CUDA device: use --cpu")
    device = torch.device("cpu" if args.cpu else "cuda")
    torch.manual_seed(0)
    results: dict[str, Any] = {
        "device": "cpu" if args.cpu else torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "tree": str(TREE),
    }
    m = mlp(device, args.cpu, args.mlp_layers)
    tf = transformer(device, args.cpu)
    m.block(100)  # warm-up (allocator, cuBLAS handles)
    tf.block(3)
    results["interleaved"] = [
        interleaved(m, args.mlp_block, args.cycles, with_viewer=False),
        interleaved(m, args.mlp_block, args.cycles, with_viewer=True),
        interleaved(tf, args.tf_block, args.tf_cycles, with_viewer=False),
        interleaved(tf, args.tf_block, args.tf_cycles, with_viewer=True),
    ]
    if args.ddp:
        pair = DdpPair(mlp(device, args.cpu, args.mlp_layers))
        pair.block(100)
        results["interleaved"] += [
            interleaved(pair, args.mlp_block, args.cycles, with_viewer=False),
            interleaved(pair, args.mlp_block, args.cycles, with_viewer=True),
        ]
    if args.install_blocks:
        results["overhead"] = [overhead(m, 30, 150), overhead(tf, 5, args.tf_cycles)]
    if args.interleaved_only:
        print(json.dumps(results["interleaved"]) if not args.out else "", end="")
        if args.out:
            Path(args.out).write_text(json.dumps(results, indent=2))
        return 0
    results["capture"] = capture(tf, device)
    results["rate_1000"] = rate(1000.0, 5.0)
    print(
        f"{'workload':<12} {'viewer':>6} {'no hook ms':>11} {'hook/none':>10} "
        f"{'quartiles':>18} {'control':>8} {'I/O us/step':>12} {'upper bound':>12}"
    )
    for o in results["interleaved"]:
        pr, q = o["paired_ratio_median"], o["paired_ratio_quartiles"]
        print(
            f"{o['workload']:<12} {'yes' if o['viewer'] else 'no':>6} "
            f"{o['median_step_ms']['no_hook']:>11.3f} {pr['hook']:>10.4f} "
            f"{q['hook']!s:>18} {pr['control']:>8.4f} "
            f"{o['io_thread_cpu_us_per_step']:>12.2f} {o['overhead_upper_bound']:>+12.2%}"
        )
    for o in results.get("overhead", []):
        pr, q = o["paired_ratio_median"], o["paired_ratio_quartiles"]
        print(
            f"install per block, {o['workload']}: hook {pr['hook']:.4f} {q['hook']}, "
            f"+viewer {pr['hook_viewer']:.4f} {q['hook_viewer']}, control {pr['control']:.4f}"
        )
    c = results["capture"]
    print(
        f"capture 5 steps: profiler stop {c.get('profiler_stop_ms')} ms, hook stall "
        f"{c.get('hook_stall_ms')} ms, table at viewer "
        f"{c.get('table_at_viewer_after_window_ms')} ms after the window "
        f"(reduce {c.get('reduce_ms')} ms, export {c.get('export_ms')} ms, "
        f"{c.get('events')} events); same profile: raw reduce "
        f"{c.get('same_profile_raw_reduce_ms')} ms (trace metrics "
        f"{c.get('same_profile_trace_metrics_ms')} ms of it) vs key_averages "
        f"{c.get('same_profile_key_averages_ms')} ms"
    )
    r = results["rate_1000"]
    print(
        f"1000 steps/s for 5 s: {r.get('received')} received + {r.get('missed')} missed of "
        f"{r['steps']} (exact: {r['exact']}), achieved {r['achieved_steps_per_s']} steps/s"
    )
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
