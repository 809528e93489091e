"""Planted: host synchronisation.  The loop reads values back to the CPU in the
middle of the step (``.item()`` after every block, a ``nonzero()`` with a
data-dependent shape, the loss logged each step), so the CPU waits for the GPU
and the GPU then waits for the CPU to launch the next kernels."""

from __future__ import annotations

import argparse
from typing import Any

import torch
from common import forever, main
from torch import nn


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--depth", type=int, default=12)
    p.add_argument("--batch", type=int, default=512)


def build(args: argparse.Namespace) -> tuple[Any, Any]:
    # TF32 on, so that this job plants one cause only (FP32 matmuls are another)
    torch.set_float32_matmul_precision("high")
    blocks = nn.ModuleList(
        nn.Sequential(nn.Linear(args.width, args.width), nn.GELU()) for _ in range(args.depth)
    ).to(args.device)
    head = nn.Linear(args.width, 1).to(args.device)
    params = list(blocks.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    x = torch.randn(args.batch, args.width, device=args.device)
    y = torch.randn(args.batch, 1, device=args.device)
    log: list[float] = []

    def step(_: int) -> None:
        h = x
        for block in blocks:
            h = block(h)
            if h.abs().max().item() > 1e6:  # a "safety check" that syncs every block
                h = h.clamp(-1e6, 1e6)
        active = (h > 0).nonzero()  # data-dependent shape: another sync
        loss = nn.functional.mse_loss(head(h), y) + 0.0 * active.shape[0]
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        log.append(loss.item())  # logged every step: one more sync

    return forever(lambda i: i), step


if __name__ == "__main__":
    main(build, __doc__ or "", configure)
