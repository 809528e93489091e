"""How fast a small training step goes with each way of feeding it batches of an
in-memory dataset: DataLoader workers (0, 2, 4, 8; persistent), pinned memory,
one indexing per batch (a BatchSampler over a TensorDataset) and the data on the
GPU already.  One JSON line per variant: steps/s over SECONDS after a warm-up.

    python3 bench/jobs/loader_handoff.py [SECONDS] [VARIANT ...]

The step is the Lightning cases' MLP (1024 -> 4096 -> 10, AdamW) at batch 256,
the data 4096 x 1024 float32 (16 batches an epoch).  With ``lightning`` in a
variant's name the same loader feeds a Lightning Trainer instead of a plain loop.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

N, D, BATCH = 4096, 1024, 256
VARIANTS = (
    "w0",
    "w2p",
    "w4p",
    "w8p",
    "w2p_pin",
    "batched_w0",
    "on_gpu",
    "lightning_w0",
    "lightning_w2p",
    "lightning_w4p",
)


def loader(variant: str, x: torch.Tensor, y: torch.Tensor) -> Any:
    data = torch.utils.data.TensorDataset(x, y)
    if variant.endswith("batched_w0"):
        sampler = torch.utils.data.BatchSampler(
            torch.utils.data.RandomSampler(data), BATCH, drop_last=False
        )
        return torch.utils.data.DataLoader(data, sampler=sampler, batch_size=None)
    workers = int(re.search(r"w(\d+)", variant).group(1))  # type: ignore[union-attr]
    return torch.utils.data.DataLoader(
        data,
        batch_size=BATCH,
        shuffle=True,
        num_workers=workers,
        persistent_workers=workers > 0,
        pin_memory=variant.endswith("_pin"),
    )


def batches(variant: str) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    x, y = torch.randn(N, D), torch.randint(0, 10, (N,))
    if variant == "on_gpu":
        x, y = x.cuda(), y.cuda()
        while True:
            perm = torch.randperm(N, device="cuda")
            for i in range(0, N, BATCH):
                idx = perm[i : i + BATCH]
                yield x[idx], y[idx]
    dl = loader(variant, x, y)
    while True:
        for xb, yb in dl:
            yield xb.cuda(non_blocking=True), yb.cuda(non_blocking=True)


def plain(variant: str, seconds: float) -> float:
    net = nn.Sequential(nn.Linear(D, 4096), nn.ReLU(), nn.Linear(4096, 10)).cuda()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    it = batches(variant)
    steps, t0, end = 0, None, None
    start = time.monotonic()
    for xb, yb in it:
        loss = F.cross_entropy(net(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        now = time.monotonic()
        if t0 is None and now - start > 1.5:
            torch.cuda.synchronize()
            t0, steps = time.monotonic(), 0
        elif t0 is not None:
            steps += 1
            if now - t0 >= seconds:
                torch.cuda.synchronize()
                end = time.monotonic()
                break
    assert t0 is not None and end is not None
    return steps / (end - t0)


def lightning_clock(seconds: float, warmup_s: float) -> Any:
    """A Lightning callback that times ``seconds`` of steps after ``warmup_s``
    of them (synchronized at both ends), then stops the Trainer: its ``rate``
    in steps/s."""
    import lightning as L

    def sync() -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    class Clock(L.Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.start = time.monotonic()
            self.t0: float | None = None
            self.steps = 0
            self.rate = 0.0

        def on_train_batch_end(self, trainer: Any, *_: Any) -> None:
            now = time.monotonic()
            if self.t0 is None:
                if now - self.start > warmup_s:
                    sync()
                    self.t0 = time.monotonic()
                return
            self.steps += 1
            if now - self.t0 >= seconds:
                sync()
                self.rate = self.steps / (time.monotonic() - self.t0)
                trainer.should_stop = True

    return Clock()


def lightning(variant: str, seconds: float) -> float:
    import lightning as L

    class Model(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(D, 4096), nn.ReLU(), nn.Linear(4096, 10))

        def training_step(self, batch: Any, _i: int) -> torch.Tensor:
            xb, yb = batch
            return F.cross_entropy(self.net(xb), yb)

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    x, y = torch.randn(N, D), torch.randint(0, 10, (N,))
    clock = lightning_clock(seconds, warmup_s=3.0)
    trainer = L.Trainer(
        max_epochs=10**6,
        accelerator="gpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[clock],
    )
    trainer.fit(Model(), loader(variant, x, y))
    return clock.rate


def main() -> int:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 8.0
    for variant in sys.argv[2:] or VARIANTS:
        run = lightning if variant.startswith("lightning") else plain
        rate = run(variant, seconds)
        print(json.dumps({"variant": variant, "steps_per_s": round(rate, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
