"""Run one job with each tree's gputui in turns and print the medians side by
side: what ``bench_capture_start.py`` and ``bench_capture_stall.py`` share."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def run_job(job: str, tree: str, *args: str, timeout: float = 600) -> dict[str, Any]:
    """``job`` (Python source that prints one JSON line last) in a fresh process
    with ``tree`` first on its path, its own socket and cache directories."""
    with tempfile.TemporaryDirectory(prefix="bench-", dir="/tmp") as tmp:
        env = dict(os.environ, GPUTUI_SOCKET_DIR=os.path.join(tmp, "s"), XDG_CACHE_HOME=tmp)
        out = subprocess.run(
            [sys.executable, "-c", job, str(Path(tree).resolve()), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    if out.returncode != 0:
        raise SystemExit(f"{tree}: the job failed:\n{out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def compare(
    trees: Sequence[str], rounds: int, job: str, *args: str, skip: Sequence[str] = ()
) -> None:
    """``rounds`` rounds of ``job`` with every tree (``LABEL=PATH``), alternating
    which goes first; each round on stderr, then each figure's median per tree
    (``skip``: figures that are no numbers)."""
    pairs = [item.split("=", 1) for item in trees]
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in pairs}
    for r in range(rounds):
        for label, path in pairs if r % 2 == 0 else list(reversed(pairs)):
            runs[label].append(run_job(job, path, *args))
            print(f"round {r + 1} {label}: {json.dumps(runs[label][-1])}", file=sys.stderr)
    keys = [k for k in runs[pairs[0][0]][0] if k not in skip]
    print(f"{'':<34}" + "".join(f"{label:>12}" for label, _ in pairs))
    for k in keys:
        cells = []
        for label, _ in pairs:
            vals = [one[k] for one in runs[label] if one[k] is not None]
            cells.append(f"{statistics.median(vals):>12g}" if vals else f"{'-':>12}")
        print(f"{k:<34}" + "".join(cells))
