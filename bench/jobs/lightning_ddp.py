"""A Lightning ``Trainer`` with DDP on GPUs (one per rank), one rank made slower
in its data loading: a job gputui did not shape, for the rank view.

    gputui run -- torchrun --standalone --nproc-per-node 2 bench/jobs/lightning_ddp.py \
        --slow-rank 1 --slow-data-s 0.02

Lightning sees torchrun's environment and runs in the processes torchrun
started (no spawning of its own).  Each batch's Dataset item sleeps
``--data-sleep`` (``--slow-data-s`` more on ``--slow-rank``); the model is
``--layers`` linear layers of ``--width`` in fp32.  ``--steps 0`` trains until
killed.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset


class Batches(Dataset):  # type: ignore[type-arg]
    def __init__(self, n: int, sleep_s: float, batch: int) -> None:
        self.n, self.sleep_s, self.batch = n, sleep_s, batch

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        g = torch.Generator().manual_seed(idx)
        return torch.randn(self.batch, 64, generator=g), torch.randn(self.batch, 1, generator=g)


class Regressor(L.LightningModule):
    def __init__(self, width: int, layers: int) -> None:
        super().__init__()
        hidden: list[torch.nn.Module] = [torch.nn.Linear(64, width), torch.nn.ReLU()]
        for _ in range(layers - 1):
            hidden += [torch.nn.Linear(width, width), torch.nn.ReLU()]
        self.net = torch.nn.Sequential(*hidden, torch.nn.Linear(width, 1))

    def training_step(self, batch: Any, _index: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200, help="0: until killed")
    parser.add_argument("--data-sleep", type=float, default=0.002)
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slow-data-s", type=float, default=0.0)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    sleep = args.data_sleep + (args.slow_data_s if rank == args.slow_rank else 0.0)
    steps = args.steps if args.steps > 0 else 10**9
    loader = DataLoader(Batches(min(steps, 10**6), sleep, args.batch), batch_size=None)
    trainer = L.Trainer(
        accelerator="gpu",
        devices=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
        strategy="ddp",
        max_steps=steps,
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Regressor(args.width, args.layers), loader)
    print(f"rank {rank} (pid {os.getpid()}) trained {trainer.global_step} steps", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
