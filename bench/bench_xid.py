"""What watching for Xid errors adds to a sample when none happens.

    python bench/bench_xid.py [--calls 20000] [--samples 2000] [--real] [--out FILE]

Every sample reads NVML's critical Xid events without waiting (one
``nvmlEventSetWait_v2`` with a zero timeout, which answers "none" by raising
NVML's Timeout) and the kernel log's new records (one non-blocking read of
``/dev/kmsg``, which fails at once with nothing new).  Timed here:

- ``watch``: the collector's Xid step alone (``_watch_xids``: the event poll and
  the kernel log's read), ``--calls`` times, in µs per call; over the fake
  NVML (tests/helpers/fake_nvml.py: a Python function raising the real
  ``NVMLError``), and with ``--real`` over this machine's NVML and GPUs;
- ``sample``: a whole ``NvmlCollector.sample()`` of 8 fake H100s with the watch
  and without it (no event set, no kernel log), ``--samples`` each, the two
  collectors taking turns, in µs per sample.

The kernel log is this machine's ``/dev/kmsg`` where it is readable (root), as
the monitor reads it; without it the read is one failed open, once.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gputui.nvml.collector import NvmlCollector  # noqa: E402
from gputui.nvml.kernel_log import KMSG, KernelLog  # noqa: E402
from tests.helpers.fake_nvml import FakeNvml, h100  # noqa: E402


def watch_us(collector: NvmlCollector, calls: int) -> dict[str, float]:
    """The Xid step of a sample, alone: µs per call (median of 20 batches)."""
    xids = collector._xids
    batches = []
    per_batch = max(1, calls // 20)
    for _ in range(20):
        t0 = time.perf_counter()
        for _ in range(per_batch):
            events = xids.poll() if xids is not None else []
            collector._watch_xids(events)
        batches.append((time.perf_counter() - t0) / per_batch * 1e6)
    batches.sort()
    return {"median_us": round(statistics.median(batches), 3), "max_us": round(batches[-1], 3)}


def fake_gpus() -> FakeNvml:
    return FakeNvml([h100(uuid=f"GPU-{i}", bus_id=f"00000000:{16 + i:02X}:00.0") for i in range(8)])


def sample_us(samples: int) -> dict[str, Any]:
    watching = NvmlCollector(fake_gpus(), kernel_log=KMSG)
    blind = NvmlCollector(fake_gpus(), kernel_log=None, skip=frozenset({"xid_events"}))
    times: dict[str, list[float]] = {"with the watch": [], "without": []}
    for _ in range(samples):
        for label, collector in (("with the watch", watching), ("without", blind)):
            t0 = time.perf_counter()
            collector.sample()
            times[label].append((time.perf_counter() - t0) * 1e6)
    out = {label: round(statistics.median(values), 1) for label, values in times.items()}
    out["sources"] = list(watching.sample().devices[0].xid_sources or ())
    watching.close()
    blind.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--real", action="store_true", help="also this machine's NVML")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    kernel = KernelLog()
    kernel.read()
    results: dict[str, Any] = {
        "machine": platform.node(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_before": os.getloadavg(),
        "kernel_log": "readable" if kernel.readable else kernel.reason,
    }
    kernel.close()
    fake = NvmlCollector(fake_gpus(), kernel_log=KMSG)
    fake.sample()  # the kernel log's backlog, read once
    results["watch_fake_nvml"] = watch_us(fake, args.calls)
    fake.close()
    if args.real:
        real = NvmlCollector(kernel_log=KMSG)
        real.sample()
        results["watch_real_nvml"] = watch_us(real, args.calls)
        results["real_gpus"] = real.device_count
        results["real_unwatched"] = {str(k): v for k, v in real.xid_unwatched.items()}
        real.close()
    results["sample_8_fake_gpus"] = sample_us(args.samples)
    results["load_after"] = os.getloadavg()
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
