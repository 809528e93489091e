"""Planted: memory growth.  The loop keeps a reference to a tensor of every
step (a "history" of activations kept for logging), so allocated device memory
grows by ``--leak-mb`` per step until the job runs out of memory."""

from __future__ import annotations

import argparse
from typing import Any

import torch
from common import forever, main
from models import mlp
from torch import nn

KEPT: list[torch.Tensor] = []


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--leak-mb", type=float, default=16.0, help="bytes kept per step")
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--max-kept-gb", type=float, default=8.0, help="stop leaking past this")


def remember(h: torch.Tensor, leak_bytes: int) -> None:
    """The leak: a slice of this step's activations, kept forever."""
    rows = max(1, leak_bytes // (h.shape[1] * h.element_size()))
    KEPT.append(h[:rows].detach().clone())


def build(args: argparse.Namespace) -> tuple[Any, Any]:
    # TF32 on, so that this job plants one cause only (FP32 matmuls are another)
    torch.set_float32_matmul_precision("high")
    model = mlp(args.width, 4).to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(args.batch, args.width, device=args.device)
    y = torch.randn(args.batch, 1, device=args.device)
    leak = int(args.leak_mb * 2**20)
    cap = int(args.max_kept_gb * 2**30)

    def step(_: int) -> None:
        h = model[0](x)
        if len(KEPT) * leak < cap:
            remember(h, leak)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return forever(lambda i: i), step


if __name__ == "__main__":
    main(build, __doc__ or "", configure)
