"""Record an attach session with a hooked job: the live stream plus one capture
(and, with ``--memory-at``, one memory snapshot).

Usage: python bench/record_attach.py PID -o attach.jsonl.gz [--seconds 40] [--capture-at 10]
       [--memory-at 20 --memory-steps 8] [--gpu] [--profile-at 25]
Waits for the job's socket to appear (the hook opens it when training starts).
"""

from __future__ import annotations

import argparse
import sys
import time

from gputui.client.hook import AttachError, HookClient
from gputui.protocol.capture import CaptureResult
from gputui.protocol.memsnap import MemorySnapshotResult, MemorySnapshotStatus
from gputui.recording.attach import AttachRecorder


def connect(pid: int, wait_s: float) -> HookClient:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return HookClient.connect(pid)
        except AttachError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("pid", type=int)
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--seconds", type=float, default=40.0)
    p.add_argument("--capture-at", type=float, default=10.0)
    p.add_argument("--capture-steps", type=int, default=5)
    p.add_argument(
        "--flops", action="store_true", help="the capture records FLOPs and shapes (the roofline)"
    )
    p.add_argument("--memory-at", type=float, default=None, help="ask for a memory snapshot")
    p.add_argument("--memory-steps", type=int, default=8)
    p.add_argument("--note", default=None)
    p.add_argument(
        "--gpu", action="store_true", help="sample the job's GPU (NVML) into the recording"
    )
    p.add_argument(
        "--profile-at", type=float, default=None, help="ask for the Python profile at S seconds"
    )
    args = p.parse_args()
    client = connect(args.pid, 120.0)
    recorder = AttachRecorder(args.output, client.hello_raw, args.pid, note=args.note)
    results: list[CaptureResult] = []
    snapshots: list[object] = []

    def on_event(event: object) -> None:
        if isinstance(event, CaptureResult):
            results.append(event)
        if isinstance(event, MemorySnapshotResult) or (
            isinstance(event, MemorySnapshotStatus) and event.ended
        ):
            snapshots.append(event)

    client.start(on_event=on_event, on_raw=recorder.write)
    client.subscribe(history=2000, memory=True)
    watch = None
    device = client.hello.device
    if args.gpu and device is not None:
        from gputui.nvml.gpu_watch import GpuWatch

        watch = GpuWatch(device.uuid, device.index, on_sample=recorder.write_gpu)
        watch.start()
    profile_asked = args.profile_at is None
    start = time.monotonic()
    asked = False
    memory_asked = args.memory_at is None
    while time.monotonic() - start < args.seconds:
        if not asked and time.monotonic() - start >= args.capture_at:
            client.request_capture(steps=args.capture_steps, flops=args.flops)
            asked = True
        if not memory_asked and time.monotonic() - start >= args.memory_at:
            client.request_memory_snapshot(args.memory_steps)
            memory_asked = True
        if not profile_asked and time.monotonic() - start >= args.profile_at:
            client.request_profile()
            profile_asked = True
        time.sleep(0.2)
    if watch is not None:
        watch.stop()
    client.close()
    recorder.close()
    print(
        f"recorded {recorder.count} messages; captures: "
        + ", ".join(f"{len(r.kernels)} kernels, trace {r.trace_path}" for r in results)
        + "".join(f"; memory snapshot: {_memory_line(m)}" for m in snapshots),
        file=sys.stderr,
    )


def _memory_line(event: object) -> str:
    if isinstance(event, MemorySnapshotResult):
        top = event.growing[0].site if event.growing else None
        grows = "none growing" if top is None else f"growing: {top.file}:{top.line}"
        return f"{len(event.sites)} sites, {grows}, file {event.snapshot_path}"
    assert isinstance(event, MemorySnapshotStatus)
    return f"{event.state}: {event.reason}"


if __name__ == "__main__":
    main()
