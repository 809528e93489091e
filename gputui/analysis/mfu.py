"""Model FLOP utilisation (MFU) and achieved TFLOP/s of a job (pure).

The convention (docs/analyzer.md, "MFU"):

- **model FLOPs per step** come from the newest capture recorded with FLOPs:
  every matrix product, convolution and attention op of the captured steps,
  forward and backward, counted once (``protocol.op_rows.FlopTotals``), divided
  by the captured steps;
- the **step rate** is that of the steps the profiler did not slow down (not
  profiled, not compiling, not warm-up): a capture slows a step by 35-95%;
- **MFU** = model FLOPs per step × step rate / the datasheet's dense peak of the
  dtype with the most model FLOPs.  A datasheet peak, never a measured one, so
  the MFU does not change after ``gputui bench``;
- **HFU** counts hardware FLOPs instead: forward ops recomputed in the backward
  (activation checkpointing) and the scores fused attention recomputes;
- the **share of the measured ceiling**: model FLOP/s over ``gputui bench``'s
  measured matmul rate of the same dtype, when one was measured.

A trace file (``gputui analyze``) gets the same figures from the ops inside its
steps and its own step time (``trace_utilisation``): the profiler's slowdown is
in that time, so they are "during the trace".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import Any

from gputui.analysis.evidence import captured_steps, on_tf32
from gputui.analysis.roofline import TF32_EVIDENCE, Roof
from gputui.protocol.capture import CaptureResult
from gputui.protocol.op_rows import FlopTotals, OpRow
from gputui.protocol.value import ValueBase, value_class
from gputui.trace import op_costs

FP32 = "fp32"
TF32 = "tf32"


@value_class
class Utilisation(ValueBase):
    """A job's FLOP rate and utilisation.  None where it cannot be known."""

    model_flops_per_step: float
    hardware_flops_per_step: float
    dtype: str | None  #: the dtype family with the most model FLOPs
    steps_per_s: float | None  #: of the steps the profiler did not slow down
    achieved_tflops: float | None  #: model FLOPs per second / 1e12
    hardware_tflops: float | None
    peak: str | None  #: the ceiling compared against ("bf16", or "tf32" for fp32 on TF32)
    peak_tflops: float | None  #: the datasheet's dense peak
    mfu: float | None  #: 0..1 (or above, if the count is off)
    hfu: float | None
    measured_tflops: float | None  #: gputui bench's ceiling of that dtype
    measured_share: float | None  #: model FLOP/s over it
    capture_id: str | None
    #: the counted FLOPs come from the capture's top op rows only (an older hook)
    partial: bool = False
    #: why a number is missing ("peak unknown for <GPU>")
    note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _from_rows(rows: Sequence[OpRow]) -> FlopTotals | None:
    """Totals from a capture's op rows, for a hook that sends no totals: the top
    rows only, with no split of recomputation."""
    by_dtype: dict[str, float] = {}
    total = 0.0
    for row in rows:
        if row.name not in op_costs.MODEL_FLOP_OPS or not row.flops:
            continue
        total += row.flops
        fam = op_costs.dtype_family(row.input_types) or "other"
        by_dtype[fam] = by_dtype.get(fam, 0.0) + row.flops
    if total <= 0:
        return None
    order = tuple(sorted(by_dtype.items(), key=lambda kv: -kv[1]))
    return FlopTotals(total, total, order, 0.0, len(rows), 0)


def utilisation(
    cap: CaptureResult | None,
    steps_per_s: float | None,
    gpu_name: str | None,
    datasheet: Roof | None,
    measured: Roof | None = None,
) -> Utilisation | None:
    """The job's MFU from its newest capture with FLOPs and the step rate of its
    ordinary steps; None without such a capture."""
    if cap is None or not cap.options.flops:
        return None
    totals = cap.flop_totals
    partial = totals is None
    if totals is None:
        totals = _from_rows(cap.op_rows)
    return _of(
        totals,
        captured_steps(cap),
        steps_per_s,
        gpu_name,
        datasheet,
        measured,
        "no unprofiled steps yet to time",
        capture_id=cap.id,
        partial=partial,
        tf32=on_tf32(cap.kernels),
    )


#: why a trace has no MFU (``trace_utilisation``)
NO_SHAPES = "the trace has no input shapes (profile with record_shapes=True)"
NO_FLOP_OPS = "no matrix product, convolution or attention op in the trace's steps"
NO_GPU = "the trace names no GPU (no deviceProperties)"
#: NO_FLOP_OPS where the steps ran compiled code or CUDA graph replays
NO_FLOP_OPS_COMPILED = (
    "no matrix product, convolution or attention op in the trace's steps: torch.compile's "
    "code and CUDA graph replays run theirs as kernels, without the ops whose shapes "
    "give their FLOPs"
)
#: most matrix products, convolutions and attention ops fit no formula
UNKNOWN_FLOPS = (
    "the FLOPs of {unknown} of the steps' {ops} matrix products, convolutions and attention "
    "ops cannot be told from their shapes (a convolution's also needs its stride and padding, "
    "which only recent torch versions record, as Concrete Inputs)"
)
NO_GPU_WORK = "no op ran on a GPU (no kernel launch or GPU activity in the trace)"
NO_GPU_TIME = (
    "the GPU's activity was not recorded and the trace has no steps: nothing times its work"
)


def trace_utilisation(
    step_flops: tuple[FlopTotals, int] | None,
    step_us: float | None,
    gpu_name: str | None,
    datasheet: Roof | None,
    measured: Roof | None = None,
    gpu_work: bool = True,
    timed: bool = True,
    tf32: bool = False,
    compiled: bool = False,
) -> tuple[Utilisation | None, str | None]:
    """The MFU of a trace's steps, with the convention of the live one but the
    traced steps' own time: the profiler's slowdown is in it, so it reads lower
    than the job's MFU.  ``step_flops``: the FLOPs of the ops inside the steps
    and how many steps; ``step_us``: the mean step; ``gpu_work``: whether any
    op ran on a GPU (else the rate has no GPU peak to be a share of);
    ``timed``: whether ``step_us`` times the GPU's work (not where the GPU's
    activity went unrecorded and only the host's span gives a time: the GPU
    may run long after it); ``tf32``: whether its FP32 GEMMs ran on TF32
    tensor cores (:func:`~gputui.analysis.evidence.on_tf32`); ``compiled``:
    the steps ran torch.compile's code or CUDA graphs.  When there is none, why."""
    if step_flops is None:
        return None, NO_SHAPES
    if not timed:
        return None, NO_GPU_TIME
    totals, steps = step_flops
    if totals.unknown and totals.unknown >= totals.ops:
        # a rate of the few ops that fit would read as the model's
        return None, UNKNOWN_FLOPS.format(unknown=totals.unknown, ops=totals.unknown + totals.ops)
    rate = 1e6 / step_us if step_us and step_us > 0 else None
    if not gpu_work:
        datasheet = measured = None
    util = _of(
        totals, steps, rate, gpu_name, datasheet, measured, "no step time in the trace", tf32=tf32
    )
    if util is None:
        return None, NO_FLOP_OPS_COMPILED if compiled and not totals.ops else NO_FLOP_OPS
    if not gpu_work:
        util = replace(util, note=NO_GPU_WORK)
    elif gpu_name is None:
        util = replace(util, note=NO_GPU)
    return util, None


def _of(
    totals: FlopTotals | None,
    steps: int,
    steps_per_s: float | None,
    gpu_name: str | None,
    datasheet: Roof | None,
    measured: Roof | None,
    no_rate: str,
    capture_id: str | None = None,
    partial: bool = False,
    tf32: bool = False,
) -> Utilisation | None:
    """The convention itself: FLOPs per step times the step rate, over the
    datasheet's dense peak of the dtype with the most model FLOPs; for FP32,
    the TF32 peak where the GEMM kernels ran on TF32 (``tf32``, by their
    names) or the rate is above what FP32 reaches."""
    if totals is None or totals.model <= 0:
        return None
    n = max(1, steps)
    model, hardware = totals.model / n, totals.hardware / n
    dtype = totals.dtype
    rate = steps_per_s if steps_per_s and steps_per_s > 0 else None
    achieved = None if rate is None else model * rate / 1e12
    hw_rate = None if rate is None else hardware * rate / 1e12
    note = None
    peak_name = dtype
    peak = None
    if datasheet is None:
        note = f"peak unknown for {gpu_name or 'this GPU'}"
    else:
        peak = datasheet.tflops(dtype)
        faster = bool(peak and achieved and achieved > TF32_EVIDENCE * peak)
        if dtype == FP32 and peak and (tf32 or faster) and datasheet.tflops(TF32):
            # TF32 GEMM kernels ran, or faster than FP32 can go: on TF32 tensor cores
            peak_name, peak = TF32, datasheet.tflops(TF32)
        if not peak:
            note = f"no dense {dtype or 'dtype'} peak in the {datasheet.label}"
            peak = None
    if rate is None:
        note = note or no_rate
    measured_peak = None if measured is None else measured.tflops(peak_name)
    return Utilisation(
        model_flops_per_step=model,
        hardware_flops_per_step=hardware,
        dtype=dtype,
        steps_per_s=rate,
        achieved_tflops=achieved,
        hardware_tflops=hw_rate,
        peak=peak_name,
        peak_tflops=peak,
        mfu=None if achieved is None or not peak else achieved / peak,
        hfu=None if hw_rate is None or not peak else hw_rate / peak,
        measured_tflops=measured_peak,
        measured_share=None if achieved is None or not measured_peak else achieved / measured_peak,
        capture_id=capture_id,
        partial=partial,
        note=note,
    )
