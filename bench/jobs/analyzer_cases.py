"""Real jobs with a planted cause, each profiled for a few steps with
torch.profiler and written as a Chrome trace: the analyzer's cases on a GPU.

    python bench/jobs/analyzer_cases.py [--shapes] [--stacks] OUT_DIR [CASE ...]
    python bench/jobs/analyzer_cases.py --live SECONDS CASE

``--live`` runs one case's step for SECONDS without a profiler (under
``gputui run``, for ``gputui attach PID --once --capture N``).  ``--shapes``
records input shapes and FLOPs; ``--stacks`` the Python stack and the module
frames (``with_stack=True, with_modules=True``).

Cases (the planted cause in brackets):
- ``numpy_preproc``: a small MLP whose step first runs numpy augmentation on
  the training thread [Python outside torch];
- ``numpy_workers``: the same work in DataLoader workers [none: the GPU waits
  little];
- ``hand_attention``: ``softmax(q @ k^T / sqrt(d)) @ v`` at T = 4096, bf16
  [hand-written attention];
- ``sdpa_math``: ``F.scaled_dot_product_attention`` forced onto the math
  backend [SDPA off the flash kernel];
- ``healthy``: a bf16 transformer encoder with SDPA, batch 32 x 1024 [none];
  ``encoder_batch16``: the same at batch 16 x 512 (on an H200 its host cannot keep up);
- ``compiled``: the same under ``torch.compile`` with a graph break (a print in
  forward) [graph break];
- ``hf_gpt2``: a Hugging Face GPT-2 (from a config: no download) trained with
  AdamW in bf16 autocast [none];
- ``lightning``: a Lightning ``Trainer`` fitting a small model, profiled from a
  callback; its DataLoader's 2 workers start anew each epoch of 16 steps [worker
  restarts]; ``lightning_persistent``: the same with ``persistent_workers=True``;
  ``lightning_profiler``: the same profiled by Lightning's own ``PyTorchProfiler``;
- ``sdpa_mem_efficient``: ``F.scaled_dot_product_attention`` on fp32 inputs with an
  additive float mask (flash cannot take either): the memory-efficient kernels
  [SDPA off the flash kernel];
- ``slow_workers``: a DataLoader whose 2 workers decode too slowly for the step
  (``decode_sample``) [data loading];
- ``item_in_forward``: ``.item()`` in the model's forward, 2048 wide, batch 512 [host
  sync]; ``item_in_forward_wide``: the same 4096 wide, batch 4096, where the GPU's
  work outlasts the host's;
- ``compiled_item``: ``torch.compile`` of a model whose forward calls ``.item()``
  (a graph break) on small layers [launch-bound, blocked by the graph break];
- ``inference``: a transformer encoder in ``torch.inference_mode()``, batch 2 [launch
  overhead; no optimizer];
- ``cpu_randn``: each step makes an 8192 x 1024 tensor with ``torch.randn`` on the CPU
  and copies it over [CPU-side tensor creation];
- ``cpu_resize``: each step resizes and normalizes a batch of 64 images with torch ops on
  the host before copying it over [torch ops on the CPU];
- ``leak``: the losses are kept in a list with their graphs [memory growth];
- ``hf_trainer``: a Hugging Face ``Trainer`` fitting a GPT-2 (from a config) on random
  tokens, profiled from a ``TrainerCallback`` [launch overhead];
  ``hf_trainer_compiled``: the same with ``TrainingArguments(torch_compile=True)``;
- ``ddp_one``: DistributedDataParallel over NCCL with one rank [none];
- ``fp16_scaler``: the encoder at batch 8 x 256 in fp16 with a GradScaler (its step
  reads found_inf back to the host) [host sync?]; ``bf16_small``: the same in bf16
  without a scaler;
- ``vision``: a torchvision ResNet-50 in bf16, batch 128, whose 4 DataLoader workers
  decode JPEGs with PIL and run RandomResizedCrop, flip and Normalize [data loading];
  ``vision_workers12``, ``vision_workers15``: the same with 12 and 15 workers.
- ``inference_graphed``: the ``inference`` model captured once into a
  ``torch.cuda.CUDAGraph`` and replayed each step [none: the launches are gone];
  ``inference_reduce_overhead``: the same model under ``torch.compile(mode=
  "reduce-overhead")`` (Inductor's CUDA graphs) [none];
- ``train_reduce_overhead``: the small MLP's training step under
  ``torch.compile(mode="reduce-overhead")`` [none]; ``train_graphed``: its model
  made by ``torch.cuda.make_graphed_callables``, the optimizer eager [optimizer
  launches]; ``train_reduce_overhead_capture`` and
  ``inference_reduce_overhead_capture``: the reduce-overhead step and model
  profiled from their second call, without a schedule: Inductor's CUDA graph
  capture in the trace, then its replays;
- ``fp32_mlp`` and ``tf32_mlp``: an fp32 MLP 4096 wide at batch 2048 with
  ``torch.backends.cuda.matmul.allow_tf32`` off and on [FP32 matmuls; none];
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
#: record input shapes and FLOPs in the traces (``--shapes``)
SHAPES = False
#: record the Python stack and the module frames in the traces (``--stacks``)
STACKS = False


def gzipped(raw: Path) -> Path:
    """``raw`` gzipped beside it (``.json.gz``), the plain file removed."""
    gz = raw.with_suffix(".json.gz")
    with raw.open("rb") as src, gzip.open(gz, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    return gz


def profiled(
    out: Path, name: str, step: Callable[[], None], steps: int = STEPS, warmup: int = 0
) -> Path:
    """Run ``step`` ``warmup`` times, then ``steps`` times under torch.profiler;
    the trace, gzipped.  With ``--live``, run it for LIVE_S seconds instead,
    unprofiled."""
    for _ in range(warmup):
        step()
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
        record_shapes=SHAPES,
        with_flops=SHAPES,
        with_stack=STACKS,
        with_modules=STACKS,
    ) as prof:
        for _ in range(steps):
            step()
            prof.step()
    torch.cuda.synchronize()
    return gzipped(raw)


def mlp() -> tuple[nn.Module, torch.optim.Optimizer]:
    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).to(DEV)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4)


def train_step(model: Any, opt: torch.optim.Optimizer, x: torch.Tensor) -> Callable[[], None]:
    """A training step of ``model`` on ``x``: the mean square as the loss."""

    def step() -> None:
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


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


def _encoder_case(out: Path, name: str, batch: int, seq: int) -> Path:
    model, opt = encoder()
    x = torch.randn(batch, seq, 1024, device=DEV)

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return profiled(out, name, step, warmup=3)


def _scaled_case(out: Path, name: str, batch: int, seq: int) -> Path:
    """The encoder in fp16 with a GradScaler: its step() reads found_inf back to
    the host (.item()) before it lets the optimizer step."""
    model, opt = encoder()
    scaler = torch.amp.GradScaler("cuda")
    x = torch.randn(batch, seq, 1024, device=DEV)

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).float().square().mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

    return profiled(out, name, step, warmup=3)


def case_fp16_scaler(out: Path) -> Path:
    return _scaled_case(out, "fp16_scaler", 8, 256)


def case_bf16_small(out: Path) -> Path:
    return _encoder_case(out, "bf16_small", 8, 256)


def case_healthy(out: Path) -> Path:
    return _encoder_case(out, "healthy", 32, 1024)


def case_encoder_batch16(out: Path) -> Path:
    """The encoder at batch 16 x 512: on an H200 its host cannot keep up."""
    return _encoder_case(out, "encoder_batch16", 16, 512)


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


def gpt2_step(n_layer: int, vocab: int, batch: int, seq: int) -> Callable[[], None]:
    """One training step of a Hugging Face GPT-2 built from its config (nothing
    is downloaded): AdamW, bf16 autocast, the same batch of token ids."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=n_layer, n_embd=768, n_head=12, n_positions=1024, vocab_size=vocab)
    model = GPT2LMHeadModel(cfg).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, vocab, (batch, seq), device=DEV)

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def case_hf_gpt2(out: Path) -> Path:
    return profiled(out, "hf_gpt2", gpt2_step(6, 32000, 8, 1024), warmup=2)


def lightning_job(persistent: bool = False) -> tuple[Any, Any]:
    """The Lightning cases' module (a small MLP, AdamW) and DataLoader (4096
    samples in batches of 256: 16 steps an epoch, 2 workers)."""
    import lightning as L

    class Model(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 10))

        def training_step(self, batch: Any, _i: int) -> torch.Tensor:
            x, y = batch
            return F.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    data = torch.utils.data.TensorDataset(torch.randn(4096, 1024), torch.randint(0, 10, (4096,)))
    loader = torch.utils.data.DataLoader(
        data, batch_size=256, num_workers=2, persistent_workers=persistent
    )
    return Model(), loader


def case_lightning(out: Path, persistent: bool = False) -> Path:
    import lightning as L

    raw = out / ("lightning_persistent" if persistent else "lightning").join(("", ".pt.trace.json"))

    class Profile(L.Callback):
        def on_train_start(self, *_: Any) -> None:
            self.t0 = time.monotonic()
            if LIVE_S > 0:
                return
            self.prof = torch.profiler.profile(
                activities=[
                    torch.profiler.ProfilerActivity.CPU,
                    torch.profiler.ProfilerActivity.CUDA,
                ],
                schedule=torch.profiler.schedule(**SCHEDULE),
                on_trace_ready=lambda p: p.export_chrome_trace(str(raw)),
                with_stack=STACKS,
                with_modules=STACKS,
            )
            self.prof.__enter__()

        def on_train_batch_end(self, trainer: Any, *_: Any) -> None:
            if LIVE_S > 0:
                trainer.should_stop = time.monotonic() - self.t0 > LIVE_S
                return
            self.prof.step()

        def on_train_end(self, *_: Any) -> None:
            if LIVE_S <= 0:
                self.prof.__exit__(None, None, None)

    model, loader = lightning_job(persistent)
    trainer = L.Trainer(
        max_steps=-1 if LIVE_S > 0 else STEPS + 2,
        max_epochs=10**6 if LIVE_S > 0 else None,
        accelerator="gpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        callbacks=[Profile()],
    )
    trainer.fit(model, loader)
    if LIVE_S > 0:
        return out
    return gzipped(raw)


def case_lightning_profiler(out: Path) -> Path:
    """The Lightning job profiled the way Lightning offers: Trainer(profiler=
    PyTorchProfiler(...)), whose trace names Lightning's hooks."""
    import lightning as L
    from lightning.pytorch.profilers import PyTorchProfiler

    work = out / "lightning_profiler_out"
    model, loader = lightning_job()
    profiler = PyTorchProfiler(
        dirpath=str(work),
        filename="trace",
        export_to_chrome=True,
        schedule=torch.profiler.schedule(**SCHEDULE),
    )
    trainer = L.Trainer(
        max_steps=STEPS + 2,
        accelerator="gpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        profiler=profiler,
    )
    trainer.fit(model, loader)
    found = sorted(work.rglob("*.json"), key=lambda p: p.stat().st_size)
    if not found:
        raise RuntimeError(f"no trace under {work}: {list(work.rglob('*'))}")
    gz = out / "lightning_profiler.pt.trace.json.gz"
    with found[-1].open("rb") as src, gzip.open(gz, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    shutil.rmtree(work, ignore_errors=True)
    return gz


def case_lightning_persistent(out: Path) -> Path:
    return case_lightning(out, persistent=True)


def case_sdpa_mem_efficient(out: Path) -> Path:
    t = 2048
    shape = (4, 8, t, 64)
    q, k, v = (torch.randn(shape, device=DEV, requires_grad=True) for _ in range(3))
    # an additive causal mask as floats: flash takes neither fp32 nor a float mask
    mask = torch.full((t, t), float("-inf"), device=DEV).triu(1)

    def step() -> None:
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        o.square().mean().backward()

    return profiled(out, "sdpa_mem_efficient", step)


def decode_sample(i: int) -> np.ndarray:
    """A slow per-sample decode: what a JPEG decode and resize cost a worker."""
    rng = np.random.default_rng(i)
    img = rng.standard_normal((96, 96, 3))
    for _ in range(12):
        img = np.sort(img, axis=0) * 0.999
    return img.reshape(-1)[:1024].astype(np.float32)


class SlowDecode(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.from_numpy(decode_sample(i))


def case_slow_workers(out: Path) -> Path:
    model, opt = mlp()
    loader = torch.utils.data.DataLoader(
        SlowDecode(), batch_size=64, num_workers=2, pin_memory=True, persistent_workers=True
    )
    batches = iter(loader)

    def step() -> None:
        x = next(batches).to(DEV, non_blocking=True)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return profiled(out, "slow_workers", step, warmup=3)


def jpegs(n: int = 256) -> list[bytes]:
    """``n`` JPEG files in memory, 500 x 375 like ImageNet's typical photo: smooth
    colour fields with noise, so that they compress and decode like photos."""
    import io

    from PIL import Image

    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        base = rng.integers(0, 255, (12, 16, 3), dtype=np.uint8)
        img = Image.fromarray(base).resize((500, 375), Image.BILINEAR)
        noisy = np.asarray(img, dtype=np.int16) + rng.integers(-12, 12, (375, 500, 3))
        buf = io.BytesIO()
        Image.fromarray(noisy.clip(0, 255).astype(np.uint8)).save(buf, "JPEG", quality=90)
        out.append(buf.getvalue())
    return out


class Jpegs(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """ImageNet-style training samples: a JPEG decoded with PIL, then torchvision's
    RandomResizedCrop(224), a flip, ToTensor and Normalize, in the workers."""

    def __init__(self, files: list[bytes]) -> None:
        from torchvision import transforms as T

        self.files = files
        self.tf = T.Compose(
            [
                T.RandomResizedCrop(224),
                T.RandomHorizontalFlip(),
                T.ToTensor(),
                T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
            ]
        )

    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        import io

        from PIL import Image

        img = Image.open(io.BytesIO(self.files[i % len(self.files)])).convert("RGB")
        return self.tf(img), i % 1000


def _vision(out: Path, name: str, workers: int) -> Path:
    import torchvision

    model = torchvision.models.resnet50().to(DEV, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=True)
    loader = torch.utils.data.DataLoader(
        Jpegs(jpegs()),
        batch_size=128,
        shuffle=True,
        num_workers=workers,
        pin_memory=True,
        persistent_workers=True,
    )
    batches = iter(loader)

    def step() -> None:
        x, y = next(batches)
        x = x.to(DEV, non_blocking=True, memory_format=torch.channels_last)
        y = y.to(DEV, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return profiled(out, name, step, warmup=3)


def case_vision(out: Path) -> Path:
    return _vision(out, "vision", 4)


def case_vision_workers12(out: Path) -> Path:
    return _vision(out, "vision_workers12", 12)


def case_vision_workers15(out: Path) -> Path:
    return _vision(out, "vision_workers15", 15)


class Checked(nn.Module):
    """A model whose forward reads a value back to the host every layer."""

    def __init__(self, width: int = 2048, depth: int = 8) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = F.gelu(layer(x))
            if x.abs().max().item() > 1e4:  # a host sync in forward
                x = x / 1e4
        return x


def _item_in_forward(out: Path, name: str, width: int, batch: int) -> Path:
    model = Checked(width).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randn(batch, width, device=DEV)

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return profiled(out, name, step, warmup=3)


def case_item_in_forward(out: Path) -> Path:
    return _item_in_forward(out, "item_in_forward", 2048, 512)


def case_item_in_forward_wide(out: Path) -> Path:
    """The same with GPU work that outlasts the host's: the syncs now stall it."""
    return _item_in_forward(out, "item_in_forward_wide", 4096, 4096)


class SmallChecked(nn.Module):
    """Two small layers with a value read back in between: torch.compile breaks
    the graph at the ``.item()``."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(1024, 1024)
        self.b = nn.Linear(1024, 1024)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.a(x))
        if h.mean().item() > 10.0:  # a graph break at .item()
            h = h * 0.5
        return self.b(torch.tanh(h))


def case_compiled_item(out: Path) -> Path:
    model = torch.compile(SmallChecked().to(DEV))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(32, 1024, device=DEV)

    def step() -> None:
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(4):  # compile first
        step()
    import torch._dynamo.utils as dynamo_utils

    graphs = dynamo_utils.counters["stats"].get("unique_graphs", 0)
    breaks = sum(dynamo_utils.counters["graph_break"].values())
    print(f"compiled_item: {graphs} graphs, {breaks} graph breaks", file=sys.stderr)
    return profiled(out, "compiled_item", step)


def _inference_model() -> nn.Module:
    layer = nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=6, enable_nested_tensor=False).to(DEV).eval()


def _inference_case(out: Path, name: str, model: Any, warmup: int) -> Path:
    x = torch.randn(2, 64, 512, device=DEV)

    def step() -> None:
        with torch.inference_mode():
            model(x)

    return profiled(out, name, step, warmup=warmup)


def case_inference(out: Path) -> Path:
    return _inference_case(out, "inference", _inference_model(), 3)


def case_cpu_randn(out: Path) -> Path:
    model, opt = mlp()

    def step() -> None:
        noise = torch.randn(8192, 1024)  # made on the CPU every step
        x = noise[:256].to(DEV) + noise.to(DEV).mean()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return profiled(out, "cpu_randn", step, warmup=2)


def case_cpu_resize(out: Path) -> Path:
    """Images resized and normalized with torch ops on the host, in the loop,
    before they go to the GPU (what a transform on the main thread does)."""
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, stride=2),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    ).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    raw = torch.rand(64, 3, 320, 320)  # a batch as decoded, on the host
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)

    def step() -> None:
        x = F.interpolate(raw, size=(224, 224), mode="bilinear", antialias=True)
        x = ((x - mean) / 0.226).to(DEV)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return profiled(out, "cpu_resize", step, warmup=2)


def case_leak(out: Path) -> Path:
    model, opt = mlp()
    kept: list[torch.Tensor] = []
    x = torch.randn(256, 1024, device=DEV)

    def step() -> None:
        out_ = model(x)
        loss = out_.square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        kept.append(out_)  # every step's output (1 MiB) kept with its graph

    return profiled(out, "leak", step, steps=STEPS + 4)


def case_hf_trainer(out: Path, compiled: bool = False) -> Path:
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    raw = out / ("hf_trainer_compiled" if compiled else "hf_trainer").join(("", ".pt.trace.json"))
    cfg = GPT2Config(n_layer=4, n_embd=512, n_head=8, n_positions=512, vocab_size=32000)
    model = GPT2LMHeadModel(cfg)

    class Tokens(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return 4096

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            ids = torch.randint(0, 32000, (512,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids, "labels": ids}

    class Profile(TrainerCallback):  # type: ignore[misc]
        def on_train_begin(self, *_: Any, **__: Any) -> None:
            self.t0 = time.monotonic()
            if LIVE_S > 0:
                return
            self.prof = torch.profiler.profile(
                activities=[
                    torch.profiler.ProfilerActivity.CPU,
                    torch.profiler.ProfilerActivity.CUDA,
                ],
                schedule=torch.profiler.schedule(**SCHEDULE),
                on_trace_ready=lambda p: p.export_chrome_trace(str(raw)),
                with_stack=STACKS,
                with_modules=STACKS,
            )
            self.prof.__enter__()

        def on_step_end(self, _args: Any, _state: Any, control: Any, **__: Any) -> Any:
            if LIVE_S > 0:
                control.should_training_stop = time.monotonic() - self.t0 > LIVE_S
                return control
            self.prof.step()
            return None

        def on_train_end(self, *_: Any, **__: Any) -> None:
            if LIVE_S <= 0:
                self.prof.__exit__(None, None, None)

    args = TrainingArguments(
        output_dir=str(out / "hf_trainer_out"),
        per_device_train_batch_size=8,
        max_steps=10**6 if LIVE_S > 0 else STEPS + 2,
        bf16=True,
        logging_steps=1000,
        save_strategy="no",
        report_to=[],
        dataloader_num_workers=2,
        torch_compile=compiled,
    )
    Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[Profile()]).train()
    if LIVE_S > 0:
        shutil.rmtree(out / "hf_trainer_out", ignore_errors=True)
        return out
    gz = gzipped(raw)
    shutil.rmtree(out / "hf_trainer_out", ignore_errors=True)
    return gz


def case_hf_trainer_compiled(out: Path) -> Path:
    return case_hf_trainer(out, compiled=True)


def case_ddp_one(out: Path) -> Path:
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("nccl", rank=0, world_size=1)
    try:
        model, _ = encoder()
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0])
        opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4, fused=True)
        x = torch.randn(8, 512, 1024, device=DEV)

        def step() -> None:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = ddp(x).float().square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        for _ in range(3):
            step()
        return profiled(out, "ddp_one", step)
    finally:
        dist.destroy_process_group()


def case_inference_graphed(out: Path) -> Path:
    model = _inference_model()
    static_x = torch.randn(2, 64, 512, device=DEV)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.inference_mode():
        for _ in range(3):  # warm up on a side stream, as the CUDA graphs docs ask
            model(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.inference_mode():
        static_y = model(static_x)
    fresh = torch.randn(2, 64, 512, device=DEV)

    def step() -> None:
        static_x.copy_(fresh)
        graph.replay()
        static_y.sum()

    return profiled(out, "inference_graphed", step, warmup=3)


def case_inference_reduce_overhead(out: Path) -> Path:
    model = torch.compile(_inference_model(), mode="reduce-overhead")
    return _inference_case(out, "inference_reduce_overhead", model, 5)


def case_train_reduce_overhead(out: Path) -> Path:
    model, opt = mlp()
    compiled = torch.compile(model, mode="reduce-overhead")
    x = torch.randn(64, 1024, device=DEV)
    return profiled(out, "train_reduce_overhead", train_step(compiled, opt, x), warmup=5)


def _capture_profiled(out: Path, name: str, step: Callable[[], None]) -> Path:
    """One call of ``step`` unprofiled (torch.compile compiles, Inductor's CUDA
    graphs warm up), then four profiled from the next, without a schedule: the
    graph's capture is in the trace, then its replays."""
    step()
    torch.cuda.synchronize()
    raw = out / f"{name}.pt.trace.json"
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
    ) as prof:
        for _ in range(4):
            step()
            prof.step()
        torch.cuda.synchronize()
    prof.export_chrome_trace(str(raw))
    return gzipped(raw)


def case_train_reduce_overhead_capture(out: Path) -> Path:
    model, opt = mlp()
    compiled = torch.compile(model, mode="reduce-overhead")
    x = torch.randn(64, 1024, device=DEV)
    return _capture_profiled(out, "train_reduce_overhead_capture", train_step(compiled, opt, x))


def case_inference_reduce_overhead_capture(out: Path) -> Path:
    model = torch.compile(_inference_model(), mode="reduce-overhead")
    x = torch.randn(2, 64, 512, device=DEV)

    def step() -> None:
        with torch.inference_mode():
            model(x)

    return _capture_profiled(out, "inference_reduce_overhead_capture", step)


def case_train_graphed(out: Path) -> Path:
    model, opt = mlp()
    x = torch.randn(64, 1024, device=DEV)
    graphed = torch.cuda.make_graphed_callables(model, (x,))
    return profiled(out, "train_graphed", train_step(graphed, opt, x), warmup=3)


def _fp32_mlp(out: Path, name: str, tf32: bool) -> Path:
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        model = nn.Sequential(*[nn.Linear(4096, 4096) for _ in range(4)]).to(DEV)
        opt = torch.optim.SGD(model.parameters(), lr=1e-4)
        x = torch.randn(2048, 4096, device=DEV)
        return profiled(out, name, train_step(model, opt, x), warmup=3)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False


def case_fp32_mlp(out: Path) -> Path:
    return _fp32_mlp(out, "fp32_mlp", tf32=False)


def case_tf32_mlp(out: Path) -> Path:
    return _fp32_mlp(out, "tf32_mlp", tf32=True)


def case_conv_warmup(out: Path) -> Path:
    """A small CNN with cuDNN's autotuning on (torch.backends.cudnn.benchmark),
    profiled from its first iteration without a schedule or prof.step(), as a
    first profile often is: the window holds the warm-up (cuDNN's algorithm
    search, the caching allocator's first reservations, CUDA loading kernels)."""
    torch.backends.cudnn.benchmark = True
    try:
        model = nn.Sequential(
            nn.Conv2d(3, 64, 7, stride=2, padding=3),
            nn.ReLU(),
            nn.Conv2d(64, 128, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(128, 256, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(256, 256, 3, padding=1),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(256, 1000),
        ).to(DEV)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        x = torch.randn(64, 3, 224, 224, device=DEV)
        step = train_step(model, opt, x)
        raw = out / "conv_warmup.pt.trace.json"
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        ) as prof:
            for _ in range(3):
                step()
            torch.cuda.synchronize()
        prof.export_chrome_trace(str(raw))
        return gzipped(raw)
    finally:
        torch.backends.cudnn.benchmark = False


def case_partly_compiled(out: Path) -> Path:
    """An eager model of many small layers whose one helper (a gated
    activation) is compiled: torch.compile ran, yet its region issues few of
    the step's launches."""

    @torch.compile
    def gate(h: torch.Tensor) -> torch.Tensor:
        a, b = h.chunk(2, dim=-1)
        return a * torch.sigmoid(b)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = nn.Linear(256, 512)
            self.down = nn.Linear(256, 256)
            self.norm = nn.LayerNorm(256)

        def forward(self, h: torch.Tensor) -> torch.Tensor:
            return h + self.down(self.norm(torch.relu(self.up(h)[..., :256])))

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList(Block() for _ in range(12))
            self.head = nn.Linear(256, 512)

        def forward(self, h: torch.Tensor) -> torch.Tensor:
            for block in self.blocks:
                h = block(h)
            return gate(self.head(h))

    model = Net().to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(64, 256, device=DEV)
    step = train_step(model, opt, x)
    for _ in range(3):  # compile first
        step()
    return profiled(out, "partly_compiled", step)


CASES = {
    name.removeprefix("case_"): fn
    for name, fn in sorted(globals().items())
    if name.startswith("case_") and callable(fn)
}


def main() -> None:
    global LIVE_S, SHAPES, STACKS
    if sys.argv[1] == "--shapes":
        SHAPES = True
        del sys.argv[1]
    if sys.argv[1] == "--stacks":
        STACKS = True
        del sys.argv[1]
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
