"""A second GPU process for recordings: phases of different kinds of GPU work.

``--plan elementwise:60,fp32mm:60,idle:10`` runs each phase for that many seconds:
- elementwise: a memory-bound loop (high DRAM bandwidth, no tensor-core work)
- fp32mm: FP32 matrix products without TF32 (busy GPU, no tensor-core work)
- bf16mm: bf16 matrix products (tensor cores)
- idle: holds its memory, launches nothing
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--plan", default="elementwise:30,fp32mm:30,idle:10")
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    big = torch.randn(256 * 2**20, device="cuda")  # 1 GiB
    a32 = torch.randn(8192, 8192, device="cuda")
    a16 = a32.to(torch.bfloat16)
    for item in args.plan.split(","):
        kind, seconds = item.split(":")
        end = time.time() + float(seconds)
        print(f"phase {kind} for {seconds}s", flush=True)
        while time.time() < end:
            if kind == "elementwise":
                for _ in range(20):
                    big.mul_(1.0001).add_(0.5)
            elif kind == "fp32mm":
                for _ in range(4):
                    a32 @ a32
            elif kind == "bf16mm":
                for _ in range(20):
                    a16 @ a16
            else:
                time.sleep(0.1)
                continue
            torch.cuda.synchronize()


if __name__ == "__main__":
    main()
