"""The sweep of ``bench/bench_scale.py`` as text charts, for docs/benchmarks.md.

    python bench/scale_chart.py /tmp/scale.json

For each checkout of the sweep, one bar per size: the monitor's CPU (% of one
core at 1 s), its RSS, and ``--once``'s wall time, each bar scaled to the
largest value of its chart, with the value written after it.  The sizes are
spaced as they come (100, 1,000, 2,000, 20,000), not to scale: the chart shows
how each figure grows from one size to the next.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

WIDTH = 40
SIZES = ["demo", "100", "1000", "2000", "20000"]
LABELS = {"demo": "demo (1)", "100": "100", "1000": "1,000", "2000": "2,000", "20000": "20,000"}
CHARTS = [
    ("monitor CPU, % of a core at 1 s", "monitor_cpu_pct", "{:.2f}%"),
    ("monitor RSS", "monitor_rss_mb", "{:.0f} MB"),
    ("--once wall, every row into a pipe", "once_wall_s", "{:.2f} s"),
]


def chart(results: dict[str, Any], key: str, fmt: str) -> list[str]:
    rows: list[tuple[str, str, float]] = []
    for size in SIZES:
        for label, figures in results.get(size, {}).items():
            value = figures.get(key)
            if isinstance(value, (int, float)):
                rows.append((LABELS[size], label, float(value)))
    if not rows:
        return []
    top = max(value for _s, _l, value in rows) or 1.0
    size_w = max(len(s) for s, _l, _v in rows)
    label_w = max(len(label) for _s, label, _v in rows)
    out = []
    for size, label, value in rows:
        bar = "#" * max(1, round(WIDTH * value / top)) if value > 0 else ""
        out.append(f"{size:>{size_w}} {label:<{label_w}} {bar:<{WIDTH}} {fmt.format(value)}")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("sweep", type=Path, help="the --out file of bench_scale.py")
    args = p.parse_args()
    data = json.loads(args.sweep.read_text())
    results = data.get("results", data)
    for title, key, fmt in CHARTS:
        lines = chart(results, key, fmt)
        if lines:
            print(f"{title}:\n\n```\n" + "\n".join(lines) + "\n```\n")


if __name__ == "__main__":
    main()
