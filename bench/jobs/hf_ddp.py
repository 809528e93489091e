"""A Hugging Face ``Trainer`` fitting a small GPT-2 (random weights, no download)
with DDP on GPUs, one rank made slower in its data loading: a job gputui did
not shape, for the rank view.

    gputui run -- torchrun --standalone --nproc-per-node 2 bench/jobs/hf_ddp.py \
        --slow-rank 1 --slow-data-s 0.02

Each batch's items sleep ``--data-sleep`` in all (``--slow-data-s`` more on
``--slow-rank``); ``--steps 0`` trains until killed.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Tokens(Dataset):  # type: ignore[type-arg]
    def __init__(self, n: int, seq: int, vocab: int, sleep_s: float) -> None:
        self.n, self.seq, self.vocab, self.sleep_s = n, seq, vocab, sleep_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, idx: int) -> dict[str, torch.Tensor]:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        g = torch.Generator().manual_seed(idx)
        ids = torch.randint(0, self.vocab, (self.seq,), generator=g)
        return {"input_ids": ids, "labels": ids}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200, help="0: until killed")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--data-sleep", type=float, default=0.002, help="seconds a batch")
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slow-data-s", type=float, default=0.0, help="more a batch")
    args = parser.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    per_batch = args.data_sleep + (args.slow_data_s if rank == args.slow_rank else 0.0)
    config = GPT2Config(n_layer=6, n_embd=768, n_head=12, n_positions=args.seq)
    steps = args.steps if args.steps > 0 else 10**7
    data = Tokens(10**7, args.seq, config.vocab_size, per_batch / args.batch)
    training = TrainingArguments(
        output_dir="/tmp/gputui-hf-ddp",
        per_device_train_batch_size=args.batch,
        max_steps=steps,
        report_to=[],
        save_strategy="no",
        logging_steps=10**6,
        dataloader_num_workers=0,
        disable_tqdm=True,
        bf16=True,
    )
    Trainer(model=GPT2LMHeadModel(config), args=training, train_dataset=data).train()
    print(f"rank {rank} (pid {os.getpid()}) done", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
