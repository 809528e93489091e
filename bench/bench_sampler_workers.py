"""What sampling DataLoader workers costs them: batches per second from forked
workers whose ``__getitem__`` does a fixed amount of numpy work, with the
workers' sampler on against off, in the same run, with the bench's own
resolution beside it.

    python3 bench/bench_sampler_workers.py [--workers 4] [--item-ms 2] [--batches 150] \
        [--seconds 90] [--out bench-workers.json]

The hook is installed in this process (a private socket directory).  Each
block starts a new DataLoader iterator (new forked workers: their sampler is
on when ``GPUTUI_SAMPLER`` was on at the fork), takes the batches the workers
prefetched while starting (start-up is left out) and times ``--batches``
more; the iterator is then shut down, and a sampled worker writes its profile
as its loop returns (and every 5 s while it runs, as in a job).  An item sorts
the same array a fixed number of times (calibrated to ``--item-ms`` at the
start), so a slower worker makes fewer batches a second.

Rounds of six blocks in the order off, off', on, on, off', off (a palindrome:
a linear drift cancels in both pairs), for about ``--seconds``.  Each round
gives two ratios, the mean batch interval of the "on" (off') blocks over that
of the off blocks; reported: the median of each over the rounds with a
bootstrap 95% interval (off' against off, A/A, is the bench's resolution),
and as a check, the worker profiles written during each block: as many as
``--workers`` after an "on" block, none after an off one.  A result is only
worth its machine's quiet: run it where the workers have cores of their own.
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
from bench.bench_sampler import summary  # noqa: E402
from gputui.hook._workers import merge, worker_dir  # noqa: E402

ORDER = "OASSAO"  # O off, A off again (A/A), S the workers sampled
BATCH = 4  # items a batch


class NumpyItems(Dataset):  # type: ignore[type-arg]
    """Each item sorts the same numbers ``sorts`` times."""

    def __init__(self, sorts: int) -> None:
        self.sorts = sorts
        self.values = np.random.default_rng(0).random(20_000)

    def __len__(self) -> int:
        return 10**9

    def __getitem__(self, idx: int) -> torch.Tensor:
        total = 0.0
        for _ in range(self.sorts):
            total += float(np.sort(self.values)[idx % 100])
        return torch.tensor([total])


def calibrate(item_ms: float) -> int:
    """Sorts an item does for about ``item_ms`` milliseconds (here, unsampled)."""
    data = NumpyItems(10)
    for _ in range(3):
        data[0]
    took = []
    for _ in range(9):
        t0 = time.perf_counter()
        data[0]
        took.append(time.perf_counter() - t0)
    return max(1, round(10 * item_ms / 1e3 / statistics.median(took)))


def block(
    data: NumpyItems, workers: int, batches: int, sampled: bool, directory: str
) -> tuple[float, int]:
    """The mean batch interval of one block (s), and the worker profiles
    written during it."""
    os.environ["GPUTUI_SAMPLER"] = "1" if sampled else "0"
    start = time.time()
    loader = DataLoader(data, batch_size=BATCH, num_workers=workers, multiprocessing_context="fork")
    it = iter(loader)
    for _ in range(1 + 2 * workers):  # the workers are up; their prefetched batches go
        next(it)
    t0 = time.perf_counter()
    for _ in range(batches):
        next(it)
    interval = (time.perf_counter() - t0) / batches
    del it  # the workers shut down (and a sampled one writes its profile)
    try:
        written = sum(
            1
            for name in os.listdir(directory)
            if name.endswith(".json") and os.stat(os.path.join(directory, name)).st_mtime >= start
        )
    except OSError:
        written = 0
    return interval, written


#: (flag, type, default, help)
OPTIONS: tuple[tuple[str, Any, Any, str], ...] = (
    ("--workers", int, 4, "forked DataLoader workers"),
    ("--item-ms", float, 2.0, f"numpy work per item, ms ({BATCH} items a batch)"),
    ("--batches", int, 150, "batches timed per block"),
    ("--seconds", float, 90.0, "about this long in all"),
    ("--out", str, None, "write the results as JSON here"),
)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for flag, kind, default, text in OPTIONS:
        p.add_argument(flag, type=kind, default=default, help=text)
    args = p.parse_args()
    load_before = list(os.getloadavg())
    sock_dir = tempfile.mkdtemp(prefix="gtw-", dir="/tmp")
    os.rmdir(sock_dir)
    os.environ["GPUTUI_SOCKET_DIR"] = sock_dir
    hook = gputui.hook.install()
    if hook is None:
        print("the hook did not install", file=sys.stderr)
        return 1
    torch.set_num_threads(1)
    directory = worker_dir(os.getpid())
    data = NumpyItems(calibrate(args.item_ms))
    t0 = time.perf_counter()
    block(data, args.workers, args.batches, False, directory)  # warm-up
    block_s = time.perf_counter() - t0
    rounds = max(3, round(args.seconds / (len(ORDER) * block_s)))
    ratios: dict[str, list[float]] = {"S": [], "A": []}
    off_all: list[float] = []
    on_all: list[float] = []
    written: dict[str, list[int]] = {"O": [], "A": [], "S": []}
    for _ in range(rounds):
        got: dict[str, list[float]] = {"O": [], "A": [], "S": []}
        for mode in ORDER:
            interval, files = block(data, args.workers, args.batches, mode == "S", directory)
            got[mode].append(interval)
            written[mode].append(files)
        off = statistics.mean(got["O"])
        for mode, into in ratios.items():
            into.append(statistics.mean(got[mode]) / off)
        off_all += got["O"]
        on_all += got["S"]
    workers = merge(hook.workers.collect())
    top = workers.top(1)[0] if workers is not None else None
    result: dict[str, Any] = {
        "bench": "sampler_workers",
        "machine": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "load_average": {"before": load_before, "after": list(os.getloadavg())},
        "workers": args.workers,
        "item_ms": args.item_ms,
        "sorts_per_item": data.sorts,
        "batches_per_block": args.batches,
        "rounds": rounds,
        "order": ORDER,
        "batch_interval_off_ms": statistics.median(off_all) * 1e3,
        "batch_interval_on_ms": statistics.median(on_all) * 1e3,
        "sampled": summary(ratios["S"]),
        "a_a": summary(ratios["A"]),
        # the check: every "on" block's workers wrote a profile, no off block's did
        "profiles_written_per_on_block": [min(written["S"]), max(written["S"])],
        "profiles_written_per_off_block": max(written["O"] + written["A"]),
        "sampled_workers_seen": len(hook.workers.collect()),
        "workers_top": None
        if top is None or workers is None
        else {"function": top.function, "share": workers.share(top.time_s)},
    }
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    gputui.hook.uninstall()
    return 0


if __name__ == "__main__":
    sys.exit(main())
