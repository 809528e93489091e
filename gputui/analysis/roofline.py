"""The roofline: each op's achieved FLOP/s and bandwidth against this GPU's
ceilings, and whether memory or compute bounds it (pure stdlib; the hook may
import it).

An op of arithmetic intensity I (FLOPs per byte moved) cannot run faster than
``min(peak FLOP/s, I × memory bandwidth)``.  The two meet at the balance point
``peak / bandwidth`` (about 295 FLOP/byte for bf16 on an H100 datasheet): below
it an op is memory-bound and its efficiency is its achieved bandwidth against the
memory ceiling; above it, compute-bound, measured against the FLOP/s ceiling of
its dtype.  Ceilings come from ``gputui bench`` (measured on this GPU) or, when
there is no measurement, from the datasheet (:class:`Roof` says which).

Op rows (FLOPs, bytes, GPU time) come from :mod:`gputui.trace.op_rows`; the
byte estimates and their limits are described in :mod:`gputui.trace.op_costs`.
:func:`roofline_view` places the top ops on a log-log grid of any size for a
terminal plot, as numbers only: the screens draw it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gputui.analysis.roof import DATASHEET as DATASHEET
from gputui.analysis.roof import MEASURED as MEASURED
from gputui.analysis.roof import Roof
from gputui.protocol.op_rows import OpRow

# the ceilings themselves live apart (gputui.analysis.roof); named here too
from gputui.protocol.value import ValueBase, value_class
from gputui.trace import op_costs
from gputui.trace.op_costs import FP32, TF32
from gputui.trace.scan import is_comm

MEMORY = "memory"
COMPUTE = "compute"
#: an fp32 op faster than this share of the fp32 ceiling must have run on TF32
#: tensor cores (allowed by ``torch.backends.cuda.matmul``): compare it with those
TF32_EVIDENCE = 1.05


@value_class
class OpRoofline(ValueBase):
    """One op row placed on the roofline.  None where it cannot be known."""

    name: str
    shapes: str
    dtype: str | None
    calls: int
    device_us: float
    share: float  #: of the GPU time of all rows
    flops: float | None
    flops_source: str | None
    bytes_moved: float | None
    bytes_rule: str
    achieved_tflops: float | None
    achieved_gbps: float | None
    intensity_flop_per_byte: float | None
    ceiling: str | None  #: the compute ceiling compared against ("tf32" for a TF32 fp32 op)
    ceiling_tflops: float | None
    balance_flop_per_byte: float | None
    attainable_tflops: float | None  #: min(ceiling, intensity × bandwidth)
    bound: str | None  #: MEMORY or COMPUTE
    pct_of_ceiling: float | None  #: achieved against the ceiling that binds it


@value_class
class RooflineReport(ValueBase):
    roof: Roof
    ops: tuple[OpRoofline, ...]
    device_us: float  #: GPU time of all rows (the share's denominator)
    rows: int


def shapes_text(row: OpRow) -> str:
    """``8192x1024 · 1024x3072``: the tensor inputs' shapes."""
    parts = []
    for dims, t in zip(row.input_dims, row.input_types, strict=False):
        if dims is not None and op_costs.is_tensor_type(t):
            parts.append("x".join(str(d) for d in dims) if dims else "scalar")
    return " · ".join(parts)


def _place(row: OpRow, roof: Roof, total_us: float) -> OpRoofline:
    seconds = row.device_us / 1e6
    tflops = row.flops / seconds / 1e12 if row.flops is not None and seconds > 0 else None
    gbps = row.bytes_moved / seconds / 1e9 if row.bytes_moved and seconds > 0 else None
    intensity = row.flops / row.bytes_moved if row.flops is not None and row.bytes_moved else None
    family = op_costs.dtype_family(row.input_types)
    ceiling = family
    peak = roof.tflops(family)
    if (
        family == FP32
        and peak is not None
        and tflops is not None
        and tflops > peak * TF32_EVIDENCE
        and roof.tflops(TF32) is not None
    ):
        ceiling, peak = TF32, roof.tflops(TF32)
    if peak is None:
        ceiling = None
    balance = roof.balance_flop_per_byte(ceiling) if ceiling else None
    bound = attainable = pct = None
    if intensity is not None and intensity > 0 and peak is not None and balance is not None:
        bound = MEMORY if intensity < balance else COMPUTE
        attainable = min(peak, intensity * roof.bandwidth_gbps / 1000.0)
        pct = 100.0 * tflops / attainable if tflops is not None and attainable > 0 else None
    elif row.bytes_moved and not row.flops:
        # Data movement without arithmetic (copies, fills): only bandwidth binds.
        bound = MEMORY
        pct = 100.0 * gbps / roof.bandwidth_gbps if gbps is not None else None
    return OpRoofline(
        name=row.name,
        shapes=shapes_text(row),
        dtype=family,
        calls=row.calls,
        device_us=row.device_us,
        share=row.device_us / total_us if total_us > 0 else 0.0,
        flops=row.flops,
        flops_source=row.flops_source,
        bytes_moved=row.bytes_moved,
        bytes_rule=row.bytes_rule,
        achieved_tflops=tflops,
        achieved_gbps=gbps,
        intensity_flop_per_byte=intensity,
        ceiling=ceiling,
        ceiling_tflops=peak,
        balance_flop_per_byte=balance,
        attainable_tflops=attainable,
        bound=bound,
        pct_of_ceiling=pct,
    )


def analyze(rows: Sequence[OpRow], roof: Roof, top: int = 10) -> RooflineReport:
    """The ``top`` rows by GPU time placed against ``roof``.  Collectives
    (``record_param_comms``, ``c10d::``, ``nccl:``) are left out: their kernels'
    time is the transfer and the wait for the other ranks, not this GPU's
    memory or arithmetic."""
    rows = [r for r in rows if not is_comm(r.name)]
    total = sum(r.device_us for r in rows)
    ranked = sorted(rows, key=lambda r: -r.device_us)[: max(top, 0)]
    return RooflineReport(
        roof=roof,
        ops=tuple(_place(r, roof, total) for r in ranked),
        device_us=total,
        rows=len(rows),
    )


# -- the plot, as numbers -----------------------------------------------------------------
@value_class
class RoofLine(ValueBase):
    """One compute ceiling with the memory slope under it, cell by cell."""

    ceiling: str
    tflops: float
    ridge_col: int | None  #: the column of the balance point
    rows: tuple[int | None, ...]  #: per column, the roof's row (None: off the grid)


@value_class
class PlotPoint(ValueBase):
    rank: int  #: 1 for the op with the most GPU time
    name: str  #: untrusted text: clean it before display
    col: int
    row: int
    intensity_flop_per_byte: float
    tflops: float
    bound: str | None


@value_class
class RooflineView(ValueBase):
    """A roofline on a ``width`` × ``height`` grid; row 0 is the top.  x is
    arithmetic intensity (FLOP/byte), y is TFLOP/s, both log10 from the given
    decade to the next ones."""

    width: int
    height: int
    x_min_log10: int
    x_max_log10: int
    y_min_log10: int
    y_max_log10: int
    lines: tuple[RoofLine, ...]
    points: tuple[PlotPoint, ...]
    x_ticks: tuple[tuple[int, float], ...]  #: (column, FLOP/byte) at each decade
    y_ticks: tuple[tuple[int, float], ...]  #: (row, TFLOP/s) at each decade
    bandwidth_gbps: float
    source: str


def _col(value: float, lo: int, hi: int, width: int) -> int:
    return round((math.log10(value) - lo) / (hi - lo) * (width - 1))


def _row(value: float, lo: int, hi: int, height: int) -> int:
    return round((hi - math.log10(value)) / (hi - lo) * (height - 1))


def roofline_view(report: RooflineReport, width: int, height: int) -> RooflineView:
    """The report's ops and ceilings on a grid (at least 10 × 5 cells)."""
    if width < 10 or height < 5:
        raise ValueError(f"a roofline needs at least 10x5 cells, got {width}x{height}")
    roof = report.roof
    placed = [
        (rank, op)
        for rank, op in enumerate(report.ops, start=1)
        if op.intensity_flop_per_byte and op.achieved_tflops and op.achieved_tflops > 0
    ]
    ceilings: dict[str, float] = {}
    for _rank, op in placed:
        if op.ceiling and op.ceiling_tflops:
            ceilings[op.ceiling] = op.ceiling_tflops
    if not ceilings and roof.compute_tflops:
        fam, value = max(roof.compute_tflops, key=lambda fv: fv[1])
        ceilings[fam] = value
    xs = [op.intensity_flop_per_byte or 1.0 for _r, op in placed]
    ys = [op.achieved_tflops or 1.0 for _r, op in placed]
    balances = [v * 1e3 / roof.bandwidth_gbps for v in ceilings.values() if roof.bandwidth_gbps]
    x_lo = min([*xs, *(b / 100 for b in balances)] or [0.1])
    x_hi = max([*xs, *(b * 10 for b in balances)] or [1000.0])
    x_min, x_max = math.floor(math.log10(x_lo)), math.ceil(math.log10(x_hi))
    y_lo = min([*ys, *(v / 1000 for v in ceilings.values())] or [0.1])
    y_hi = max([*ys, *ceilings.values()] or [1000.0])
    y_min, y_max = math.floor(math.log10(y_lo)), math.ceil(math.log10(y_hi))
    x_max = max(x_max, x_min + 1)
    y_max = max(y_max, y_min + 1)
    lines = []
    for fam, peak in sorted(ceilings.items(), key=lambda kv: kv[1]):
        cells: list[int | None] = []
        for c in range(width):
            x = 10 ** (x_min + c / (width - 1) * (x_max - x_min))
            y = min(peak, x * roof.bandwidth_gbps / 1000.0)
            inside = 10**y_min <= y <= 10**y_max
            cells.append(_row(y, y_min, y_max, height) if inside else None)
        ridge = peak * 1e3 / roof.bandwidth_gbps if roof.bandwidth_gbps else None
        ridge_col = (
            _col(ridge, x_min, x_max, width) if ridge and 10**x_min <= ridge <= 10**x_max else None
        )
        lines.append(RoofLine(fam, peak, ridge_col, tuple(cells)))
    points = tuple(
        PlotPoint(
            rank=rank,
            name=op.name,
            col=_col(op.intensity_flop_per_byte or 1.0, x_min, x_max, width),
            row=_row(op.achieved_tflops or 1.0, y_min, y_max, height),
            intensity_flop_per_byte=op.intensity_flop_per_byte or 0.0,
            tflops=op.achieved_tflops or 0.0,
            bound=op.bound,
        )
        for rank, op in placed
    )
    return RooflineView(
        width=width,
        height=height,
        x_min_log10=x_min,
        x_max_log10=x_max,
        y_min_log10=y_min,
        y_max_log10=y_max,
        lines=tuple(lines),
        points=points,
        x_ticks=tuple(
            (_col(10.0**d, x_min, x_max, width), 10.0**d) for d in range(x_min, x_max + 1)
        ),
        y_ticks=tuple(
            (_row(10.0**d, y_min, y_max, height), 10.0**d) for d in range(y_min, y_max + 1)
        ),
        bandwidth_gbps=roof.bandwidth_gbps,
        source=roof.label,
    )


_MARKS = "123456789abcdefghijklmnopqrstuvwxyz"


def grid_lines(view: RooflineView) -> list[str]:
    """The view as plain ASCII rows (roof ``/`` and ``-``, ops by rank ``1``-``9``,
    ``a``-``z``): for ``--once`` output, logs and tests.  Screens draw their own."""
    grid = [[" "] * view.width for _ in range(view.height)]
    for line in view.lines:
        for c, r in enumerate(line.rows):
            if r is not None:
                slope = line.ridge_col is None or c < line.ridge_col
                grid[r][c] = "/" if slope else "-"
    for p in sorted(view.points, key=lambda p: -p.rank):  # the top op drawn last, on top
        grid[p.row][p.col] = _MARKS[p.rank - 1] if p.rank <= len(_MARKS) else "+"
    return ["".join(row) for row in grid]
