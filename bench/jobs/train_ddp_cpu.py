"""A real multi-rank DDP job on CPU (gloo), with one rank made slower
(``--device cuda``: on GPUs with NCCL, one GPU per rank).

    gputui run -- torchrun --standalone --nproc-per-node 2 bench/jobs/train_ddp_cpu.py \
        --slow-rank 1 --slow-data-s 0.02 --data-sleep 0.004 --steps 0

Each step: a DataLoader batch (its Dataset sleeps ``--data-sleep``), forward
through a small MLP, backward (DDP's gradient all-reduce runs inside it), SGD.
``--slow-rank R`` makes rank R slower: ``--slow-s`` of sleep in its forward
(standing for a slower GPU) and ``--slow-data-s`` more in its data loading.  The
other ranks wait for it in the all-reduce every step, which is what a straggler
looks like.  ``--steps 0`` trains until killed.

``--layers L --width W --batch B`` make the model ``L`` hidden layers of ``W``
(a GPU's worth of work and of gradients), and ``--bucket-cap-mb`` sets DDP's
gradient buckets: one bucket larger than every gradient together makes the
all-reduce start only when backward has ended (no overlap with compute).

Failure modes, for the tests: ``--hang-rank R --hang-file F`` makes rank R's
data loading sleep for good once F exists (the others then wait in the
all-reduce); ``--stop-rank R --stop-file F`` makes rank R leave the loop once
F exists and exit (uneven inputs: the others wait for it forever).
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
    def __init__(
        self, n: int, sleep_s: float, hang_file: str | None = None, batch: int = 32
    ) -> None:
        self.n = n
        self.sleep_s = sleep_s
        self.hang_file = hang_file
        self.batch = batch

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        if self.hang_file and os.path.exists(self.hang_file):
            while True:  # a data loader that never comes back (a stuck file system)
                time.sleep(3600)
        g = torch.Generator().manual_seed(idx)
        return torch.randn(self.batch, 64, generator=g), torch.randn(self.batch, 1, generator=g)


class Model(torch.nn.Module):
    def __init__(self, slow_s: float, width: int = 256, layers: int = 1) -> None:
        super().__init__()
        hidden: list[torch.nn.Module] = [torch.nn.Linear(64, width), torch.nn.ReLU()]
        for _ in range(layers - 1):
            hidden += [torch.nn.Linear(width, width), torch.nn.ReLU()]
        self.net = torch.nn.Sequential(*hidden, torch.nn.Linear(width, 1))
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
    parser.add_argument("--slow-s", type=float, default=0.0, help="the slow rank's forward")
    parser.add_argument("--slow-data-s", type=float, default=0.0, help="the slow rank's data")
    parser.add_argument("--hang-rank", type=int, default=-1)
    parser.add_argument("--hang-file")
    parser.add_argument("--stop-rank", type=int, default=-1)
    parser.add_argument("--stop-file")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--layers", type=int, default=1, help="hidden layers")
    parser.add_argument("--width", type=int, default=256, help="hidden layers' width")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP's buckets")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    slow = rank == args.slow_rank
    device = torch.device("cuda") if cuda else torch.device("cpu")
    model = DistributedDataParallel(
        Model(args.slow_s if slow else 0.0, args.width, args.layers).to(device),
        bucket_cap_mb=args.bucket_cap_mb,
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    total = args.steps if args.steps > 0 else 10**9
    stop = args.stop_file if rank == args.stop_rank else None
    sleep = args.data_sleep + (args.slow_data_s if slow else 0.0)
    hang = args.hang_file if rank == args.hang_rank else None
    loader = DataLoader(SleepyBatches(min(total, 10**6), sleep, hang, args.batch), batch_size=None)
    done = 0
    while done < total:
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            done += 1
            if done >= total or (stop and os.path.exists(stop)):
                total = done
                break
    if rank == args.stop_rank:
        print(f"rank {rank} (pid {os.getpid()}) leaves after {done} steps", flush=True)
        return 0  # the others are left waiting in their next all-reduce
    dist.destroy_process_group()
    print(f"rank {rank} (pid {os.getpid()}) trained {done} steps", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
