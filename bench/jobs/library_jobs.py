"""Jobs made of library code as their users write them, each profiled the way
PyTorch's profiler recipe does it (``schedule``, ``tensorboard_trace_handler``),
to try the analyzer on training loops it was not written against.

    python bench/jobs/library_jobs.py OUT_DIR [JOB ...]

Jobs:
- ``llama_eager``: a Hugging Face Llama (from a config: no download) trained in
  bf16 with ``attn_implementation="eager"``; ``llama_sdpa``: the same with SDPA;
  ``llama_timing``: both without a profiler, ms a step;
- ``bert_mlm_trainer``: a ``Trainer`` fitting a BERT masked-LM in fp16 with
  gradient accumulation 4 and ``DataCollatorForLanguageModeling`` masking each
  batch on the training thread (``dataloader_num_workers=0``);
  ``bert_tiny_accum``: the same with a 2-layer BERT 256 wide and 3 profiled
  steps (a small trace), ``bert_tiny_accum_live`` the same for 600 steps
  without a profiler (``gputui run``, ``attach``); ``bert_accum_timing``: no
  profiler, the base BERT's optimizer step at micro-batch 16 x 4 against 64 x 1
  (the same optimizer batch), each fitted for 40 steps, the seconds per step
  printed;
- ``maskrcnn``: torchvision's Mask R-CNN trained on random images and boxes;
- ``adam_for_loop``: a 48-layer MLP trained with ``torch.optim.Adam(foreach=False)``;
- ``gpt2_checkpointing``: a Hugging Face GPT-2 with gradient checkpointing on;
- ``fsdp2_one``: a transformer under ``fully_shard`` (FSDP2), one rank over NCCL;
- ``empty_cache``: an MLP whose loop calls ``torch.cuda.empty_cache()`` every step;
- ``vit_bf16``: torchvision's ViT-B/16 trained in bf16 autocast at batch 64 (a
  busy GPU: nothing to find);
- ``resnet50_fp32``: torchvision's ResNet-50 trained in fp32 at batch 128 (cuDNN's
  convolutions use TF32 by default); ``resnet50_channels_last``: the same in
  channels_last; ``resnet50_timing``: without a profiler, fp32 and bf16
  autocast, NCHW and channels_last, ms a step;
- ``pinned_loader``: a DataLoader of CPU tensors with ``pin_memory=True``, 4
  workers, the batches copied with ``non_blocking=True``;
  ``pinned_loader_timing``: the same without a profiler, AdamW's default step
  against ``fused=True``, ms a step, from the loader and on one batch fed again,
  and NCHW against channels_last on one batch fed again; ``pinned_loader_live``:
  the job without a profiler for ``LIVE_S`` seconds (``gputui run``, ``attach``).

- ``peft_lora``: a Hugging Face Llama (from a config) in bf16 with LoRA adapters
  (``peft``, r=16 on the attention's q and v), only the adapters trained;
- ``timm_convnext``: timm's ConvNeXt-Tiny trained in bf16 autocast at batch 64
  (its 7x7 depthwise convolutions and channel LayerNorms), NCHW as timm makes
  it; ``timm_convnext_timing``: without a profiler, NCHW against channels_last,
  ms a step;
- ``accelerate_fp16``: a GPT-2 (from a config) fitted with ``accelerate``'s
  ``Accelerator(mixed_precision="fp16", gradient_accumulation_steps=4)`` and its
  ``accumulate`` context (a GradScaler underneath); ``accelerate_fp16_live`` the
  same without a profiler for ``LIVE_S`` seconds (``gputui run``, ``attach``);
  ``accelerate_fp16_timing``: 4 x 4 against 16 x 1, ms an optimizer step;
- ``generate_dynamic``: a GPT-2's ``generate()`` (64 new tokens, batch 1, bf16),
  two calls profiled with ``torch.profiler.profile()`` and no schedule, as a user
  first tries it; ``generate_static``: the same with the static KV cache.
- ``moe_qwen``: a Hugging Face Qwen2-MoE causal LM (from a config; Mixtral where
  transformers lacks it), 4 layers 1024 wide, 8 experts of 1024, top-2, in bf16
  with AdamW at batch 4 x 512, traced with shapes and stacks;
  ``moe_qwen_timing``: without a profiler, ms a step; ``moe_qwen_live`` the same
  without a profiler for ``LIVE_S`` seconds (``gputui run``, ``attach``);
  ``moe_qwen_fix_timing``: its launch fix part by part (a fused AdamW,
  torch.compile, batch 8), ms a sample.

Each job writes its traces under ``OUT_DIR/JOB/`` (the handler's file names),
gzipped.
"""

from __future__ import annotations

import gzip
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

DEV = "cuda"
WAIT, WARMUP, ACTIVE = 2, 2, 4
STEPS = WAIT + WARMUP + ACTIVE + 1


def recipe(out: Path, **extra: Any) -> Any:
    return torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
        schedule=torch.profiler.schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(str(out)),
        **extra,
    )


def loop(out: Path, step: Callable[[], None], **extra: Any) -> None:
    with recipe(out, **extra) as prof:
        for _ in range(STEPS):
            step()
            prof.step()
    torch.cuda.synchronize()


def llama(out: Path, attn: str, profile: bool = True) -> Callable[[], None]:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=6,
        num_attention_heads=16,
        num_key_value_heads=16,
        max_position_embeddings=2048,
        attn_implementation=attn,
    )
    model = LlamaForCausalLM(cfg).to(DEV, torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    return lm_step(out, model, opt, torch.randint(0, 32000, (8, 1024), device=DEV), profile)


def lm_step(
    out: Path, model: Any, opt: Any, ids: torch.Tensor, profile: bool, **extra: Any
) -> Callable[[], None]:
    """A causal LM's training step on ``ids`` (its own labels), profiled with
    shapes, FLOPs and the profiler's ``extra`` options where ``profile``."""

    def step() -> None:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    if profile:
        loop(out, step, record_shapes=True, with_flops=True, **extra)
    return step


def job_llama_eager(out: Path) -> None:
    llama(out, "eager")


def job_llama_sdpa(out: Path) -> None:
    llama(out, "sdpa")


def bert_mlm(
    out: Path,
    batch: int = 16,
    accum: int = 4,
    tiny: bool = False,
    profile: bool = True,
    steps: int = STEPS + 1,
) -> float:
    """Fit a BERT masked-LM with the Trainer; its seconds per optimizer step
    (the Trainer's own runtime over ``steps``)."""
    from transformers import (
        BertConfig,
        BertForMaskedLM,
        BertTokenizerFast,
        DataCollatorForLanguageModeling,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    vocab = out / "vocab.txt"
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(30000)]
    vocab.write_text("\n".join(words) + "\n")
    tok = BertTokenizerFast(vocab_file=str(vocab))
    size = {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
            "intermediate_size": 1024} if tiny else {}  # fmt: skip
    model = BertForMaskedLM(BertConfig(vocab_size=len(words), **size))

    class Texts(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return 100_000

        def __getitem__(self, i: int) -> dict[str, Any]:
            g = torch.Generator().manual_seed(i)
            ids = (torch.randint(5, len(words), (256,), generator=g)).tolist()
            return {"input_ids": [2, *ids, 3]}

    class Profile(TrainerCallback):  # type: ignore[misc]
        def on_train_begin(self, *_: Any, **__: Any) -> None:
            self.prof = recipe(out) if profile else None
            if self.prof is not None:
                self.prof.__enter__()

        def on_step_end(self, *_: Any, **__: Any) -> None:
            if self.prof is not None:
                self.prof.step()

        def on_train_end(self, *_: Any, **__: Any) -> None:
            if self.prof is not None:
                self.prof.__exit__(None, None, None)

    args = TrainingArguments(
        output_dir=str(out / "trainer_out"),
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=accum,
        max_steps=steps,
        fp16=True,
        logging_steps=1000,
        save_strategy="no",
        report_to=[],
        dataloader_num_workers=0,
    )
    collator = DataCollatorForLanguageModeling(tokenizer=tok, mlm_probability=0.15)
    result = Trainer(
        model=model, args=args, train_dataset=Texts(), data_collator=collator, callbacks=[Profile()]
    ).train()
    shutil.rmtree(out / "trainer_out", ignore_errors=True)
    vocab.unlink()
    return float(result.metrics["train_runtime"]) / steps


def job_bert_mlm_trainer(out: Path) -> None:
    bert_mlm(out)


def job_bert_tiny_accum(out: Path) -> None:
    global ACTIVE
    ACTIVE = 3
    bert_mlm(out, batch=8, tiny=True, steps=WAIT + WARMUP + ACTIVE + 1)


def job_bert_tiny_accum_live(out: Path) -> None:
    """``bert_tiny_accum`` without a profiler for 600 optimizer steps: for
    ``gputui run`` and ``attach``."""
    bert_mlm(out, batch=8, tiny=True, profile=False, steps=600)


def job_bert_accum_timing(out: Path) -> None:
    for batch, accum in ((16, 4), (64, 1), (16, 4), (64, 1)):
        per_step = bert_mlm(out, batch=batch, accum=accum, profile=False, steps=40)
        print(f"bert_accum_timing: micro-batch {batch} x {accum}: {per_step * 1000:.1f} ms a step")


def job_llama_timing(out: Path) -> None:
    """The Llama of ``llama_eager`` and ``llama_sdpa`` without a profiler: ms a step."""
    import time

    for attn in ("eager", "sdpa", "eager", "sdpa"):
        step = llama(out, attn, profile=False)
        for _ in range(5):
            step()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(30):
            step()
        torch.cuda.synchronize()
        print(f"llama_timing: {attn}: {(time.perf_counter() - t0) / 30 * 1000:.1f} ms a step")


def job_maskrcnn(out: Path) -> None:
    import torchvision

    model = torchvision.models.detection.maskrcnn_resnet50_fpn(
        weights=None, weights_backbone=None, num_classes=11
    ).to(DEV)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    g = torch.Generator().manual_seed(0)

    def batch() -> Iterator[tuple[list[torch.Tensor], list[dict[str, torch.Tensor]]]]:
        while True:
            images, targets = [], []
            for _ in range(4):
                images.append(torch.rand(3, 512, 640, generator=g).to(DEV))
                xy = torch.rand(6, 2, generator=g) * torch.tensor([500.0, 380.0])
                wh = 40 + torch.rand(6, 2, generator=g) * 100
                boxes = torch.cat([xy, xy + wh], 1)
                masks = torch.zeros(6, 512, 640, dtype=torch.uint8)
                for k, b in enumerate(boxes.int().tolist()):
                    masks[k, b[1] : b[3], b[0] : b[2]] = 1
                targets.append(
                    {
                        "boxes": boxes.to(DEV),
                        "labels": torch.randint(1, 11, (6,), generator=g).to(DEV),
                        "masks": masks.to(DEV),
                    }
                )
            yield images, targets

    batches = batch()

    def step() -> None:
        images, targets = next(batches)
        losses = model(images, targets)
        loss = sum(losses.values())
        opt.zero_grad()
        loss.backward()
        opt.step()

    loop(out, step)


def job_adam_for_loop(out: Path) -> None:
    layers: list[nn.Module] = []
    for _ in range(48):
        layers += [nn.Linear(512, 512), nn.LayerNorm(512), nn.GELU()]
    model = nn.Sequential(*layers).to(DEV)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, foreach=False)
    x = torch.randn(256, 512, device=DEV)

    def step() -> None:
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    loop(out, step, record_shapes=True, profile_memory=True, with_stack=True)


def job_gpt2_checkpointing(out: Path) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12)).to(DEV)
    model.gradient_checkpointing_enable()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 50257, (8, 1024), device=DEV)

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    loop(out, step)


def job_fsdp2_one(out: Path) -> None:
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl", rank=0, world_size=1)
    torch.cuda.set_device(0)
    layer = nn.TransformerEncoderLayer(1024, 16, 4096, batch_first=True, norm_first=True)
    model = nn.TransformerEncoder(layer, 8).to(DEV)
    for block in model.layers:
        fully_shard(block)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(8, 1024, 1024, device=DEV)

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()

    loop(out, step)
    dist.destroy_process_group()


def job_empty_cache(out: Path) -> None:
    model = nn.Sequential(nn.Linear(2048, 8192), nn.GELU(), nn.Linear(8192, 2048)).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(1024, 2048, device=DEV)

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()

    loop(out, step)


def vision_step(
    model: nn.Module, batch: int, amp: bool, channels_last: bool = False
) -> Callable[[], None]:
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(DEV, memory_format=fmt).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, 224, 224, device=DEV).to(memory_format=fmt)
    y = torch.randint(0, 1000, (batch,), device=DEV)
    loss_fn = nn.CrossEntropyLoss()

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def job_vit_bf16(out: Path) -> None:
    import torchvision

    loop(out, vision_step(torchvision.models.vit_b_16(), 64, amp=True))


def job_resnet50_fp32(out: Path) -> None:
    import torchvision

    loop(out, vision_step(torchvision.models.resnet50(), 128, amp=False))


def job_resnet50_channels_last(out: Path) -> None:
    import torchvision

    loop(out, vision_step(torchvision.models.resnet50(), 128, amp=False, channels_last=True))


def job_resnet50_timing(out: Path) -> None:
    """ResNet-50 at batch 128 without a profiler, fp32 and bf16 autocast, NCHW
    and channels_last: ms a step."""
    import time

    import torchvision

    for _ in range(2):
        for amp in (False, True):
            for last in (False, True):
                step = vision_step(torchvision.models.resnet50(), 128, amp, channels_last=last)
                for _ in range(5):
                    step()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(20):
                    step()
                torch.cuda.synchronize()
                ms = (time.perf_counter() - t0) / 20 * 1000
                what = (
                    f"{'bf16 autocast' if amp else 'fp32'}, {'channels_last' if last else 'NCHW'}"
                )
                print(f"resnet50_timing: {what}: {ms:.1f} ms a step")


class _Tensors(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        return torch.randn(3, 64, 64, generator=g), torch.randint(0, 10, (), generator=g)


def job_pinned_loader(
    out: Path,
    fused: bool | None = None,
    profile: bool = True,
    loader: bool = True,
    channels_last: bool = False,
) -> float:
    """The pinned loader's job; unprofiled (``profile=False``), its ms a step
    over 200 steps; without the ``loader``, one batch made on the GPU once."""
    import time

    model = nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10),
    ).to(DEV)  # fmt: skip
    layout = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(memory_format=layout)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=fused)
    data = torch.utils.data.DataLoader(
        _Tensors(), batch_size=256, num_workers=4, pin_memory=True, persistent_workers=True
    )
    batches = iter(data)
    fixed = next(batches)

    def step() -> None:
        x, y = next(batches) if loader else fixed
        x, y = x.to(DEV, non_blocking=True), y.to(DEV, non_blocking=True)
        x = x.contiguous(memory_format=layout)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(5):
        step()
    if profile:
        loop(out, step)
        return 0.0
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(200):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / 200 * 1000


def job_pinned_loader_live(out: Path) -> None:
    """The pinned loader's job without a profiler for ``LIVE_S`` seconds (an
    environment variable, 40 by default): for ``gputui run`` and ``attach``."""
    import time

    t0 = time.monotonic()
    limit = float(os.environ.get("LIVE_S", "40"))
    while time.monotonic() - t0 < limit:
        job_pinned_loader(out, profile=False)


def job_pinned_loader_timing(out: Path) -> None:
    """The pinned loader's job without a profiler: AdamW's default step against
    its fused one, ms a step."""
    for loader in (True, False):
        for fused in (None, True, None, True):
            ms = job_pinned_loader(out, fused=fused, profile=False, loader=loader)
            fed = "from the loader" if loader else "one batch, fed again"
            print(f"pinned_loader_timing: {fed}, AdamW(fused={fused}): {ms:.2f} ms a step")
    for last in (False, True, False, True):
        ms = job_pinned_loader(out, profile=False, loader=False, channels_last=last)
        layout = "channels_last" if last else "NCHW"
        print(f"pinned_loader_timing: one batch, fed again, {layout}: {ms:.2f} ms a step")


def timed_ms(step: Callable[[], None], n: int = 50, warmup: int = 10) -> float:
    """``step``'s milliseconds, the mean of ``n`` runs after ``warmup``."""
    import time

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1000


def peft_lora(out: Path, batch: int = 4, profile: bool = True) -> Callable[[], None]:
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
        num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=2048,
    )  # fmt: skip
    model = LlamaForCausalLM(cfg).to(DEV, torch.bfloat16)
    lora = LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "v_proj"])
    model = get_peft_model(model, lora)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    return lm_step(out, model, opt, torch.randint(0, 32000, (batch, 512), device=DEV), profile)


def job_peft_lora(out: Path) -> None:
    peft_lora(out)


def job_peft_lora_timing(out: Path) -> None:
    """LoRA at batch 4 against 16: ms a sample."""
    for batch in (4, 16, 4, 16):
        ms = timed_ms(peft_lora(out, batch, profile=False), n=20)
        print(f"peft_lora_timing: batch {batch}: {ms / batch:.2f} ms a sample ({ms:.1f} a step)")


def convnext_step(channels_last: bool, compiled: bool = False) -> Callable[[], None]:
    import timm

    model = timm.create_model("convnext_tiny")
    if compiled:
        model = torch.compile(model)
    return vision_step(model, 64, amp=True, channels_last=channels_last)


def job_timm_convnext(out: Path) -> None:
    loop(out, convnext_step(False), record_shapes=True)


def job_timm_convnext_timing(out: Path) -> None:
    for last in (False, True, False, True):
        ms = timed_ms(convnext_step(last))
        print(f"timm_convnext_timing: {'channels_last' if last else 'NCHW'}: {ms:.2f} ms a step")
    for compiled in (True, False, True):
        ms = timed_ms(convnext_step(False, compiled))
        print(f"timm_convnext_timing: NCHW, compiled={compiled}: {ms:.2f} ms a step")


def accelerate_fp16(
    out: Path, batch: int = 4, accum: int = 4, profile: bool = True
) -> Callable[[], None]:
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState
    from transformers import GPT2Config, GPT2LMHeadModel

    AcceleratorState._reset_state(True)  # a new Accelerator for each setting
    GradientState._reset_state()
    acc = Accelerator(mixed_precision="fp16", gradient_accumulation_steps=accum)
    model = GPT2LMHeadModel(GPT2Config(n_layer=6, n_embd=768, n_head=12))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = torch.utils.data.DataLoader(
        torch.randint(0, 50257, (1024, 512)), batch_size=batch, shuffle=True
    )
    model, opt, data = acc.prepare(model, opt, data)

    def forever() -> Iterator[Any]:
        while True:
            yield from data

    batches = forever()

    def step() -> None:  # one optimizer step: ``accum`` micro-batches
        for _ in range(accum):
            ids = next(batches)
            with acc.accumulate(model):
                loss = model(input_ids=ids, labels=ids).loss
                acc.backward(loss)
                opt.step()
                opt.zero_grad()

    if profile:
        loop(out, step)
    return step


def job_accelerate_fp16(out: Path) -> None:
    accelerate_fp16(out)


def job_accelerate_fp16_live(out: Path) -> None:
    """``accelerate_fp16`` without a profiler for ``LIVE_S`` seconds (40 by
    default): for ``gputui run`` and ``attach``."""
    import time

    step = accelerate_fp16(out, profile=False)
    t0 = time.monotonic()
    while time.monotonic() - t0 < float(os.environ.get("LIVE_S", "40")):
        step()


def job_accelerate_fp16_timing(out: Path) -> None:
    """The same optimizer batch of 16 sequences as 4 x 4 and as 16 x 1: ms an
    optimizer step."""
    for batch, accum in ((4, 4), (16, 1), (4, 4), (16, 1)):
        ms = timed_ms(accelerate_fp16(out, batch, accum, profile=False), n=20, warmup=5)
        print(f"accelerate_fp16_timing: batch {batch} x {accum}: {ms:.1f} ms an optimizer step")


def _generate(out: Path, static: bool) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257)
    model = GPT2LMHeadModel(cfg).to(DEV, torch.bfloat16).eval()
    model.generation_config.pad_token_id = 0
    if static:
        model.generation_config.cache_implementation = "static"
    ids = torch.randint(0, 50257, (1, 32), device=DEV)
    kw = {"max_new_tokens": 64, "min_new_tokens": 64, "do_sample": False}
    for _ in range(3):  # warm-up (the static cache compiles here)
        model.generate(ids, **kw)
    torch.cuda.synchronize()
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    ) as prof:
        for _ in range(2):
            model.generate(ids, **kw)
        torch.cuda.synchronize()
    prof.export_chrome_trace(str(out / "generate.pt.trace.json"))


def job_generate_dynamic(out: Path) -> None:
    _generate(out, static=False)


def job_generate_static(out: Path) -> None:
    _generate(out, static=True)


def moe_lm() -> Any:
    """A small mixture-of-experts causal LM from a config: Qwen2-MoE where this
    transformers has it, else Mixtral; 8 experts, top-2."""
    import transformers

    size = {"vocab_size": 32000, "hidden_size": 1024, "intermediate_size": 1024,
            "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 16,
            "max_position_embeddings": 2048, "num_experts_per_tok": 2}  # fmt: skip
    if hasattr(transformers, "Qwen2MoeConfig"):
        cfg = transformers.Qwen2MoeConfig(
            **size, num_experts=8, moe_intermediate_size=1024, shared_expert_intermediate_size=1024
        )
        return transformers.Qwen2MoeForCausalLM(cfg)
    return transformers.MixtralForCausalLM(transformers.MixtralConfig(**size, num_local_experts=8))


def moe_qwen(
    out: Path,
    profile: bool = True,
    batch: int = 4,
    fused: bool = False,
    compiled: bool = False,
) -> Callable[[], None]:
    model = moe_lm().to(DEV, torch.bfloat16)
    print(f"moe_qwen: {type(model).__name__}", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused or None)
    ids = torch.randint(0, 32000, (batch, 512), device=DEV)
    run = torch.compile(model) if compiled else model
    return lm_step(out, run, opt, ids, profile, with_stack=True)


def job_moe_qwen(out: Path) -> None:
    moe_qwen(out)


def job_moe_qwen_live(out: Path) -> None:
    """``moe_qwen`` without a profiler for ``LIVE_S`` seconds (40 by default): for
    ``gputui run`` and ``attach``."""
    import time

    step = moe_qwen(out, profile=False)
    t0 = time.monotonic()
    while time.monotonic() - t0 < float(os.environ.get("LIVE_S", "40")):
        step()


def job_moe_qwen_timing(out: Path) -> None:
    """``moe_qwen`` without a profiler: ms a step."""
    ms = timed_ms(moe_qwen(out, profile=False), n=20, warmup=5)
    print(f"moe_qwen_timing: {ms:.1f} ms a step")


def job_moe_qwen_fix_timing(out: Path) -> None:
    """The launch fix ``moe_qwen`` is told, each part without a profiler, in
    turns: eager against a fused AdamW, torch.compile, batch 8 (ms a sample)."""
    cases = {
        "eager": {},
        "fused AdamW": {"fused": True},
        "compiled": {"compiled": True},
        "batch 8": {"batch": 8},
    }
    for _round in range(2):
        for label, kw in cases.items():
            batch = int(kw.get("batch", 4))
            warmup = 10 if kw.get("compiled") else 5
            ms = timed_ms(moe_qwen(out, profile=False, **kw), n=20, warmup=warmup)
            print(f"moe_qwen_fix_timing: {label}: {ms:.1f} ms a step, {ms / batch:.2f} a sample")


def gzip_all(where: Path) -> None:
    for raw in where.glob("*.json"):
        with raw.open("rb") as src, gzip.open(str(raw) + ".gz", "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
        raw.unlink()


def main() -> int:
    out = Path(sys.argv[1])
    jobs = sys.argv[2:] or [
        n[4:] for n in globals() if n.startswith("job_") and not n.endswith(("_timing", "_live"))
    ]
    failed = 0
    for name in jobs:
        where = out / name
        where.mkdir(parents=True, exist_ok=True)
        try:
            globals()[f"job_{name}"](where)
        except Exception as exc:  # one job's failure leaves the others to run
            failed += 1
            print(f"{name}: failed: {type(exc).__name__}: {exc}", flush=True)
            continue
        gzip_all(where)
        print(f"{name}: {', '.join(p.name for p in where.iterdir())}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
