"""Where a live refresh of many GPU processes spends its CPU, stage by stage.

    python bench/live_stages.py --pids FILE [--gpus 8] [--view 40] [--refreshes 40]

The live source of the monitor (``LiveSource``: NVML, the PID namespace, the
host's details, the containers, the hooked processes, the host) against the
tests' fake NVML with ``--gpus`` H100s whose processes are the real pids in
FILE (``bench_scale.py --live`` starts such processes; any live pids do), the
first ``--view`` of them on screen.  Each refresh, a tenth of the processes
get new %SM and %BW (as in ``live_scale.py``), and the host collector's clock
moves 1 s, so the processes off screen are read in turns as at 1 s, without
waiting.  Prints the CPU time of a refresh and of each stage (thread time,
the mean of ``--refreshes`` after a first one that reads every process).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pids", type=Path, required=True)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--view", type=int, default=40)
    parser.add_argument("--refreshes", type=int, default=40)
    args = parser.parse_args()
    sys.path.insert(0, str(Path.cwd()))  # the checkout's tests/ (run from its root)
    import gputui.sources.live as source_module
    from gputui.host.collector import HostCollector
    from gputui.host.in_view import InView
    from gputui.nvml.collector import NvmlCollector
    from gputui.sources.live import LiveSource
    from tests.helpers.fake_gpus import busy_node, churn
    from tests.helpers.fake_nvml import FakeNvml

    pids = [int(line) for line in args.pids.read_text().split()]
    gpus = busy_node(pids, args.gpus)
    now = [1000.0]
    source = LiveSource(gpu=NvmlCollector(FakeNvml(gpus)), host=HostCollector(clock=lambda: now[0]))
    source.sample()  # every process new: its facts read
    in_view = InView()
    in_view.set("table", frozenset(pids[: args.view]))
    source.use_view(in_view)
    spent: dict[str, float] = {}

    def timed(label: str, function: Any) -> Any:
        def run(*a: Any, **k: Any) -> Any:
            start = time.thread_time()
            try:
                return function(*a, **k)
            finally:
                spent[label] = spent.get(label, 0.0) + time.thread_time() - start

        return run

    parts = {
        "nvml": source._gpu,
        "pid_namespace": source._pids,
        "host_details": source._host,
        "containers": source._containers,
    }
    methods = {"nvml": "sample", "pid_namespace": "map", "host_details": "enrich"}
    for label, part in parts.items():
        name = methods.get(label, "attribute")
        setattr(part, name, timed(label, getattr(part, name)))
    source._host.sample = timed("host", source._host.sample)
    source_module._hooked_pids = timed("hooked", source_module._hooked_pids)
    total = 0.0
    for step in range(args.refreshes):
        churn(gpus, step)
        now[0] += 1.0
        start = time.thread_time()
        source.sample()
        total += time.thread_time() - start
    per = {label: round(s / args.refreshes * 1000, 2) for label, s in spent.items()}
    print(json.dumps({"refresh_ms": round(total / args.refreshes * 1000, 2), "stages_ms": per}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
