"""Print the roofline of a torch.profiler Chrome trace: the top ops by GPU time
with achieved TFLOP/s, bandwidth, intensity and bound, and the plot as text.

The ceilings are those ``gputui bench`` saved for ``--uuid``, else the datasheet
of the GPU the trace names (``deviceProperties``).

    python bench/roofline_report.py TRACE.json[.gz] [--uuid GPU-...] [--top 12]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gputui import fmt
from gputui.analysis.roofline import analyze, grid_lines, roofline_view
from gputui.ceilings import datasheet_for, load_ceilings
from gputui.trace.op_rows import rows_from_chrome_trace


def _f(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("trace")
    p.add_argument("--uuid", default=None, help="use the ceilings gputui bench saved for it")
    p.add_argument("--top", type=int, default=12)
    args = p.parse_args()
    opener = gzip.open if args.trace.endswith(".gz") else open
    with opener(args.trace, "rt") as f:
        trace = json.load(f)
    props = trace.get("deviceProperties") or [{}]
    name = props[0].get("name") if props else None
    measured = load_ceilings(args.uuid) if args.uuid else None
    roof = measured.roof() if measured else None
    if roof is None:
        sheet = datasheet_for(name)
        if sheet is None:
            print(f"no ceilings for {fmt.clean(name)}: pass --uuid", file=sys.stderr)
            return 2
        roof = sheet.roof()
    report = analyze(rows_from_chrome_trace(trace), roof, args.top)
    print(f"{fmt.clean(name)}; ceilings: {roof.label}; {report.rows} op rows")
    print(
        f"{'op':<34} {'shapes':<30} {'dtype':<5} {'GPU ms':>7} {'TFLOP/s':>7} "
        f"{'GB/s':>6} {'FLOP/B':>7} {'bound':<7} {'%':>4}"
    )
    for op in report.ops:
        print(
            f"{fmt.truncate(fmt.clean(op.name), 34):<34} "
            f"{fmt.truncate(fmt.clean(op.shapes), 30):<30} {op.dtype or '-':<5} "
            f"{op.device_us / 1000:7.2f} {_f(op.achieved_tflops, '7.1f'):>7} "
            f"{_f(op.achieved_gbps, '6.0f'):>6} {_f(op.intensity_flop_per_byte, '7.1f'):>7} "
            f"{op.bound or '-':<7} {_f(op.pct_of_ceiling, '4.0f'):>4}"
        )
    view = roofline_view(report, 64, 14)
    print(f"\nTFLOP/s 1e{view.y_min_log10}..1e{view.y_max_log10} (up), "
          f"FLOP/byte 1e{view.x_min_log10}..1e{view.x_max_log10} (right); ops by rank")  # fmt: skip
    for line in grid_lines(view):
        print("|" + line)
    print("+" + "-" * view.width)
    return 0


if __name__ == "__main__":
    sys.exit(main())
