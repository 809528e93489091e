"""The roofline as plain text and JSON values: the table of top ops against the
GPU's ceilings, and the ASCII plot (``gputui analyze``, ``attach --once``; the
attach screen shows the same rows).  Op names and shapes come from the job or the
trace: they are cleaned here."""

from __future__ import annotations

from typing import Any

from gputui import fmt
from gputui.analysis.roofline import OpRoofline, RooflineReport, grid_lines, roofline_view

PLOT_HEIGHT = 12
NOTES = (
    "roof: % of what the op's intensity allows; time: share of the ops' GPU time",
    "FLOPs: torch's count where it has one, else estimated from the shapes;",
    "bytes: estimated from shapes and dtypes (each input read and output written once)",
)


def _num(value: float | None, width: int, digits: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width},.{digits}f}"


def _head(name_width: int) -> str:
    return (
        f"{'#':>2}  {'op':<{name_width}} {'dtype':<5} {'TFLOP/s':>8} {'GB/s':>7} "
        f"{'FLOP/B':>7} {'bound':<7}{'roof':>5}{'time':>6}"
    )


def op_line(rank: int, op: OpRoofline, name_width: int) -> str:
    name = fmt.clean(op.name)
    if op.shapes:
        name += " " + fmt.clean(op.shapes)
    pct = "-" if op.pct_of_ceiling is None else f"{op.pct_of_ceiling:.0f}%"
    return (
        f"{rank:>2}  {fmt.truncate(name, name_width):<{name_width}} {op.dtype or '-':<5} "
        f"{_num(op.achieved_tflops, 8, 1)} {_num(op.achieved_gbps, 7, 0)} "
        f"{_num(op.intensity_flop_per_byte, 7, 1)} {op.bound or '-':<7}{pct:>5}"
        f"{op.share * 100:>5.0f}%"
    )


def header(report: RooflineReport) -> list[str]:
    roof = report.roof
    peaks = " · ".join(f"{fam} {value:,.0f}" for fam, value in roof.compute_tflops)
    return [
        f"Roofline: the top ops against {fmt.clean(roof.label)}",
        f"   memory {roof.bandwidth_gbps:,.0f} GB/s · TFLOP/s {peaks}",
    ]


def lines(report: RooflineReport, width: int = 100, top: int = 10, plot: bool = True) -> list[str]:
    """The report as text lines of at most ``width`` columns: a header, the ops table
    (roof: % of what the op's intensity allows; time: share of the ops' GPU time)
    and, when ``plot``, the ASCII roofline with the ops by rank."""
    name_width = max(20, width - 56)
    out = [*header(report), _head(name_width)]
    ops = report.ops[:top]
    out.extend(op_line(rank, op, name_width) for rank, op in enumerate(ops, start=1))
    if not ops:
        out.append("   no op with GPU time in the capture")
    out.extend(f"   {note}" for note in NOTES)
    if plot and any(op.intensity_flop_per_byte and op.achieved_tflops for op in ops):
        view = roofline_view(report, max(10, min(width - 10, 70)), PLOT_HEIGHT)
        ticks = dict(view.y_ticks)
        for row, text in enumerate(grid_lines(view)):
            label = f"{ticks[row]:g}" if row in ticks else ""
            out.append(f"{label:>8} |{text}")
        out.append(" " * 9 + "+" + "-" * view.width)
        out.append(
            " " * 10 + f"FLOP/byte {10.0**view.x_min_log10:g} .. {10.0**view.x_max_log10:g} (log); "
            "TFLOP/s (log); / memory roof, - compute roof"
        )
    return [line[:width].rstrip() for line in out]


def to_json(report: RooflineReport) -> dict[str, Any]:
    """``roofline`` in ``--json`` output (docs/json.md); names exact, numbers raw."""
    roof = report.roof
    return {
        "roof": {
            "source": roof.source,
            "label": roof.label,
            "bandwidth_gbps": roof.bandwidth_gbps,
            "compute_tflops": dict(roof.compute_tflops),
        },
        "device_us": report.device_us,
        "rows": report.rows,
        "ops": [
            {
                "name": op.name,
                "shapes": op.shapes,
                "dtype": op.dtype,
                "calls": op.calls,
                "device_us": op.device_us,
                "share": op.share,
                "flops": op.flops,
                "flops_source": op.flops_source,
                "bytes_moved": op.bytes_moved,
                "bytes_rule": op.bytes_rule,
                "achieved_tflops": op.achieved_tflops,
                "achieved_gbps": op.achieved_gbps,
                "intensity_flop_per_byte": op.intensity_flop_per_byte,
                "ceiling": op.ceiling,
                "ceiling_tflops": op.ceiling_tflops,
                "balance_flop_per_byte": op.balance_flop_per_byte,
                "attainable_tflops": op.attainable_tflops,
                "bound": op.bound,
                "pct_of_ceiling": op.pct_of_ceiling,
            }
            for op in report.ops
        ],
    }
