"""Planted: host-to-device copies from pageable memory.  Each step copies a
large batch that lives in ordinary (not pinned) host memory; ``non_blocking``
cannot make such a copy asynchronous, so the training thread waits for it and
the GPU computes nothing meanwhile."""

from __future__ import annotations

import argparse
from typing import Any

import torch
from common import autocast, forever, main
from torch import nn


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--batch-mb", type=int, default=512, help="bytes copied per step")
    p.add_argument("--width", type=int, default=4096)


def build(args: argparse.Namespace) -> tuple[Any, Any]:
    rows = args.batch_mb * 2**20 // (4 * args.width)
    host = torch.randn(rows, args.width)  # pageable: no pin_memory()
    model = nn.Sequential(nn.Linear(args.width, 1024), nn.ReLU(), nn.Linear(1024, 1))
    model = model.to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(_: int) -> None:
        x = host.to(args.device, non_blocking=True)
        with autocast(args.device):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return forever(lambda i: i), step


if __name__ == "__main__":
    main(build, __doc__ or "", configure)
