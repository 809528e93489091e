"""Planted: memory-bound elementwise work.  A long chain of unfused pointwise
operations on large tensors: every op reads and writes all of it from device
memory, so DRAM bandwidth is the limit while the SMs and tensor cores wait."""

from __future__ import annotations

import argparse
from typing import Any

import torch
from common import forever, main


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mega", type=int, default=64, help="elements per tensor, in millions")
    p.add_argument("--chain", type=int, default=12, help="pointwise ops per step")


def build(args: argparse.Namespace) -> tuple[Any, Any]:
    n = args.mega * 1_000_000
    x = torch.randn(n, device=args.device)
    scale = torch.nn.Parameter(torch.ones(n, device=args.device))
    opt = torch.optim.SGD([scale], lr=1e-6)

    def step(_: int) -> None:
        h = x * scale
        for k in range(args.chain):
            h = torch.sin(h) * 1.0001 + 0.001 * k  # three kernels, none fused
        loss = h.mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return forever(lambda i: i), step


if __name__ == "__main__":
    main(build, __doc__ or "", configure)
