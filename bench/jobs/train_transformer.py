"""A real PyTorch training job: a small decoder-only transformer on random tokens.

Used to record the demo session, to measure the hook and to take attach-screen
screenshots.  ``--starve A:B`` makes the data loader slow between A and B seconds
after start, so a recording shows what a data-starved GPU looks like.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

# the scenarios' transformer: the same model everywhere a bf16 LM is measured
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scenarios"))
from models import TinyLM


class RandomTokens(Dataset[torch.Tensor]):
    def __init__(self, vocab: int, seq: int, start: float, starve: tuple[float, float] | None):
        self.vocab, self.seq, self.start, self.starve = vocab, seq, start, starve

    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.starve is not None:
            elapsed = time.time() - self.start
            if self.starve[0] <= elapsed < self.starve[1]:
                time.sleep(0.02)  # a slow disk / decode step
        return torch.randint(0, self.vocab, (self.seq + 1,))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--steps", type=int, default=0, help="stop after N steps (0: by time)")
    p.add_argument("--d", type=int, default=1024)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--starve", default=None, help="A:B seconds with a slow data loader")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()

    start = time.time()
    starve = tuple(float(x) for x in args.starve.split(":")) if args.starve else None
    data = RandomTokens(args.vocab, args.seq, start, starve)  # type: ignore[arg-type]
    loader = DataLoader(
        data, batch_size=args.batch, num_workers=args.workers, pin_memory=args.device == "cuda"
    )
    model = TinyLM(args.vocab, args.d, 16, args.layers, args.seq).to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    try:
        import gputui.hook

        gputui.hook.set_batch_size(args.batch)
    except ImportError:
        pass
    amp = torch.autocast(args.device, dtype=torch.bfloat16)
    step = 0
    for batch in loader:
        batch = batch.to(args.device, non_blocking=True)
        with amp:
            logits = model(batch[:, :-1])
            loss = nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]).float(), batch[:, 1:].reshape(-1)
            )
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        if args.steps and step >= args.steps:
            break
        if not args.steps and time.time() - start > args.seconds:
            break
    print(f"trained {step} steps in {time.time() - start:.1f}s", flush=True)


if __name__ == "__main__":
    main()
