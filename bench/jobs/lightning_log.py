"""A Lightning job that logs its loss at every step, the way Lightning's own
examples do (``self.log("train_loss", loss, prog_bar=True)``), with the default
progress bar: how fast it steps against the same job without the bar, and
without logging.  One JSON line per variant: steps/s over SECONDS after a
warm-up.

    python3 bench/jobs/lightning_log.py [SECONDS] [VARIANT ...]

Variants: ``bar`` (the default TQDM bar and the log call), ``nobar``
(``enable_progress_bar=False``, the log call kept), ``log50`` (the bar, and the
log call every 50th step), ``nolog`` (neither).  The
model is an MLP 4096 wide at batch 1024 in bf16, its data already on the GPU
(a DataLoader indexing GPU tensors a batch at a time, no workers), so that the GPU's work per step
is several milliseconds and the host can run ahead of it.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch
import torch.nn.functional as F
from loader_handoff import lightning_clock  # bench/jobs/, beside this script
from torch import nn

#: LIGHTNING_LOG_CPU=1: the same on the CPU, 256 wide at batch 256, in fp32
CPU = os.environ.get("LIGHTNING_LOG_CPU") == "1"
WIDTH, BATCH, N = (256, 256, 4096) if CPU else (4096, 1024, 16384)
DEVICE = "cpu" if CPU else "cuda"


def run(variant: str, seconds: float) -> float:
    import lightning as L

    class Model(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(
                nn.Linear(WIDTH, WIDTH),
                nn.ReLU(),
                nn.Linear(WIDTH, WIDTH),
                nn.ReLU(),
                nn.Linear(WIDTH, 10),
            )

        def training_step(self, batch: Any, _i: int) -> torch.Tensor:
            x, y = batch
            loss = F.cross_entropy(self.net(x), y)
            if variant in ("bar", "nobar") or (variant == "log50" and self.global_step % 50 == 0):
                self.log("train_loss", loss, prog_bar=True)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-4, fused=True)

    x = torch.randn(N, WIDTH, device=DEVICE)
    y = torch.randint(0, 10, (N,), device=DEVICE)
    data = torch.utils.data.TensorDataset(x, y)
    # one indexing a batch (no per-sample kernels to collate)
    sampler = torch.utils.data.BatchSampler(
        torch.utils.data.SequentialSampler(data), BATCH, drop_last=True
    )
    loader = torch.utils.data.DataLoader(data, sampler=sampler, batch_size=None)
    clock = lightning_clock(seconds, warmup_s=5.0)
    trainer = L.Trainer(
        max_epochs=10**6,
        accelerator="cpu" if CPU else "gpu",
        devices=1,
        precision="32-true" if CPU else "bf16-mixed",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=variant in ("bar", "log50"),
        enable_model_summary=False,
        callbacks=[clock],
    )
    trainer.fit(Model(), loader)
    return clock.rate


def main() -> int:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 8.0
    for variant in sys.argv[2:] or ("bar", "nobar", "log50", "nolog"):
        rate = run(variant, seconds)
        print(json.dumps({"variant": variant, "steps_per_s": round(rate, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
