"""A small CPU training job for the hook tests.

Each step: one DataLoader batch whose Dataset sleeps ``--data-sleep`` seconds (so
the data phase has a known lower bound), a forward/backward through a small MLP,
an SGD step, and optionally a user phase that sleeps ``--phase-sleep``.

--install        call gputui.hook.install() (otherwise rely on `gputui run`)
--steps N        train N optimizer steps, then linger (0: train until killed)
--linger-file F  after training, wait until F exists (the test has read the hook)
--ready-file F   written with the pid once training has started
--no-optimizer   plain loop with gputui.hook.step() instead of an optimizer
--inference      forward calls under torch.inference_mode(): no backward, no
                 optimizer, no step() (each --steps is one call)
--forward-first N  N forward calls with gradients on (an evaluation that forgot
                 no_grad) before training
--workers N      DataLoader workers, started with --mp-context (default fork; a
                 list such as spawn,forkserver takes turns by epoch), the first
                 through torch.multiprocessing.set_start_method with
                 --set-start-method
--fsize-limit B  cap the size of files the job writes (RLIMIT_FSIZE, SIGXFSZ
                 ignored): writes past B bytes fail as on a full disk
--compile        run the model through torch.compile(backend="eager"), with a
                 print in its forward: a graph break (tests look for its line)
--hot KIND       each step also runs hot_numpy(), hot_python() or hot_sleep() (KIND
                 numpy, python or sleep) for --hot-ms milliseconds, inside the user phase
                 --hot-phase when given: a step that is mostly one function
--hot-in-workers the --hot work runs in the Dataset (in the DataLoader's
                 workers with --workers) instead of the training loop
--epoch-steps N  an epoch is N steps (the Dataset's length); the loader starts
                 its workers anew each epoch unless --persistent-workers
--import-framework NAME  an empty module in sys.modules under a training
                 framework's name (transformers.trainer, ...), where importing
                 the framework would put its own
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset


class SleepyBatches(Dataset):  # type: ignore[type-arg]
    def __init__(self, n: int, batch: int, sleep: float, hot: Any = None) -> None:
        self.n = n
        self.batch = batch
        self.sleep = sleep
        self.hot = hot  # (function, milliseconds) run for each batch

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.sleep:
            time.sleep(self.sleep)
        if self.hot is not None:
            self.hot[0](self.hot[1])
        g = torch.Generator().manual_seed(idx)
        return torch.randn(self.batch, 32, generator=g), torch.randn(self.batch, 1, generator=g)


class Breaking(torch.nn.Module):
    """The MLP with a graph break in its forward (``--compile``)."""

    def __init__(self, inner: torch.nn.Sequential) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inner[0](x))
        print(end="")  # GRAPH BREAK
        return self.inner[2](h)  # type: ignore[no-any-return]


def hot_numpy(ms: float) -> float:
    """numpy work for about ``ms`` milliseconds."""
    import numpy as np

    end = time.perf_counter() + ms / 1000
    values = np.random.default_rng(0).random(100_000)
    total = 0.0
    while time.perf_counter() < end:
        total += float(np.sort(values)[values.size // 2])
    return total


def hot_python(ms: float) -> int:
    """Pure-Python work for about ``ms`` milliseconds."""
    end = time.perf_counter() + ms / 1000
    total = 0
    while time.perf_counter() < end:
        for i in range(1000):
            total += i * i
    return total


def hot_sleep(ms: float) -> None:
    """A wait off the CPU (as blocking I/O is) for ``ms`` milliseconds."""
    time.sleep(ms / 1000)


def train_step(args: argparse.Namespace, hook: Any, model: Any, opt: Any, x: Any, y: Any) -> None:
    """One training step: forward, backward, the user phase, then the optimizer
    (or, with --no-optimizer, a hand-written update and gputui.hook.step())."""
    import torch

    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    if args.phase_sleep and hook is not None:
        with hook.phase("user_sleep"):
            time.sleep(args.phase_sleep)
    if args.no_optimizer:
        with torch.no_grad():
            for param in model.parameters():
                assert param.grad is not None
                param.sub_(0.01 * param.grad)
                param.grad = None
        if hook is not None:
            hook.step()
    else:
        opt.step()
        opt.zero_grad()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--install", action="store_true")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--data-sleep", type=float, default=0.0)
    p.add_argument("--phase-sleep", type=float, default=0.0)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--mp-context", default="fork", help="fork, spawn, forkserver; or a list")
    p.add_argument("--set-start-method", action="store_true")
    p.add_argument("--fsize-limit", type=int)
    p.add_argument("--ready-file")
    p.add_argument("--linger-file")
    p.add_argument("--no-optimizer", action="store_true")
    p.add_argument("--inference", action="store_true")
    p.add_argument("--forward-first", type=int, default=0)
    p.add_argument("--batch-size-hint", type=int)
    p.add_argument("--device", default="cpu")
    p.add_argument("--user-profiler", action="store_true", help="train inside torch.profiler")
    p.add_argument("--tag", action="append", default=[], help="ignored: carries any text in argv")
    p.add_argument("--hot", choices=["numpy", "python", "sleep"])
    p.add_argument("--hot-ms", type=float, default=30.0)
    p.add_argument("--hot-phase")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--hot-in-workers", action="store_true")
    p.add_argument("--epoch-steps", type=int, default=0)
    p.add_argument("--persistent-workers", action="store_true")
    p.add_argument("--import-framework")
    args = p.parse_args()
    if args.fsize_limit is not None:
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (args.fsize_limit, args.fsize_limit))
    if args.user_profiler:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]):
            return train(args)
    return train(args)


def train(args: argparse.Namespace) -> int:
    torch.set_num_threads(1)
    if args.import_framework:
        import types

        sys.modules.setdefault(args.import_framework, types.ModuleType(args.import_framework))
    if args.install:
        import gputui.hook

        gputui.hook.install(batch_size=args.batch_size_hint)
    try:
        import gputui.hook as hook
    except ImportError:
        hook = None  # type: ignore[assignment]

    device = torch.device(args.device)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if args.compile:
        model = torch.compile(Breaking(model), backend="eager")  # type: ignore[assignment]
    total = args.steps if args.steps > 0 else 10**9
    hot = {"numpy": hot_numpy, "sleep": hot_sleep}.get(args.hot or "", hot_python)
    in_data = (hot, args.hot_ms) if args.hot and args.hot_in_workers else None
    length = args.epoch_steps or min(total, 10**6)
    data = SleepyBatches(length, args.batch, args.data_sleep, in_data)
    # One loader per start method, taking turns by epoch: each epoch starts its
    # workers afresh.  With --set-start-method the first method is made the
    # process-wide one and its loader names none.
    contexts: list[str | None] = list(args.mp_context.split(",")) if args.workers else [None]
    if args.workers and args.set_start_method:
        torch.multiprocessing.set_start_method(contexts[0], force=True)
        contexts[0] = None
    if len(contexts) > 1:
        data = SleepyBatches(max(1, total // len(contexts)), args.batch, args.data_sleep, in_data)
    loaders = [
        DataLoader(
            data,
            batch_size=None,
            num_workers=args.workers,
            multiprocessing_context=c,
            persistent_workers=args.persistent_workers and args.workers > 0,
        )
        for c in contexts
    ]
    probe = torch.randn(args.batch, 32, device=device)
    for _ in range(args.forward_first):
        model(probe)
    done = 0
    epoch = 0
    while done < total:
        loader = loaders[epoch % len(loaders)]
        epoch += 1
        for x, y in loader:
            if args.hot and not args.hot_in_workers:
                if args.hot_phase and hook is not None:
                    with hook.phase(args.hot_phase):
                        hot(args.hot_ms)
                else:
                    hot(args.hot_ms)
            x, y = x.to(device), y.to(device)
            if args.inference:
                with torch.inference_mode():
                    model(x)
            else:
                train_step(args, hook, model, opt, x, y)
            done += 1
            if done == 1 and args.ready_file:
                with open(args.ready_file + ".tmp", "w") as fh:
                    fh.write(str(os.getpid()))
                os.replace(args.ready_file + ".tmp", args.ready_file)
            if done >= total:
                break
    print(f"trained {done} steps", flush=True)

    if args.linger_file:
        # the test touches the file once it has read the hook; the deadline only
        # ends a job whose test died (generous: a loaded machine reads slowly)
        deadline = time.monotonic() + 600
        while not os.path.exists(args.linger_file) and time.monotonic() < deadline:
            time.sleep(0.02)
    return 0


if __name__ == "__main__":
    sys.exit(main())
