"""Healthy baseline: a bf16 transformer with a pinned, multi-worker DataLoader,
a fused optimizer and no host synchronisation.  gputui should find nothing here
that costs 10% of the step or more."""

from __future__ import annotations

import argparse
from typing import Any

import torch
from common import autocast, main
from models import TinyLM, lm_loss
from torch.utils.data import DataLoader, Dataset


class Tokens(Dataset[torch.Tensor]):
    def __init__(self, vocab: int, seq: int) -> None:
        self.vocab, self.seq = vocab, seq

    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.randint(0, self.vocab, (self.seq + 1,))


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--d", type=int, default=1024)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--workers", type=int, default=4)


def build(args: argparse.Namespace) -> tuple[Any, Any]:
    cuda = args.device.startswith("cuda")
    vocab = 32000
    model = TinyLM(vocab, args.d, 16, args.layers, args.seq).to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    loader = DataLoader(
        Tokens(vocab, args.seq),
        batch_size=args.batch,
        num_workers=args.workers,
        pin_memory=cuda,
        persistent_workers=args.workers > 0,
        prefetch_factor=4 if args.workers else None,
    )

    def step(tokens: torch.Tensor) -> None:
        tokens = tokens.to(args.device, non_blocking=True)
        with autocast(args.device):
            loss = lm_loss(model, tokens)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return loader, step


if __name__ == "__main__":
    main(build, __doc__ or "", configure)
