"""What sampling DataLoader workers costs them: batches per second from forked
workers whose ``__getitem__`` does numpy work, with the workers' sampler on
against off, in the same run.

    python bench/bench_sampler_workers.py [--workers 4] [--item-ms 5] [--rounds 8] \
        [--out bench-workers.json]

The hook is installed in this process (a private socket directory).  Each
block starts a new DataLoader iterator (new forked workers: the workers' sampler
is on when ``GPUTUI_SAMPLER`` was on at the fork), waits for its first batch
(worker start-up is left out) and times ``--batches`` more.  The workers write
their profile every second, five times as often as in a job (a block is
shorter than the usual period): the cost measured is a bound.  Rounds of four
blocks off-on-on-off; reported: the median batch interval off and on, the
ratio on/off as the median of the per-round ratios with quartiles, and the
profile the workers wrote (their processes and top function) as a check that
the "on" blocks were sampled.  A result is only worth its machine's quiet:
run it where the workers have cores of their own.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

import gputui.hook  # noqa: E402
from gputui.hook import _workers  # noqa: E402
from gputui.hook._workers import merge  # noqa: E402


class NumpyItems(Dataset):  # type: ignore[type-arg]
    """Each item sorts random numbers for about ``ms`` milliseconds."""

    def __init__(self, ms: float) -> None:
        self.ms = ms
        self.values = np.random.default_rng(0).random(20_000)

    def __len__(self) -> int:
        return 10**9

    def __getitem__(self, idx: int) -> torch.Tensor:
        end = time.perf_counter() + self.ms / 1000
        total = 0.0
        while time.perf_counter() < end:
            total += float(np.sort(self.values)[idx % 100])
        return torch.tensor([total])


def block(data: Dataset, workers: int, batches: int, sampled: bool) -> list[float]:  # type: ignore[type-arg]
    os.environ["GPUTUI_SAMPLER"] = "1" if sampled else "0"
    loader = DataLoader(data, batch_size=4, num_workers=workers, multiprocessing_context="fork")
    it = iter(loader)
    next(it)  # the workers are up
    out = []
    clock = time.perf_counter
    t0 = clock()
    for _ in range(batches):
        next(it)
        t1 = clock()
        out.append(t1 - t0)
        t0 = t1
    del it
    return out


#: (flag, type, default, help)
OPTIONS: tuple[tuple[str, Any, Any, str], ...] = (
    ("--workers", int, 4, "forked DataLoader workers"),
    ("--item-ms", float, 5.0, "numpy work per item, ms (4 items a batch)"),
    ("--batches", int, 150, "batches timed per block"),
    ("--rounds", int, 8, "rounds of four blocks, off-on-on-off"),
    ("--out", str, None, "write the results as JSON here"),
)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for flag, kind, default, text in OPTIONS:
        p.add_argument(flag, type=kind, default=default, help=text)
    args = p.parse_args()
    sock_dir = tempfile.mkdtemp(prefix="gtw-", dir="/tmp")
    os.rmdir(sock_dir)
    os.environ["GPUTUI_SOCKET_DIR"] = sock_dir
    hook = gputui.hook.install()
    assert hook is not None
    # the workers write their profile every second (five times as often as in a
    # job): a block is shorter than the usual period, and the cost is a bound
    _workers.PERIOD_S = 1.0
    torch.set_num_threads(1)
    data = NumpyItems(args.item_ms)
    block(data, args.workers, 10, False)  # warm-up
    ratios = []
    all_off: list[float] = []
    all_on: list[float] = []
    for _ in range(args.rounds):
        off: list[float] = []
        on: list[float] = []
        for mode in ("off", "on", "on", "off"):
            got = block(data, args.workers, args.batches, mode == "on")
            (on if mode == "on" else off).extend(got)
        ratios.append(statistics.median(on) / statistics.median(off))
        all_off += off
        all_on += on
    workers = merge(hook.workers.collect())
    top = workers.top(1)[0] if workers is not None else None
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    result: dict[str, Any] = {
        "machine": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "loadavg": os.getloadavg(),
        "workers": args.workers,
        "item_ms": args.item_ms,
        "batches_per_block": args.batches,
        "rounds": args.rounds,
        "batch_interval_off_ms": statistics.median(all_off) * 1e3,
        "batch_interval_on_ms": statistics.median(all_on) * 1e3,
        "ratio": {"p25": q[0], "median": statistics.median(ratios), "p75": q[2]},
        "sampled_workers_seen": len(hook.workers.collect()),
        "workers_top": None
        if top is None
        else {"function": top.function, "share": workers.share(top.time_s) if workers else 0},
    }
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    gputui.hook.uninstall()
    return 0


if __name__ == "__main__":
    sys.exit(main())
