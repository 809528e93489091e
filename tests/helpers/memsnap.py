"""Synthetic allocator snapshots shaped exactly like ``torch.cuda.memory._snapshot()``
(torch 2.13: ``segments`` with ``blocks``, ``device_traces`` of alloc/free events,
frames innermost first), and a planted leak built from them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gputui.hook import _memsnap
from gputui.hook._memsummary import summarize
from gputui.protocol import memsnap as ms
from gputui.protocol.memsnap import MemorySnapshotResult, MemorySnapshotStatus
from gputui.protocol.schema import DeviceInfo, Hello, StepBatch, StepRecord
from gputui.recording.attach import AttachRecorder

TORCH_DIR = "/venv/lib/python3.11/site-packages/torch/"
STDLIB_DIR = "/usr/lib/python3.11/"
MIB = 2**20


def frame(filename: str, line: int, name: str) -> dict[str, Any]:
    return {"filename": filename, "line": line, "name": name}


def stack(*frames: tuple[str, int, str]) -> list[dict[str, Any]]:
    """Frames innermost first, as torch lists them."""
    return [frame(*f) for f in frames]


#: what an allocation made by a torch op called from user code looks like
def user_stack(file: str, line: int, name: str = "step") -> list[dict[str, Any]]:
    return stack(
        (TORCH_DIR + "nn/functional.py", 2200, "linear"),
        (TORCH_DIR + "nn/modules/module.py", 1750, "_call_impl"),
        (file, line, name),
        ("/home/u/train.py", 90, "main"),
    )


MARKER_FRAMES = stack(
    (TORCH_DIR + "cuda/memory.py", 140, "caching_allocator_alloc"),
    (_memsnap._MARKER_FILE, 60, _memsnap._MARKER_NAME),
    ("/site-packages/gputui/hook/_memsnap.py", 200, "_mark"),
)


class Snapshot:
    """Builds a snapshot dict: events go to device ``device``'s trace; live
    allocations become blocks of one segment each, unless ``segments`` is given."""

    def __init__(self, device: int = 0) -> None:
        self.device = device
        self.trace: list[dict[str, Any]] = []
        self.live: dict[int, tuple[int, list[dict[str, Any]]]] = {}
        self.next_addr = 0x7F0000000000
        self.t = 1_700_000_000_000_000

    def _event(self, action: str, addr: int, size: int, frames: list[Any] | None) -> None:
        self.t += 10
        event: dict[str, Any] = {
            "action": action,
            "addr": addr,
            "size": size,
            "stream": 0,
            "time_us": self.t,
        }
        if frames is not None:
            event["frames"] = frames
        self.trace.append(event)

    def alloc(self, size: int, frames: list[dict[str, Any]] | None) -> int:
        addr = self.next_addr
        self.next_addr += max(512, size) + 512
        self._event("alloc", addr, size, frames if frames is not None else [])
        self.live[addr] = (size, frames or [])
        return addr

    def free(self, addr: int) -> None:
        size, _ = self.live.pop(addr)
        self._event("free_requested", addr, size, [])
        self._event("free_completed", addr, size, [])

    def marker(self) -> None:
        addr = self.alloc(512, MARKER_FRAMES)
        self.free(addr)

    def segments(self) -> list[dict[str, Any]]:
        out = []
        for addr, (size, frames) in sorted(self.live.items()):
            rounded = max(512, (size + 511) // 512 * 512)
            total = max(2 * MIB, rounded)
            blocks = [
                {
                    "address": addr,
                    "size": rounded,
                    "requested_size": size,
                    "state": "active_allocated",
                    "frames": frames,
                }
            ]
            if total > rounded:
                blocks.append(
                    {
                        "address": addr + rounded,
                        "size": total - rounded,
                        "requested_size": 0,
                        "state": "inactive",
                        "frames": [],
                    }
                )
            out.append(
                {
                    "device": self.device,
                    "address": addr,
                    "total_size": total,
                    "allocated_size": rounded,
                    "active_size": rounded,
                    "requested_size": size,
                    "stream": 0,
                    "segment_type": "small" if total <= 2 * MIB else "large",
                    "segment_pool_id": (0, 0),
                    "is_expandable": False,
                    "frames": frames,
                    "blocks": blocks,
                }
            )
        return out

    def build(self, segments: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        traces: list[list[dict[str, Any]]] = [[] for _ in range(self.device + 1)]
        traces[self.device] = self.trace
        return {
            "segments": self.segments() if segments is None else segments,
            "device_traces": traces,
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1},
        }


LEAK_FILE = "/home/u/leaky.py"
LEAK_LINE = 42


def planted_leak(steps: int = 5, leak_bytes: int = 4 * MIB, leak: bool = True) -> dict[str, Any]:
    """``steps`` steps of a job that keeps one tensor per step (``LEAK_FILE:LEAK_LINE``)
    and frees its activations and gradients within each step; parameters
    allocated before the window stay alive.  ``leak=False``: the same job that
    frees the tensor within the step too."""
    snap = Snapshot()
    params = [snap.alloc(8 * MIB, None) for _ in range(2)]  # before the history: no frames
    snap.trace.clear()  # ... and not in the trace
    del params
    snap.marker()
    for k in range(steps):
        acts = [
            snap.alloc(16 * MIB, user_stack("/home/u/model.py", 30 + i, "forward"))
            for i in range(3)
        ]
        kept = snap.alloc(leak_bytes, user_stack(LEAK_FILE, LEAK_LINE, "remember"))
        grads = [snap.alloc(2 * MIB, []) for _ in range(2)]  # autograd's thread: no Python frame
        for addr in acts + grads + ([] if leak else [kept]):
            snap.free(addr)
        del k
        snap.marker()
    return snap.build()


def result(snapshot: dict[str, Any], **meta: Any) -> MemorySnapshotResult:
    """The result the hook would send for ``snapshot`` (steps 100.. by default)."""
    fields = summarize(
        snapshot,
        0,
        _memsnap.is_marker,
        skip_roots=(TORCH_DIR, "/site-packages/gputui/"),
        stdlib_roots=(STDLIB_DIR,),
    )
    boundaries = fields["boundaries"]
    base: dict[str, Any] = {
        "id": "m1",
        "pid": 4242,
        "device": 0,
        "first_step": 100,
        "last_step": 100 + max(0, boundaries - 2),
        "steps": max(1, boundaries - 1),
        "started": 1_700_000_000.0,
        "window_end_wall": 1_700_000_002.5,
        "max_entries": 100_000,
        "start_ms": 0.4,
        "stop_ms": 38.2,
        "summary_ms": 12.5,
        "dump_ms": 80.1,
        "ready_after_ms": 95.0,
        "snapshot_path": "/home/u/.cache/gputui/memory/4242-20260101-120000-steps100-104.pickle",
        "snapshot_bytes": 1_234_567,
    }
    base.update(fields)
    base.update(meta)
    return MemorySnapshotResult(**base)


HELLO = Hello(
    pid=4242,
    argv=("python", "leaky.py"),
    torch="2.13.0",
    cuda="13.0",
    cuda_in_use=True,
    device=DeviceInfo(0, "NVIDIA H100 80GB HBM3", 80 * 2**30, "GPU-1"),
)


def step_batch(first: int, n: int) -> dict[str, Any]:
    records = tuple(
        StepRecord(i, 1_700_000_000.0 + i * 0.05, 0.05, {"forward": 0.02, "backward": 0.03})
        for i in range(first, first + n)
    )
    return StepBatch(records).to_wire()


def record_session(path: Path, with_snapshot: bool = True) -> None:
    """An attach recording: steps, then a memory snapshot of steps 100..104."""
    rec = AttachRecorder(path, HELLO.to_wire(), 4242, note="test")
    rec.write(step_batch(0, 100))
    if with_snapshot:
        rec.write(MemorySnapshotStatus(ms.RECORDING, "m1", step=100, steps=5).to_wire())
        rec.write(step_batch(100, 5))
        rec.write(MemorySnapshotStatus(ms.PROCESSING, "m1").to_wire())
        rec.write(result(planted_leak()).to_wire())
    rec.write(step_batch(105, 20))
    rec.close()
