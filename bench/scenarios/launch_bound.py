"""Planted: launch-bound steps.  A deep, narrow MLP on a small batch runs
thousands of kernels of a few microseconds each; a single-tensor optimizer
(``foreach=False``) and ``zero_grad(set_to_none=False)`` add one small kernel
per parameter.  The GPU idles between kernels while Python launches the next."""

from __future__ import annotations

import argparse
from typing import Any

import torch
from common import forever, main
from models import mlp
from torch import nn


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--depth", type=int, default=48)
    p.add_argument("--batch", type=int, default=32)


def build(args: argparse.Namespace) -> tuple[Any, Any]:
    model = mlp(args.width, args.depth).to(args.device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, foreach=False)
    x = torch.randn(args.batch, args.width, device=args.device)
    y = torch.randn(args.batch, 1, device=args.device)

    def step(_: int) -> None:
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)

    return forever(lambda i: i), step


if __name__ == "__main__":
    main(build, __doc__ or "", configure)
