"""A real multi-rank DDP job on CPU (gloo), with one rank made slower.

    gputui run -- torchrun --standalone --nproc-per-node 2 bench/jobs/train_ddp_cpu.py \
        --slow-rank 1 --slow-s 0.01 --data-sleep 0.004 --steps 0

Each step: a DataLoader batch (its Dataset sleeps ``--data-sleep``), forward
through a small MLP, backward (DDP's gradient all-reduce runs inside it), SGD.
``--slow-rank R`` adds ``--slow-s`` of sleep to rank R's forward, standing for a
slower GPU: the other ranks wait for it in the all-reduce every step, which is
what a straggler looks like.  ``--steps 0`` trains until killed.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset


class SleepyBatches(Dataset):  # type: ignore[type-arg]
    def __init__(self, n: int, sleep_s: float) -> None:
        self.n = n
        self.sleep_s = sleep_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        g = torch.Generator().manual_seed(idx)
        return torch.randn(32, 64, generator=g), torch.randn(32, 1, generator=g)


class Model(torch.nn.Module):
    def __init__(self, slow_s: float) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)
        )
        self.slow_s = slow_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.slow_s:
            time.sleep(self.slow_s)
        return self.net(x)  # type: ignore[no-any-return]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200, help="0: until killed")
    parser.add_argument("--data-sleep", type=float, default=0.0)
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slow-s", type=float, default=0.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    slow = args.slow_s if rank == args.slow_rank else 0.0
    model = DistributedDataParallel(Model(slow))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    total = args.steps if args.steps > 0 else 10**9
    loader = DataLoader(SleepyBatches(min(total, 10**6), args.data_sleep), batch_size=None)
    done = 0
    while done < total:
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            done += 1
            if done >= total:
                break
    dist.destroy_process_group()
    print(f"rank {rank} (pid {os.getpid()}) trained {done} steps", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
