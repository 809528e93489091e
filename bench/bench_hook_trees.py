"""The hook's overhead before and after a change, in one run: ``bench_hook.py
--interleaved-only`` on each checkout's gputui package in turn, several rounds,
so that both see the same machine.

    python bench/bench_hook_trees.py --tree before=/tmp/gputui-base --tree after=. \
        --rounds 3 -- --cpu --ddp --cycles 300 --tf-cycles 20

Each round runs every tree once (alternating which goes first); the table gives,
per workload and tree, the median over rounds of the hook/no-hook ratio (each
measured against its own no-hook blocks in the same process) and of the upper
bound that adds the hook's I/O thread time.  A checkout only needs its
``gputui`` package (``git archive REV gputui | tar -x -C DIR``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tree", action="append", required=True, metavar="LABEL=PATH")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", help="write every run's results as JSON here")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="-- bench_hook.py options")
    args = p.parse_args()
    trees = [item.split("=", 1) for item in args.tree]
    rest = [a for a in args.rest if a != "--"]
    runs: dict[str, list[dict]] = {label: [] for label, _ in trees}
    for r in range(args.rounds):
        order = trees if r % 2 == 0 else list(reversed(trees))
        for label, path in order:
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                cmd = [
                    sys.executable, str(HERE / "bench_hook.py"), "--interleaved-only",
                    "--tree", str(Path(path).resolve()), "--out", out.name, *rest,
                ]  # fmt: skip
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
                runs[label].append(json.loads(Path(out.name).read_text()))
            print(f"round {r + 1}: {label} done", file=sys.stderr, flush=True)
    print(f"{'workload':<14} {'viewer':>6} " + " ".join(f"{lb:>22}" for lb, _ in trees))
    first = runs[trees[0][0]][0]["interleaved"]
    for k, o in enumerate(first):
        cells = []
        for label, _ in trees:
            ratios = [run["interleaved"][k]["paired_ratio_median"]["hook"] for run in runs[label]]
            bounds = [run["interleaved"][k]["overhead_upper_bound"] for run in runs[label]]
            cells.append(f"{statistics.median(ratios):.4f} ({statistics.median(bounds):+.2%})")
        viewer = "yes" if o["viewer"] else "no"
        print(f"{o['workload']:<14} {viewer:>6} " + " ".join(f"{c:>22}" for c in cells))
    if args.out:
        Path(args.out).write_text(json.dumps(runs, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
