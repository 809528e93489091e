"""The roofline as plain text and JSON values: the table of top ops against the
GPU's ceilings, and the ASCII plot (``gputui analyze``, ``attach --once``; the
attach screen shows the same rows).  Op names and shapes come from the job or the
trace: they are cleaned here."""

from __future__ import annotations

from typing import Any

from gputui import fmt
from gputui.analysis.roofline import OpRoofline, RooflineReport, grid_lines, roofline_view
from gputui.reports.text import table, wrap, wrap_items

PLOT_HEIGHT = 12
NOTES = (
    "roof: % of what the op's intensity allows; time: share of the ops' GPU time",
    "FLOPs: torch's count where it has one, else estimated from the shapes;",
    "bytes: estimated from shapes and dtypes (each input read and output written once)",
)


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


#: the ops table's columns (the op's name and shapes is the one that gives way)
HEADERS = ("#", "op", "dtype", "TFLOP/s", "GB/s", "FLOP/B", "bound", "roof", "time")
_RIGHT = (True, False, False, True, True, True, False, True, True)


def op_cells(rank: int, op: OpRoofline) -> list[str]:
    """One op's row of the table, as text cells (the name cleaned, whole)."""
    name = fmt.clean(op.name)
    if op.shapes:
        name += " " + fmt.clean(op.shapes)
    pct = "-" if op.pct_of_ceiling is None else f"{op.pct_of_ceiling:.0f}%"
    return [
        str(rank),
        name,
        op.dtype or "-",
        _num(op.achieved_tflops, 1),
        _num(op.achieved_gbps, 0),
        _num(op.intensity_flop_per_byte, 1),
        op.bound or "-",
        pct,
        f"{op.share * 100:.0f}%",
    ]


def header(report: RooflineReport, width: int | None = None) -> list[str]:
    """What the ops are held against; wrapped to ``width`` when given."""
    roof = report.roof
    peaks = " · ".join(f"{fam} {value:,.0f}" for fam, value in roof.compute_tflops)
    title = f"Roofline: the top ops against {fmt.clean(roof.label)}"
    ceilings = f"memory {roof.bandwidth_gbps:,.0f} GB/s · TFLOP/s {peaks}"
    if width is None:
        return [title, f"   {ceilings}"]
    items = [f"memory {roof.bandwidth_gbps:,.0f} GB/s", f"TFLOP/s {peaks}"]
    return [*wrap(title, width, "", "   "), *wrap_items(items, width, " · ", "   ")]


def lines(report: RooflineReport, width: int = 100, top: int = 10, plot: bool = True) -> list[str]:
    """The report as text lines of at most ``width`` columns: a header, the ops table
    (roof: % of what the op's intensity allows; time: share of the ops' GPU time)
    and, when ``plot``, the ASCII roofline with the ops by rank.  Op names are
    elided in the middle where the width asks for it; no sentence is cut."""
    ops = report.ops[:top]
    rows = [op_cells(rank, op) for rank, op in enumerate(ops, start=1)]
    out = [
        *header(report, width),
        # narrower: intensity, bandwidth and dtype give way to the op's name
        *table(
            HEADERS, rows, width, right=_RIGHT, flexible=1, gap=" ", optional=(5, 4, 2), least=16
        ),
    ]
    if not ops:
        out.append("   no op with GPU time in the capture")
    for note in NOTES:
        out.extend(wrap(note, width, "   ", "     "))
    if plot and any(op.intensity_flop_per_byte and op.achieved_tflops for op in ops):
        view = roofline_view(report, max(10, min(width - 10, 70)), PLOT_HEIGHT)
        ticks = dict(view.y_ticks)
        for row, text in enumerate(grid_lines(view)):
            label = f"{ticks[row]:g}" if row in ticks else ""
            out.append(f"{label:>8} |{text}".rstrip())
        out.append(" " * 9 + "+" + "-" * view.width)
        axes = [
            f"FLOP/byte {10.0**view.x_min_log10:g} .. {10.0**view.x_max_log10:g} (log);",
            "TFLOP/s (log);",
            "/ memory roof,",
            "- compute roof",
        ]
        out.extend(wrap_items(axes, width, " ", " " * 10))
    return out


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
