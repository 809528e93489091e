"""Planted: data loading.  Each sample is decoded on the training process
(``num_workers=0``) with CPU work of ``--decode-ms`` per sample and no pinned
memory, so the GPU waits for every batch."""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch
from common import autocast, main
from models import TinyLM, lm_loss
from torch.utils.data import DataLoader, Dataset


class SlowTokens(Dataset[torch.Tensor]):
    def __init__(self, vocab: int, seq: int, decode_s: float) -> None:
        self.vocab, self.seq, self.decode_s = vocab, seq, decode_s

    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, i: int) -> torch.Tensor:
        end = time.perf_counter() + self.decode_s
        while time.perf_counter() < end:  # decoding, augmenting: CPU work
            pass
        return torch.randint(0, self.vocab, (self.seq + 1,))


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--decode-ms", type=float, default=2.0, help="CPU time per sample")
    p.add_argument("--batch", type=int, default=32)


def build(args: argparse.Namespace) -> tuple[Any, Any]:
    vocab, seq = 8192, 256
    model = TinyLM(vocab, 512, 8, 4, seq).to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loader = DataLoader(SlowTokens(vocab, seq, args.decode_ms / 1000.0), batch_size=args.batch)

    def step(tokens: torch.Tensor) -> None:
        tokens = tokens.to(args.device)
        with autocast(args.device):
            loss = lm_loss(model, tokens)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return loader, step


if __name__ == "__main__":
    main(build, __doc__ or "", configure)
