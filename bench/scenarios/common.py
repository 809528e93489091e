"""Shared driver for the planted-bottleneck jobs in this folder.

Each scenario module builds an iterable of batches and a ``train_step(batch)``
with one cause of slowness planted in it, then calls :func:`main`.  The driver
runs the loop for ``--seconds`` or ``--steps`` and, with ``--profile-dir``,
records ``--profile-steps`` steps with torch.profiler (CPU + CUDA activity,
``tensorboard_trace_handler``, gzipped) after ``--profile-start`` steps, the
way users profile their own jobs.  ``--flops`` adds shapes and FLOP counts.

The jobs run on the CPU too (``--device cpu``); only some causes show there.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch

Builder = Callable[[argparse.Namespace], tuple[Iterable[Any], Callable[[Any], None]]]


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seconds", type=float, default=30.0, help="stop after S seconds")
    p.add_argument("--steps", type=int, default=0, help="stop after N steps (0: by time)")
    p.add_argument("--profile-dir", default=None, help="write a torch.profiler trace here")
    p.add_argument("--profile-start", type=int, default=10, help="steps before profiling")
    p.add_argument("--profile-steps", type=int, default=3, help="steps profiled")
    p.add_argument("--flops", action="store_true", help="profile with shapes and FLOPs")
    p.add_argument("--quiet", action="store_true")
    return p


def _profiler(args: argparse.Namespace) -> Any:
    activities = [torch.profiler.ProfilerActivity.CPU]
    if args.device.startswith("cuda"):
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return torch.profiler.profile(
        activities=activities,
        schedule=torch.profiler.schedule(
            wait=max(0, args.profile_start - 1), warmup=1, active=args.profile_steps, repeat=1
        ),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(args.profile_dir, use_gzip=True),
        record_shapes=args.flops,
        with_flops=args.flops,
    )


def main(build: Builder, description: str, configure: Callable[[Any], None] | None = None) -> None:
    p = parser(description)
    if configure is not None:
        configure(p)
    args = p.parse_args()
    batches, train_step = build(args)
    prof = _profiler(args) if args.profile_dir else None
    if prof is not None:
        prof.start()
    start = time.time()
    step = 0
    profiled_until = args.profile_start + args.profile_steps + 1
    for batch in batches:
        train_step(batch)
        step += 1
        if prof is not None:
            prof.step()
            if step >= profiled_until:
                prof.stop()
                prof = None
        if args.steps and step >= args.steps:
            break
        if not args.steps and time.time() - start > args.seconds:
            break
    if prof is not None:
        prof.stop()
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    if not args.quiet:
        took = time.time() - start
        print(f"{step} steps in {took:.1f} s ({took / max(step, 1) * 1000:.1f} ms/step)")


def autocast(device: str) -> Any:
    """bf16 autocast on a GPU; plain FP32 on the CPU, where bf16 is slow."""
    if device.startswith("cuda"):
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def forever(make: Callable[[int], Any]) -> Iterable[Any]:
    """Batches made on the training thread, without a DataLoader."""
    i = 0
    while True:
        yield make(i)
        i += 1
