"""A small cluster on loopback: exporters replaying recordings under different
hostnames, a real Prometheus scraping them, and (optionally) this machine's own
exporter following its hooked jobs.  Prints the Prometheus URL, runs until
Ctrl-C or ``--duration``.

    .venv/bin/python bench/cluster_lab.py --nodes 4 --gpus 8 [--live] [--duration 600]

Then: ``gputui cluster --prometheus URL``.  Needs Debian's ``prometheus``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from promutil import env_with_repo, exporters, prometheus, prometheus_binary  # noqa: E402
from synthetic import make_snapshots, write_recording  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=4, help="replaying exporters")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per replayed node")
    parser.add_argument("--demo-node", action="store_true", help="one more node playing the demo")
    parser.add_argument("--live", action="store_true", help="also this machine's live exporter")
    parser.add_argument("--scrape", default="1s", help="Prometheus scrape interval")
    parser.add_argument("--duration", type=float, default=None, help="stop after S seconds")
    parser.add_argument("--url-file", help="write the Prometheus URL here once it is up")
    args = parser.parse_args()
    # SIGTERM ends the lab like Ctrl-C: the exporters and Prometheus are stopped too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if prometheus_binary() is None:
        print("prometheus is not installed (apt-get install prometheus)", file=sys.stderr)
        return 2
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gputui-lab-")))
        specs: list[tuple[str, list[str]]] = []
        for i in range(args.nodes):
            snaps = make_snapshots(n_gpus=args.gpus, n_procs=args.gpus * 2, n_steps=90, seed=i)
            path = write_recording(tmp / f"node{i}.jsonl.gz", snaps)
            specs.append((f"gpu-node-{i + 1:02d}", ["--replay", str(path)]))
        if args.demo_node:
            specs.append(("h100-demo", ["--demo"]))
        if args.live:
            specs.append((_hostname(), []))
        targets = stack.enter_context(exporters(specs, env=env_with_repo()))
        url = stack.enter_context(prometheus(targets, tmp, scrape_interval=args.scrape))
        print(url, flush=True)
        if args.url_file:
            Path(args.url_file).write_text(url + "\n")
        deadline = time.monotonic() + args.duration if args.duration else None
        try:
            while deadline is None or time.monotonic() < deadline:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
    return 0


def _hostname() -> str:
    import os

    return os.uname().nodename


if __name__ == "__main__":
    sys.exit(main())
