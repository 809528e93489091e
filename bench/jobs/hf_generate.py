"""Text generation with the Hugging Face ``generate()`` loop on a GPU: a GPT-2
(12 layers, built from its config: nothing is downloaded) in bf16, greedy
decoding of 64 new tokens for a batch of 1, over and over for SECONDS.  One
JSON line per variant: new tokens a second, after a warm-up.

    python3 bench/jobs/hf_generate.py [SECONDS] [VARIANT ...]

Variants: ``eager`` (the default dynamic cache), ``static`` (a static KV cache),
``static_compiled`` (the static cache and the model's forward compiled with
``mode='reduce-overhead'``: CUDA graphs, as the Hugging Face docs advise).
"""

from __future__ import annotations

import json
import sys
import time

import torch

NEW = 64


def model_for(variant: str) -> tuple[object, torch.Tensor]:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257)
    model = GPT2LMHeadModel(cfg).to("cuda", torch.bfloat16).eval()
    model.generation_config.pad_token_id = 0
    if variant.startswith("static"):
        model.generation_config.cache_implementation = "static"
    if variant == "static_compiled":
        model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
    prompt = torch.randint(0, 50257, (1, 32), device="cuda")
    return model, prompt


def run(variant: str, seconds: float) -> float:
    model, prompt = model_for(variant)
    gen = model.generate  # type: ignore[attr-defined]
    start = time.monotonic()
    with torch.inference_mode():
        while time.monotonic() - start < (60.0 if variant == "static_compiled" else 3.0):
            gen(prompt, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)
        torch.cuda.synchronize()
        t0, calls = time.monotonic(), 0
        while time.monotonic() - t0 < seconds:
            gen(prompt, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)
            calls += 1
        torch.cuda.synchronize()
        return calls * NEW / (time.monotonic() - t0)


def main() -> int:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 8.0
    for variant in sys.argv[2:] or ("eager", "static", "static_compiled"):
        rate = run(variant, seconds)
        print(json.dumps({"variant": variant, "tokens_per_s": round(rate, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
