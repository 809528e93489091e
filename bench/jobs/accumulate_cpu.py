"""A CPU training loop that accumulates gradients over 4 micro-batches of 8 from
a DataLoader, for ``SECONDS`` (default 25): a hooked job whose every step (one
optimizer step) fetches 4 batches.

    gputui run -- python bench/jobs/accumulate_cpu.py [SECONDS]
"""

from __future__ import annotations

import sys
import time

import torch
from torch import nn

ACCUMULATE = 4


def main() -> int:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 25.0
    data = torch.utils.data.TensorDataset(torch.randn(4096, 64), torch.randn(4096, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        for i, (x, y) in enumerate(loader):
            loss = (model(x) - y).square().mean() / ACCUMULATE
            loss.backward()
            if (i + 1) % ACCUMULATE == 0:
                opt.step()
                opt.zero_grad()
            if time.monotonic() - t0 > seconds:
                break
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
