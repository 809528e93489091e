"""A flow-matching sampler's loop as pi0's policy writes it, ``while time >=
-dt / 2`` with ``time`` a GPU tensor (each test reads the tensor back: the host
waits for the GPU every iteration), against the same loop counted in Python:
ms a call, without a profiler, in turns.

    python bench/jobs/while_tensor.py [--compile]
"""

from __future__ import annotations

import sys
import time

import torch

DEV = "cuda"
STEPS = 10


def denoiser(width: int = 1024, depth: int = 8) -> torch.nn.Module:
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers).to(DEV, torch.bfloat16)


def sample_tensor(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    dt = torch.tensor(-1.0 / STEPS, device=DEV)
    t = torch.tensor(1.0, device=DEV)
    while t >= -dt / 2:  # a read-back each iteration
        x = x + dt * model(x)
        t += dt
    return x


def sample_python(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    dt = -1.0 / STEPS
    for _ in range(STEPS):
        x = x + dt * model(x)
    return x


def timed(fn: object, model: torch.nn.Module, x: torch.Tensor, n: int = 200) -> float:
    for _ in range(20):
        fn(model, x)  # type: ignore[operator]
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn(model, x)  # type: ignore[operator]
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1000


def main() -> int:
    model = denoiser()
    if "--compile" in sys.argv:
        model = torch.compile(model, mode="reduce-overhead")  # type: ignore[assignment]
    x = torch.randn(1, 64, 1024, device=DEV, dtype=torch.bfloat16)
    with torch.no_grad():
        for _round in range(3):
            for label, fn in (("tensor", sample_tensor), ("python", sample_python)):
                print(f"while_tensor: {label} condition: {timed(fn, model, x):.3f} ms a call")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
