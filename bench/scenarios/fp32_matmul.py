"""Planted: FP32 matrix products with TF32 off.  Large Linear layers run in
full FP32 precision (``torch.backends.cuda.matmul.allow_tf32 = False``, no
autocast), so on an Ampere or newer GPU the tensor cores sit idle while the
plain FP32 pipes do all the work."""

from __future__ import annotations

import argparse
from typing import Any

import torch
from common import forever, main
from models import mlp
from torch import nn


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--batch", type=int, default=4096)


def build(args: argparse.Namespace) -> tuple[Any, Any]:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    model = mlp(args.width, args.depth).to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    x = torch.randn(args.batch, args.width, device=args.device)
    y = torch.randn(args.batch, 1, device=args.device)

    def step(_: int) -> None:
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return forever(lambda i: i), step


if __name__ == "__main__":
    main(build, __doc__ or "", configure)
