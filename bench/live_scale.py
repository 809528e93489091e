"""The live monitor of a node with many GPU processes, NVML faked.

    python bench/live_scale.py --pids FILE [--gpus 8] -- GPUTUI-ARGS...

Runs ``gputui GPUTUI-ARGS`` (``--interval 1``, ``--once``, ...) against the
tests' fake NVML (``tests/helpers/fake_nvml.py``: the collector's real code
path, only libnvidia-ml replaced) with ``--gpus`` H100s, whose processes are
the pids listed in FILE (one a line), spread evenly over the GPUs.  The pids
are real processes (``bench_scale.py --live`` starts them), so every read of
``/proc`` and psutil is the real one; each second a tenth of the processes get
new %SM and %BW.  The fake's own Python is counted in the monitor's CPU.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pids", type=Path, required=True)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument(
        "--collect",
        type=int,
        metavar="N",
        help="instead of gputui: time the live source's first sample and N more in this "
        "process (CPU seconds, JSON on standard output)",
    )
    parser.add_argument(
        "--view",
        type=int,
        metavar="K",
        help="with --collect: the later samples with the first K pids on screen, as the "
        "monitor's process table says (the others read in turns)",
    )
    parser.add_argument("gputui", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    sys.path.insert(0, str(Path.cwd()))  # the checkout's tests/ (run from its root)
    from gputui import cli
    from gputui.nvml import startup as nvml_open
    from tests.helpers.fake_gpus import busy_node, churn
    from tests.helpers.fake_nvml import FakeNvml

    pids = [int(line) for line in args.pids.read_text().split()]
    gpus = busy_node(pids, args.gpus)
    fake = FakeNvml(gpus)
    # the monitor and --once open NVML through nvml_open (open_live)
    nvml_open.import_pynvml = lambda: fake
    stop = threading.Event()

    def churning() -> None:  # a tenth of the processes change their numbers each second
        step = 0
        while not stop.wait(1.0):
            step += 1
            churn(gpus, step)

    if args.collect:
        return collect(fake, args.collect, None if args.view is None else pids[: args.view])
    threading.Thread(target=churning, daemon=True).start()
    argv = [a for a in args.gputui if a != "--"]
    try:
        return cli.main(argv)
    finally:
        stop.set()


def collect(fake: object, refreshes: int, view: list[int] | None = None) -> int:
    """CPU seconds of the live source's first sample (every process new: its
    facts are read) and of each later one (the mean of ``refreshes``); with
    ``view``, those pids on screen and the samples 1 s apart, as the monitor's
    at 1 s (the processes off screen are read in turns that follow the clock)."""
    import json
    import time

    from gputui.host.collector import HostCollector
    from gputui.nvml.collector import NvmlCollector
    from gputui.sources.live import LiveSource

    source = LiveSource(gpu=NvmlCollector(fake), host=HostCollector())
    start = time.process_time()
    first = source.sample()
    first_s = time.process_time() - start
    if view is not None:
        from gputui.host.in_view import InView

        in_view = InView()
        in_view.set("table", frozenset(view))
        source.use_view(in_view)
    start = time.process_time()
    for _ in range(refreshes):
        if view is not None:
            time.sleep(1.0)  # no CPU time
        source.sample()
    later_s = (time.process_time() - start) / refreshes
    named = sum(1 for p in first.processes if p.cmdline)
    print(json.dumps({"first_s": first_s, "later_s": later_s, "with_command": named}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
