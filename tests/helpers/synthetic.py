"""Synthetic snapshots for tests, screenshots and benchmarks.

``make_snapshots`` builds a deterministic session (same seed, same snapshots):
H100-like GPUs with GPM and one A100-like GPU without it (in MIG mode), throttle
reasons on some, and processes with real-looking commands, parents and users.
GPU 0 is the classic "100% GPU util, 4% tensor activity" FP32 job.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
from pathlib import Path

from gputui.recording.replay import RecordingHeader, RecordingWriter, ReplaySource
from gputui.snapshot.model import (
    DeviceSnapshot,
    GpmMetrics,
    HostSnapshot,
    MigInstance,
    ProcessSnapshot,
    Snapshot,
)

GIB = 2**30
#: wait_for()'s deadline (tests/helpers/deadlines.py's WAIT_S; this module
#: imports nothing of the tests', for bench/ scripts)
WAIT_S = 60.0
START_S = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC: fixed, so screens show fixed times

COMMANDS: list[tuple[str, tuple[str, ...]]] = [
    ("alice", ("python", "train.py", "--model", "gpt2-xl", "--batch-size", "32", "--fp32")),
    ("alice", ("python", "-u", "train.py", "--model", "llama-7b", "--bf16", "--bs", "8")),
    ("bob", ("python", "dataloader_heavy.py", "--workers", "0", "--data", "/data/imagenet")),
    (
        "svc",
        (
            "/usr/bin/python3",
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            "meta-llama/Llama-3.1-8B-Instruct",
            "--tensor-parallel-size",
            "1",
        ),
    ),
    ("carol", ("python", "-m", "ipykernel_launcher", "-f", "/run/user/1003/kernel-7.json")),
    ("root", ("/usr/lib/xorg/Xorg", "vt1", "-displayfd", "3")),
    ("bob", ("python", "eval.py", "--ckpt", "runs/exp42/step_12000.pt")),
    ("alice", ("python", "bench_matmul.py", "--dtype", "float32", "--size", "8192")),
]

#: per-GPU workload: (util, tensor, sm_activity, sm_occupancy, dram, power fraction)
WORKLOADS = [
    (100.0, 4.0, 97.0, 30.0, 45.0, 0.99),  # FP32 matmuls: busy, tensor cores idle
    (99.0, 91.0, 96.0, 14.0, 24.0, 0.97),  # bf16 matmul loop
    (31.0, 12.0, 28.0, 9.0, 11.0, 0.45),  # data-loader bound
    (96.0, 0.0, 40.0, 22.0, 78.0, 0.80),  # elementwise / memory bound
]


def _device(
    index: int, step: int, rng: random.Random, n_gpus: int, interval_s: float
) -> DeviceSnapshot:
    is_a100 = n_gpus > 1 and index == n_gpus - 1
    util, tensor, sm_act, occ, dram, power_frac = WORKLOADS[index % len(WORKLOADS)]
    jitter = rng.uniform(-2.0, 2.0)
    if index == 2:
        # the data-loader-bound GPU idles while waiting for batches: a saw tooth
        wave = (step % 12) / 12.0
        util, tensor, sm_act = 10 + 50 * wave, 4 + 16 * wave, 8 + 45 * wave
    util = max(0.0, min(100.0, util + jitter))
    total = (80 if not is_a100 else 40) * GIB
    used = int(total * (0.94 if index == 1 else 0.35 + 0.1 * (index % 3)) + step * 1024 * 1024)
    used = min(used, total)
    limit = 700.0 if not is_a100 else 400.0
    throttle: tuple[str, ...] = ()
    if index == 0 or (index == 1 and step % 7 == 0):
        throttle = ("sw_power_cap",)
    if index == 2 and n_gpus > 3:
        throttle = ("sw_thermal_slowdown",)
    gpm = None
    if not is_a100:
        gpm = GpmMetrics(
            sm_activity_pct=max(0.0, sm_act + jitter),
            sm_occupancy_pct=occ,
            tensor_activity_pct=max(0.0, tensor + jitter / 4),
            dram_bw_util_pct=dram,
            fp32_activity_pct=60.0 if index == 0 else 2.0,
            pcie_tx_bytes_per_s=1.2e9,
            pcie_rx_bytes_per_s=3.4e8,
            nvlink_tx_bytes_per_s=2.1e10 if n_gpus > 1 else 0.0,
            nvlink_rx_bytes_per_s=2.0e10 if n_gpus > 1 else 0.0,
        )
    mig: tuple[MigInstance, ...] = ()
    if is_a100:
        mig = tuple(
            MigInstance(
                gpu_instance_id=i + 1,
                name="MIG 3g.20gb",
                uuid=f"MIG-{index:02d}{i:02d}-synthetic",
                mem_used_bytes=int((3 + 5 * i) * GIB),
                mem_total_bytes=20 * GIB,
                sm_count=42,
            )
            for i in range(2)
        )
    return DeviceSnapshot(
        index=index,
        name="NVIDIA A100-SXM4-40GB" if is_a100 else "NVIDIA H100 80GB HBM3",
        uuid=f"GPU-{index:08x}-0000-4000-8000-synthetic",
        bus_id=f"00000000:{0x18 + index * 0x10:02X}:00.0",
        util_gpu_pct=util,
        util_mem_pct=dram * 0.8,
        mem_used_bytes=used,
        mem_total_bytes=total,
        temp_gpu_c=55.0 + 8 * (index % 3) + rng.uniform(0, 2),
        temp_mem_c=60.0,
        fan_pct=None if not is_a100 else 42.0,
        power_w=limit * power_frac + rng.uniform(-3, 1),
        power_limit_w=limit,
        clock_sm_mhz=1755 if throttle else 1980,
        clock_mem_mhz=2619,
        clock_sm_max_mhz=1980,
        clock_mem_max_mhz=2619,
        pstate=0,
        throttle_reasons=throttle,
        pcie_gen=5,
        pcie_gen_max=5,
        pcie_width=16,
        pcie_width_max=16,
        pcie_tx_bytes_per_s=1.2e9 + step * 1e6,
        pcie_rx_bytes_per_s=3.4e8,
        nvlink_links_active=18 if not is_a100 else 12,
        nvlink_tx_bytes_per_s=2.1e10 if n_gpus > 1 else 0.0,
        nvlink_rx_bytes_per_s=2.0e10 if n_gpus > 1 else 0.0,
        ecc_enabled=True,
        ecc_errors_corrected=3 if index == 1 else 0,
        ecc_errors_uncorrected=0,
        mig_enabled=is_a100,
        mig_instances=mig,
        gpm_supported=not is_a100,
        gpm=gpm,
    )


SM_BASE = (90, 88, 61, 58, 40, 37, 20, 17)


def _processes(
    n_gpus: int, n_procs: int, step: int, rng: random.Random, now_s: float
) -> tuple[ProcessSnapshot, ...]:
    procs: list[ProcessSnapshot] = []
    for i in range(n_procs):
        user, cmd = COMMANDS[i % len(COMMANDS)]
        gpu = i % n_gpus
        pid = 4100 + 37 * i
        # torchrun-style: every third process shares one (non-GPU) launcher parent
        ppid = 4000 if i % 3 == 0 else (4100 if i % 3 == 1 and i > 1 else 1)
        graphics = cmd[0].endswith("Xorg")
        procs.append(
            ProcessSnapshot(
                pid=pid,
                gpu_index=gpu,
                gpu_uuid=f"GPU-{gpu:08x}-0000-4000-8000-synthetic",
                type="graphics" if graphics else "compute",
                gpu_mem_bytes=int((0.2 if graphics else 2 + (i * 7) % 30) * GIB)
                + step * 65536 * (i % 3),
                # pairs of close values, so that sorting by %SM reorders between samples
                sm_pct=None if graphics else round(SM_BASE[i % 8] + rng.uniform(-4, 4)),
                mem_bw_pct=None if graphics else float(10 + (i * 13) % 60),
                user=user,
                name=os.path.basename(cmd[0]),
                cmdline=cmd,
                cpu_pct=round(100.0 + 40 * (i % 3) + rng.uniform(-5, 5), 1),
                rss_bytes=int((1.5 + i) * GIB),
                start_time_s=now_s - 3600 * (i + 1) - 61 * i,
                ppid=ppid,
                hooked=i == 1,
            )
        )
    return tuple(procs)


def make_snapshots(
    n_gpus: int = 4,
    n_procs: int = 8,
    n_steps: int = 30,
    seed: int = 0,
    interval_s: float = 1.0,
    start_s: float = START_S,
) -> list[Snapshot]:
    """A deterministic synthetic session."""
    rng = random.Random(seed)
    out: list[Snapshot] = []
    for step in range(n_steps):
        now = start_s + step * interval_s
        devices = tuple(_device(i, step, rng, n_gpus, interval_s) for i in range(n_gpus))
        cpu = 35.0 + 30 * abs(math.sin(step / 9.0)) + rng.uniform(-2, 2)
        host = HostSnapshot(
            hostname="gpu-node-07",
            cpu_count=64,
            cpu_pct=cpu,
            cpu_per_core_pct=tuple(round(rng.uniform(0, 100), 1) for _ in range(8)),
            mem_used_bytes=int(212 * GIB + step * 2**24),
            mem_total_bytes=1007 * GIB,
            mem_available_bytes=int(795 * GIB),
            swap_used_bytes=0,
            swap_total_bytes=8 * GIB,
            load_1=21.4,
            load_5=19.8,
            load_15=17.2,
            uptime_s=86400 * 12 + 3600 * 5 + step * interval_s,
        )
        out.append(
            Snapshot(
                timestamp_s=now,
                host=host,
                devices=devices,
                processes=_processes(n_gpus, n_procs, step, rng, now),
                driver_version="580.82.07",
                cuda_driver_version="13.0",
                nvml_version="13.580.82",
                sample_latency_ms=2.5 + (step % 5) * 0.1,
            )
        )
    return out


def header(interval_s: float = 1.0, note: str | None = "synthetic session") -> RecordingHeader:
    return RecordingHeader(
        schema=1,
        created_s=START_S,
        interval_s=interval_s,
        hostname="gpu-node-07",
        gputui_version="test",
        note=note,
    )


def replay_source(snapshots: list[Snapshot], label: str = "recording: synthetic") -> ReplaySource:
    return ReplaySource(header(), snapshots, label)


class LiveLikeSource(ReplaySource):
    """Replays snapshots but says it is this machine now (for signal tests)."""

    is_recording = False  # type: ignore[assignment]


def live_like_source(snapshots: list[Snapshot]) -> LiveLikeSource:
    return LiveLikeSource(header(), snapshots, "live")


def with_processes(
    snapshots: list[Snapshot], extra: list[ProcessSnapshot], replace: bool = False
) -> list[Snapshot]:
    """The same snapshots with ``extra`` processes added (or instead of the others)."""
    return [
        dataclasses.replace(s, processes=tuple(extra) if replace else (*s.processes, *extra))
        for s in snapshots
    ]


def write_recording(
    path: str | os.PathLike[str],
    snapshots: list[Snapshot],
    interval_s: float = 1.0,
    note: str | None = "synthetic session",
) -> Path:
    writer = RecordingWriter(path, interval_s, note=note)
    try:
        for snapshot in snapshots:
            writer.write(snapshot)
    finally:
        writer.close()
    return Path(path)


if __name__ == "__main__":  # pragma: no cover - handy for making a demo file by hand
    import sys

    target = sys.argv[1] if len(sys.argv) > 1 else "synthetic.jsonl.gz"
    write_recording(target, make_snapshots(n_steps=120))
    print(target)


async def wait_for(pilot: object, condition: object, timeout_s: float = WAIT_S) -> None:
    """Let the app run until ``condition()`` holds; fail after ``timeout_s``."""
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():  # type: ignore[operator]
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        await pilot.pause(0.01)  # type: ignore[attr-defined]
