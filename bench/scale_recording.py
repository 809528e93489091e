"""A synthetic monitor recording of a node with many GPU processes.

    python bench/scale_recording.py OUT.jsonl.gz --processes 2000 --gpus 8
    python bench/scale_recording.py OUT.jsonl.gz --processes 20000 --gpus 1

Written in the format ``gputui --replay`` reads (``gputui/recording/replay.py``:
a header line, then one snapshot per line, gzip-compressed), from the embedded
demo's first snapshot: its device repeated ``--gpus`` times, and ``--processes``
processes spread evenly over them, as a busy shared node has them (inference
servers under MPS or time-slicing, many small jobs per GPU):

- each process has its own pid, one of 40 users, a command line of 5-9 words
  (about 120 characters), a start time, a parent (one launcher per 48
  processes, not itself on a GPU) and GPU memory such that a GPU's processes
  use about 90% of it (100 MiB to 4 GiB each, less when a GPU has thousands);
- from one snapshot to the next, ``--changing`` of them (a fraction) get new
  %SM, %BW, %CPU and host memory (the others are idle: their numbers stay),
  and ``--churn`` of them exit and are replaced by new processes (new pids);
- one process in 500 carries the hook.

With ``--compact`` it is written as gputui writes a recording of 1,000
processes or more (``gputui.recording.writer``: a process unchanged since the
line before is written ``{"pid": PID}``, one line in ``FULL_EVERY`` whole).

The numbers are deterministic (``--seed``).  Nothing here is measured: the
sweep (``bench/bench_scale.py``) measures gputui on these files.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import random
from importlib import resources
from pathlib import Path
from typing import Any

#: one launcher (an inference server, a job scheduler's shim) per this many processes
PER_PARENT = 48
USERS = 40
T0 = 1_795_000_000.0
MIB = 2**20


def _demo_first() -> tuple[dict[str, Any], dict[str, Any]]:
    raw = resources.files("gputui.data").joinpath("demo.jsonl.gz").read_bytes()
    lines = gzip.decompress(raw).splitlines()
    return json.loads(lines[0]), json.loads(lines[1])


class _Node:
    """The processes of the node, changing from one snapshot to the next."""

    def __init__(self, processes: int, gpus: list[dict[str, Any]], seed: int) -> None:
        self.rng = random.Random(seed)
        self.gpus = gpus
        per_gpu = max(1, processes // len(gpus))
        total = gpus[0]["mem_total_bytes"] * 0.9
        #: the mean GPU memory of a process, in MiB
        self.mean_mib = max(1, min(2048, int(total / per_gpu / MIB)))
        self.next_pid = 200_000
        self.procs: list[dict[str, Any]] = [self._new(k, T0 - 86_400.0) for k in range(processes)]

    def _new(self, slot: int, now: float) -> dict[str, Any]:
        rng = self.rng
        gpu = self.gpus[slot % len(self.gpus)]
        pid = self.next_pid
        self.next_pid += 1
        model = rng.choice(["llama-3-8b", "mistral-7b", "qwen2-1.5b", "bert-large", "resnet50"])
        words = [
            "python3",
            "-m",
            rng.choice(["vllm.entrypoints.api_server", "serve.worker", "train.py"]),
            f"--model=/models/{model}",
            f"--port={8000 + slot % 1000}",
            f"--shard={slot % 64}",
            *(["--dtype=bfloat16"] if rng.random() < 0.5 else []),
            *(["--max-batch=32", "--log-level=info"] if rng.random() < 0.5 else []),
        ]
        hooked = slot % 500 == 0
        return {
            "pid": pid,
            "gpu_index": gpu["index"],
            "gpu_uuid": gpu["uuid"],
            "type": "compute",
            "gpu_mem_bytes": rng.randrange(self.mean_mib // 2 + 1, self.mean_mib * 3 // 2 + 2)
            * MIB,
            "sm_pct": 0.0,
            "mem_bw_pct": 0.0,
            "user": f"user{slot % USERS:02d}",
            "name": "python3",
            "cmdline": words,
            "cpu_pct": 0.0,
            "rss_bytes": rng.randrange(200, 8000) * MIB,
            "start_time_s": round(now - rng.random() * 3600.0, 2),
            "ppid": 100_000 + slot // PER_PARENT,
            "hooked": hooked,
        }

    def step(self, now: float, changing: float, churn: float) -> None:
        rng = self.rng
        procs = self.procs
        for k in rng.sample(range(len(procs)), int(len(procs) * churn)):
            procs[k] = self._new(k, now)
        for k in rng.sample(range(len(procs)), int(len(procs) * changing)):
            p = procs[k]
            p["sm_pct"] = float(rng.randrange(0, 100))
            p["mem_bw_pct"] = float(rng.randrange(0, 60))
            p["cpu_pct"] = float(rng.randrange(0, 1000)) / 10.0
            p["rss_bytes"] = max(MIB, p["rss_bytes"] + rng.randrange(-64, 65) * MIB)


def write_recording(
    path: Path,
    processes: int,
    gpus: int = 1,
    snapshots: int = 30,
    changing: float = 0.1,
    churn: float = 0.002,
    seed: int = 1,
    interval_s: float = 1.0,
    compact: bool = False,
) -> dict[str, Any]:
    """Write the recording; what it holds (for the benchmark's notes)."""
    from gputui.recording.writer import COMPACT_SCHEMA, FULL_EVERY, compact_processes

    header, first = _demo_first()
    base = first["devices"][0]
    devices = []
    for i in range(gpus):
        device = copy.deepcopy(base)
        device["index"] = i
        device["uuid"] = f"{base['uuid'][:-4]}{i:04x}"
        device["bus_id"] = f"00000000:{i + 0x10:02X}:00.0"
        devices.append(device)
    node = _Node(processes, devices, seed)
    header.update(
        created_s=T0,
        interval_s=interval_s,
        note=f"bench: {gpus} GPU(s), {processes} processes (synthetic)",
    )
    if compact:
        header["schema"] = COMPACT_SCHEMA
    body = copy.deepcopy(first)
    body["devices"] = devices
    last: list[dict[str, Any]] = []
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6) as out:
        out.write(json.dumps(header, separators=(",", ":")).encode() + b"\n")
        longest = 0
        for i in range(snapshots):
            now = T0 + i * interval_s
            if i:
                node.step(now, changing, churn)
            body["timestamp_s"] = now
            body["host"]["uptime_s"] = 1000.0 + i * interval_s
            for device in devices:
                used = sum(
                    p["gpu_mem_bytes"] for p in node.procs if p["gpu_uuid"] == device["uuid"]
                )
                device["mem_used_bytes"] = min(used, device["mem_total_bytes"])
            body["processes"] = node.procs
            if compact:
                now_procs = [dict(p) for p in node.procs]  # the node changes them in place
                if i % FULL_EVERY:
                    body["processes"] = compact_processes(now_procs, last)
                last = now_procs
            line = json.dumps(body, separators=(",", ":")).encode()
            longest = max(longest, len(line))
            out.write(line + b"\n")
    return {
        "processes": processes,
        "gpus": gpus,
        "snapshots": snapshots,
        "changing": changing,
        "churn": churn,
        "compact": compact,
        "bytes": path.stat().st_size,
        "longest_line_bytes": longest,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("out", type=Path)
    p.add_argument("--processes", type=int, default=2000)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--snapshots", type=int, default=30)
    p.add_argument("--changing", type=float, default=0.1, help="fraction busy per snapshot")
    p.add_argument("--churn", type=float, default=0.002, help="fraction replaced per snapshot")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--compact", action="store_true", help="as gputui writes 1,000 or more")
    args = p.parse_args()
    info = write_recording(
        args.out,
        args.processes,
        args.gpus,
        args.snapshots,
        args.changing,
        args.churn,
        args.seed,
        compact=args.compact,
    )
    print(json.dumps(info))


if __name__ == "__main__":
    main()
