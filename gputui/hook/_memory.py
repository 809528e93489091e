"""Device memory samples from the caching allocator, taken on the I/O thread."""

from __future__ import annotations

import collections
import time
from typing import Any

from gputui.protocol.schema import MemorySample

MEMORY_HISTORY = 1200  # 10 minutes at 2 Hz
MEMORY_PERIOD_S = 0.5  # <= 2 Hz


class MemorySampler:
    """Keeps the last samples (for viewers that subscribe later) and the first
    error, after which it stops asking."""

    def __init__(self) -> None:
        self.samples: collections.deque[dict[str, Any]] = collections.deque(maxlen=MEMORY_HISTORY)
        self.error: str | None = None

    def sample(
        self, torch: Any, device: int | None, step: int | None = None
    ) -> dict[str, Any] | None:
        """A new sample's wire object, stamped with the newest finished step, or
        None (no CUDA yet, or it failed once)."""
        if torch is None or device is None or self.error is not None:
            return None
        try:
            if not torch.cuda.is_initialized():
                return None
            wire = memory_sample(torch, device, round(time.time(), 3)).to_wire()
            if step is not None and step >= 0:
                wire["step"] = step
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            return None
        self.samples.append(wire)
        return wire


def memory_sample(torch: Any, device: int, t: float) -> MemorySample:
    """The caching allocator's counters for one device.

    ``torch.cuda.memory_stats()`` flattens the allocator's nested statistics into
    a dict of ~100 keys in Python (150-210 µs, holding the GIL the training thread
    needs); the nested form it starts from is read directly when torch has it."""
    raw = getattr(getattr(torch, "_C", None), "_cuda_memoryStats", None)
    if callable(raw):
        try:
            stats = raw(device)
            return MemorySample(
                t=t,
                device=device,
                allocated=int(stats["allocated_bytes"]["all"]["current"]),
                reserved=int(stats["reserved_bytes"]["all"]["current"]),
                active=int(stats["active_bytes"]["all"]["current"]),
                peak_allocated=int(stats["allocated_bytes"]["all"]["peak"]),
                peak_reserved=int(stats["reserved_bytes"]["all"]["peak"]),
                alloc_retries=int(stats.get("num_alloc_retries", 0)),
                ooms=int(stats.get("num_ooms", 0)),
            )
        except (KeyError, TypeError, ValueError):
            pass  # another layout: the public route below
    stats = torch.cuda.memory_stats(device)
    return MemorySample(
        t=t,
        device=device,
        allocated=int(stats.get("allocated_bytes.all.current", 0)),
        reserved=int(stats.get("reserved_bytes.all.current", 0)),
        active=int(stats.get("active_bytes.all.current", 0)),
        peak_allocated=int(stats.get("allocated_bytes.all.peak", 0)),
        peak_reserved=int(stats.get("reserved_bytes.all.peak", 0)),
        alloc_retries=int(stats.get("num_alloc_retries", 0)),
        ooms=int(stats.get("num_ooms", 0)),
    )
