"""The operations ``gputui bench`` times, written against torch (passed in, never
imported here: the package stays importable without torch).

Each probe allocates its tensors, returns the operation to repeat and the work
one run does (bytes moved, FLOPs, or one launch); :mod:`gputui.ceilings.runner`
times it.  The same code runs on ``device="cpu"`` with tiny sizes in the tests
(no pinned memory there, no FP8 tensor cores).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gputui.ceilings import measured

MIB = 1 << 20


class NotSupported(Exception):
    """This GPU or this torch cannot run the probe (FP8 before sm_89...)."""


@dataclass(frozen=True)
class Sizes:
    copy_bytes: int  #: each of the two HBM buffers
    matmul_n: int  #: square matrices n x n
    pcie_bytes: int  #: each host and device buffer


FULL_SIZES = Sizes(copy_bytes=1024 * MIB, matmul_n=8192, pcie_bytes=256 * MIB)
QUICK_SIZES = Sizes(copy_bytes=256 * MIB, matmul_n=8192, pcie_bytes=64 * MIB)


def fit_sizes(sizes: Sizes, free_bytes: int | None) -> Sizes:
    """``sizes`` shrunk to leave half of the free device memory alone (another
    process may hold the rest); the bench never needs more than ~3 GiB."""
    if free_bytes is None:
        return sizes
    budget = max(free_bytes // 2, 0)
    copy = sizes.copy_bytes
    while copy > 16 * MIB and 2 * copy > budget:
        copy //= 2
    n = sizes.matmul_n
    while n > 1024 and 3 * n * n * 4 > budget:  # fp32 a, b and the product
        n //= 2
    pcie = sizes.pcie_bytes
    while pcie > 4 * MIB and pcie > budget // 2:
        pcie //= 2
    return Sizes(copy_bytes=copy, matmul_n=n, pcie_bytes=pcie)


@dataclass
class Probe:
    run: Callable[[], object]
    work: float  #: per run: bytes for GB/s, FLOPs for TFLOP/s, 1 for a launch
    size: str  #: what one run does, for the report
    context: Callable[[], contextlib.AbstractContextManager[Any]] = field(
        default=contextlib.nullcontext
    )
    keep: tuple[Any, ...] = ()  #: the tensors, released when the probe is dropped


def _is_cuda(device: str) -> bool:
    return device.startswith("cuda")


def _gib(nbytes: int) -> str:
    return f"{nbytes / (1 << 30):.2f}GiB" if nbytes >= 1 << 30 else f"{nbytes // MIB}MiB"


def hbm_copy(torch: Any, device: str, sizes: Sizes) -> Probe:
    # Same dtype, contiguous, same device: torch hands this to the driver's
    # device-to-device memcpy, the copy the reference figures use.
    n = sizes.copy_bytes
    src = torch.ones(n, dtype=torch.uint8, device=device)
    dst = torch.empty(n, dtype=torch.uint8, device=device)
    return Probe(run=lambda: dst.copy_(src), work=2.0 * n, size=f"{_gib(n)} copy", keep=(src, dst))


@contextlib.contextmanager
def fp32_matmul_precision(torch: Any, tf32: bool) -> Iterator[None]:
    """fp32 matrix products on TF32 tensor cores (``tf32``) or in full fp32, put
    back as they were afterwards.  torch >= 2.9 has ``fp32_precision``; mixing it
    with the older ``allow_tf32`` is an error there, so only one is used."""
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        old = matmul.fp32_precision
        matmul.fp32_precision = "tf32" if tf32 else "ieee"
        try:
            yield
        finally:
            matmul.fp32_precision = old
    else:
        old_allow = matmul.allow_tf32
        matmul.allow_tf32 = tf32
        try:
            yield
        finally:
            matmul.allow_tf32 = old_allow


def _matmul(torch: Any, device: str, n: int, dtype: Any, label: str) -> Probe:
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    return Probe(
        run=lambda: torch.mm(a, b, out=out),
        work=2.0 * n * n * n,
        size=f"{n}^3 {label}",
        keep=(a, b, out),
    )


def matmul_fp32(torch: Any, device: str, sizes: Sizes) -> Probe:
    probe = _matmul(torch, device, sizes.matmul_n, torch.float32, "fp32")
    probe.context = lambda: fp32_matmul_precision(torch, tf32=False)
    return probe


def matmul_tf32(torch: Any, device: str, sizes: Sizes) -> Probe:
    if _is_cuda(device) and torch.cuda.get_device_capability(device) < (8, 0):
        raise NotSupported("TF32 needs compute capability 8.0 or newer")
    probe = _matmul(torch, device, sizes.matmul_n, torch.float32, "fp32 inputs on tf32")
    probe.context = lambda: fp32_matmul_precision(torch, tf32=True)
    return probe


def matmul_bf16(torch: Any, device: str, sizes: Sizes) -> Probe:
    return _matmul(torch, device, sizes.matmul_n, torch.bfloat16, "bf16")


def matmul_fp16(torch: Any, device: str, sizes: Sizes) -> Probe:
    return _matmul(torch, device, sizes.matmul_n, torch.float16, "fp16")


def fp8_support(torch: Any, device: str) -> str | None:
    """None if ``torch._scaled_mm`` can run FP8 here, else why not."""
    if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        return f"torch {torch.__version__} has no float8 matrix product"
    if not _is_cuda(device):
        return "FP8 tensor cores need a CUDA GPU"
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) < (8, 9):
        return f"FP8 tensor cores need compute capability 8.9 or newer (this GPU: {major}.{minor})"
    return None


def matmul_fp8(torch: Any, device: str, sizes: Sizes) -> Probe:
    why = fp8_support(torch, device)
    if why is not None:
        raise NotSupported(why)
    n = sizes.matmul_n
    a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
    # _scaled_mm wants its second operand column-major: the transpose of a
    # row-major tensor is exactly that.
    b = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()
    one = torch.ones((), device=device, dtype=torch.float32)

    def run() -> object:
        return torch._scaled_mm(
            a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True
        )

    try:
        run()
    except Exception as exc:  # e.g. a torch built without FP8 kernels for this GPU
        raise NotSupported(f"torch._scaled_mm failed: {_first_line(exc)}") from None
    return Probe(run=run, work=2.0 * n * n * n, size=f"{n}^3 e4m3, bf16 out", keep=(a, b, one))


def _transfer(torch: Any, device: str, sizes: Sizes, to_device: bool, pinned: bool) -> Probe:
    n = sizes.pcie_bytes
    pin = pinned and _is_cuda(device)  # pinning needs CUDA: CPU tests copy plain memory
    # Filled, not just allocated: a pageable buffer's pages must exist before timing.
    host = torch.ones(n, dtype=torch.uint8, pin_memory=pin)
    dev = torch.ones(n, dtype=torch.uint8, device=device)
    if to_device:
        dst, src = dev, host
    else:
        dst, src = host, dev
    # A pageable copy is synchronous whatever non_blocking says: the driver
    # stages it through its own pinned buffer.
    return Probe(
        run=lambda: dst.copy_(src, non_blocking=pin),
        work=float(n),
        size=f"{_gib(n)} {'pinned' if pinned else 'pageable'}",
        keep=(host, dev),
    )


def h2d_pinned(torch: Any, device: str, sizes: Sizes) -> Probe:
    return _transfer(torch, device, sizes, to_device=True, pinned=True)


def d2h_pinned(torch: Any, device: str, sizes: Sizes) -> Probe:
    return _transfer(torch, device, sizes, to_device=False, pinned=True)


def h2d_pageable(torch: Any, device: str, sizes: Sizes) -> Probe:
    return _transfer(torch, device, sizes, to_device=True, pinned=False)


def d2h_pageable(torch: Any, device: str, sizes: Sizes) -> Probe:
    return _transfer(torch, device, sizes, to_device=False, pinned=False)


def launch(torch: Any, device: str, sizes: Sizes) -> Probe:
    # A one-element in-place add: the smallest kernel an eager PyTorch loop
    # launches, dispatcher included.  Back to back, the time per kernel is what
    # the CPU needs to launch it (or the GPU to run it, whichever is slower): the
    # floor under a launch-bound step.
    x = torch.zeros(1, device=device)
    return Probe(run=lambda: x.add_(1.0), work=1.0, size="1-element add_", keep=(x,))


#: key -> probe factory, in the order they run
PROBES: dict[str, Callable[[Any, str, Sizes], Probe]] = {
    measured.HBM_COPY: hbm_copy,
    measured.MATMUL_FP32: matmul_fp32,
    measured.MATMUL_TF32: matmul_tf32,
    measured.MATMUL_BF16: matmul_bf16,
    measured.MATMUL_FP16: matmul_fp16,
    measured.MATMUL_FP8: matmul_fp8,
    measured.H2D_PINNED: h2d_pinned,
    measured.D2H_PINNED: d2h_pinned,
    measured.H2D_PAGEABLE: h2d_pageable,
    measured.D2H_PAGEABLE: d2h_pageable,
    measured.LAUNCH: launch,
}


class CudaEventClock:
    """Device time between two CUDA events on the current stream."""

    def __init__(self, torch: Any, device: str) -> None:
        self.torch = torch
        self.stream = torch.cuda.current_stream(device)

    def time_ms(self, run: Callable[[], object], inner: int) -> float:
        start = self.torch.cuda.Event(enable_timing=True)
        end = self.torch.cuda.Event(enable_timing=True)
        start.record(self.stream)
        for _ in range(inner):
            run()
        end.record(self.stream)
        end.synchronize()
        return float(start.elapsed_time(end))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
