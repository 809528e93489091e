"""Real jobs with a planted cause, each profiled for a few steps with
torch.profiler and written as a Chrome trace: the analyzer's cases on a GPU.

    python bench/jobs/analyzer_cases.py OUT_DIR [CASE ...]
    python bench/jobs/analyzer_cases.py --live SECONDS CASE

``--live`` runs one case's step for SECONDS without a profiler (under
``gputui run``, for ``gputui attach PID --once --capture N``).

Cases (the planted cause in brackets):
- ``numpy_preproc``: a small MLP whose step first runs numpy augmentation on
  the training thread [Python outside torch];
- ``numpy_workers``: the same work in DataLoader workers [none: the GPU waits
  little];
- ``hand_attention``: ``softmax(q @ k^T / sqrt(d)) @ v`` at T = 4096, bf16
  [hand-written attention];
- ``sdpa_math``: ``F.scaled_dot_product_attention`` forced onto the math
  backend [SDPA off the flash kernel];
- ``healthy``: a bf16 transformer encoder with SDPA [none];
- ``compiled``: the same under ``torch.compile`` with a graph break (a print in
  forward) [graph break];
- ``hf_gpt2``: a Hugging Face GPT-2 (from a config: no download) trained with
  AdamW in bf16 autocast [none];
- ``lightning``: a Lightning ``Trainer`` fitting a small model, profiled from a
  callback [none].
Each trace is ``OUT_DIR/CASE.pt.trace.json.gz``.
"""

from __future__ import annotations

import gzip
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

DEV = "cuda"
STEPS = 8  # wait 2, warm-up 2, active 3, then stop
SCHEDULE = {"wait": 2, "warmup": 2, "active": 3, "repeat": 1}


#: seconds to run a case's step without a profiler (``--live``); 0: profile it
LIVE_S = 0.0


def profiled(out: Path, name: str, step: Callable[[], None], steps: int = STEPS) -> Path:
    """Run ``step`` ``steps`` times under torch.profiler; the trace, gzipped.
    With ``--live``, run it for LIVE_S seconds instead, unprofiled."""
    if LIVE_S > 0:
        t0 = time.monotonic()
        while time.monotonic() - t0 < LIVE_S:
            step()
        return out
    raw = out / f"{name}.pt.trace.json"
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
        schedule=torch.profiler.schedule(**SCHEDULE),
        on_trace_ready=lambda p: p.export_chrome_trace(str(raw)),
    ) as prof:
        for _ in range(steps):
            step()
            prof.step()
    torch.cuda.synchronize()
    gz = raw.with_suffix(".json.gz")
    with raw.open("rb") as src, gzip.open(gz, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    return gz


def mlp() -> tuple[nn.Module, torch.optim.Optimizer]:
    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).to(DEV)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4)


def augment(batch: np.ndarray) -> np.ndarray:
    """Host-side augmentation, deliberately heavy: sorts and noise per sample."""
    out = np.sort(batch, axis=1)
    out = out + np.random.default_rng(0).normal(0, 0.01, size=out.shape)
    for _ in range(3):
        out = np.tanh(out) * 1.01
    return out.astype(np.float32)


def case_numpy_preproc(out: Path) -> Path:
    model, opt = mlp()
    rng = np.random.default_rng(1)

    def step() -> None:
        x = torch.from_numpy(augment(rng.standard_normal((256, 1024)))).to(DEV)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return profiled(out, "numpy_preproc", step)


class Augmented(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int) -> torch.Tensor:
        rng = np.random.default_rng(i)
        return torch.from_numpy(augment(rng.standard_normal((1, 1024)))[0])


def case_numpy_workers(out: Path) -> Path:
    model, opt = mlp()
    loader = torch.utils.data.DataLoader(
        Augmented(), batch_size=256, num_workers=8, pin_memory=True, persistent_workers=True
    )
    batches = iter(loader)

    def step() -> None:
        x = next(batches).to(DEV, non_blocking=True)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):  # the workers' first batches
        step()
    return profiled(out, "numpy_workers", step)


def attention_qkv(t: int = 4096) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    shape = (4, 8, t, 64)
    return tuple(  # type: ignore[return-value]
        torch.randn(shape, device=DEV, dtype=torch.bfloat16, requires_grad=True) for _ in range(3)
    )


def case_hand_attention(out: Path) -> Path:
    q, k, v = attention_qkv()

    def step() -> None:
        scores = (q @ k.transpose(-2, -1)) / (q.shape[-1] ** 0.5)
        o = torch.softmax(scores, dim=-1) @ v
        o.float().square().mean().backward()

    return profiled(out, "hand_attention", step)


def case_sdpa_math(out: Path) -> Path:
    q, k, v = attention_qkv()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def step() -> None:
        with sdpa_kernel(SDPBackend.MATH):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        o.float().square().mean().backward()

    return profiled(out, "sdpa_math", step)


def encoder() -> tuple[nn.Module, torch.optim.Optimizer]:
    layer = nn.TransformerEncoderLayer(
        d_model=1024, nhead=16, dim_feedforward=4096, batch_first=True, norm_first=True
    )
    model = nn.TransformerEncoder(layer, num_layers=6).to(DEV)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)


def case_healthy(out: Path) -> Path:
    model, opt = encoder()
    x = torch.randn(16, 512, 1024, device=DEV)

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    return profiled(out, "healthy", step)


class Breaks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(1024, 4096)
        self.b = nn.Linear(4096, 1024)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.a(x))
        print("mean", float(h.mean()), file=open(os.devnull, "w"))  # a graph break
        return self.b(h)


def case_compiled(out: Path) -> Path:
    model = torch.compile(Breaks().to(DEV))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(256, 1024, device=DEV)

    def step() -> None:
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):  # compile first
        step()
    return profiled(out, "compiled", step)


def case_hf_gpt2(out: Path) -> Path:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=6, n_embd=768, n_head=12, n_positions=1024, vocab_size=32000)
    model = GPT2LMHeadModel(cfg).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 32000, (8, 1024), device=DEV)

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(2):
        step()
    return profiled(out, "hf_gpt2", step)


def case_lightning(out: Path) -> Path:
    import lightning as L

    raw = out / "lightning.pt.trace.json"

    class Model(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 10))

        def training_step(self, batch: Any, _i: int) -> torch.Tensor:
            x, y = batch
            return F.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    class Profile(L.Callback):
        def on_train_start(self, *_: Any) -> None:
            self.prof = torch.profiler.profile(
                activities=[
                    torch.profiler.ProfilerActivity.CPU,
                    torch.profiler.ProfilerActivity.CUDA,
                ],
                schedule=torch.profiler.schedule(**SCHEDULE),
                on_trace_ready=lambda p: p.export_chrome_trace(str(raw)),
            )
            self.prof.__enter__()

        def on_train_batch_end(self, *_: Any) -> None:
            self.prof.step()

        def on_train_end(self, *_: Any) -> None:
            self.prof.__exit__(None, None, None)

    data = torch.utils.data.TensorDataset(torch.randn(4096, 1024), torch.randint(0, 10, (4096,)))
    loader = torch.utils.data.DataLoader(data, batch_size=256, num_workers=2)
    trainer = L.Trainer(
        max_steps=STEPS + 2,
        accelerator="gpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        callbacks=[Profile()],
    )
    trainer.fit(Model(), loader)
    gz = raw.with_suffix(".json.gz")
    with raw.open("rb") as src, gzip.open(gz, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    return gz


CASES = {
    name.removeprefix("case_"): fn
    for name, fn in sorted(globals().items())
    if name.startswith("case_") and callable(fn)
}


def main() -> None:
    global LIVE_S
    if sys.argv[1] == "--live":
        LIVE_S = float(sys.argv[2])
        CASES[sys.argv[3]](Path("."))
        return
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name in sys.argv[2:] or list(CASES):
        t0 = time.perf_counter()
        try:
            path = CASES[name](out)
            print(f"{name}: {path} ({path.stat().st_size} bytes, {time.perf_counter() - t0:.1f} s)")
        except Exception as exc:  # one case's failure must not lose the others
            print(f"{name}: FAILED {type(exc).__name__}: {exc}")
        torch.cuda.empty_cache()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
