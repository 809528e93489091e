"""MFU from a capture's FLOP totals and the rate of unprofiled steps
(gputui.analysis.mfu), and its line in the reports."""

from __future__ import annotations

import dataclasses

import pytest

from gputui.analysis.evidence import CaptureView
from gputui.analysis.mfu import (
    NO_FLOP_OPS,
    NO_FLOP_OPS_COMPILED,
    NO_GPU,
    NO_SHAPES,
    trace_utilisation,
    utilisation,
)
from gputui.analysis.roofline import MEASURED, Roof
from gputui.ceilings.datasheet import H100_SXM, datasheet_for
from gputui.protocol.capture import CaptureOptions, CaptureResult, KernelRow
from gputui.protocol.op_rows import FlopTotals, OpRow
from gputui.reports import mfu as mfu_text

H100 = "NVIDIA H100 80GB HBM3"


def _capture(totals: FlopTotals | None, rows: tuple[OpRow, ...] = ()) -> CaptureResult:
    return CaptureResult(
        id="c1",
        first_step=10,
        last_step=14,  # five captured steps
        options=CaptureOptions(shapes=True, flops=True),
        op_rows=rows,
        flop_totals=totals,
    )


def _measured(bf16: float) -> Roof:
    return Roof(3000.0, (("bf16", bf16), ("fp32", 60.0)), MEASURED, "measured")


BF16_TOTALS = FlopTotals(5 * 4e12, 5 * 5e12, (("bf16", 5 * 4e12),), 5 * 1e12, 40, 0)


def test_mfu_is_model_flops_per_step_times_step_rate_over_the_datasheet_peak() -> None:
    sheet = H100_SXM.roof()
    u = utilisation(_capture(BF16_TOTALS), 50.0, H100, sheet)
    assert u is not None
    assert u.model_flops_per_step == pytest.approx(4e12)
    assert u.hardware_flops_per_step == pytest.approx(5e12)
    assert u.achieved_tflops == pytest.approx(200.0)  # 4 TFLOP x 50 steps/s
    assert u.peak == "bf16" and u.peak_tflops == pytest.approx(989.5)
    assert u.mfu == pytest.approx(200.0 / 989.5)
    assert u.hfu == pytest.approx(250.0 / 989.5)
    assert u.note is None and not u.partial


def test_a_measured_ceiling_does_not_change_the_mfu_only_adds_its_share() -> None:
    sheet = H100_SXM.roof()
    before = utilisation(_capture(BF16_TOTALS), 50.0, H100, sheet)
    after = utilisation(_capture(BF16_TOTALS), 50.0, H100, sheet, _measured(800.0))
    assert before is not None and after is not None
    assert after.mfu == before.mfu
    assert before.measured_share is None
    assert after.measured_share == pytest.approx(200.0 / 800.0)


def test_an_unknown_gpu_says_its_peak_is_unknown() -> None:
    assert datasheet_for("NVIDIA GeForce GT 710") is None
    u = utilisation(_capture(BF16_TOTALS), 50.0, "NVIDIA GeForce GT 710", None)
    assert u is not None
    assert u.mfu is None and u.achieved_tflops == pytest.approx(200.0)
    assert u.note == "peak unknown for NVIDIA GeForce GT 710"
    assert "peak unknown for NVIDIA GeForce GT 710" in mfu_text.line(u)


def test_fp32_faster_than_fp32_can_go_is_compared_with_tf32() -> None:
    totals = FlopTotals(5 * 4e12, 5 * 4e12, (("fp32", 5 * 4e12),))
    u = utilisation(_capture(totals), 50.0, H100, H100_SXM.roof())
    assert u is not None and u.peak == "tf32"
    assert u.mfu == pytest.approx(200.0 / 494.5)
    slow = utilisation(_capture(totals), 5.0, H100, H100_SXM.roof())
    assert slow is not None and slow.peak == "fp32"


TF32_GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1"


def test_fp32_on_tf32_kernels_is_compared_with_tf32_at_any_rate() -> None:
    """A host-bound fp32 job whose GEMMs ran on TF32 tensor cores (cuBLAS's
    tf32 kernels, by name) reaches a small share of the TF32 peak: its MFU is
    of that peak, not of the FP32 one it would read 7x higher against."""
    totals = FlopTotals(5 * 4e12, 5 * 4e12, (("fp32", 5 * 4e12),))
    sheet = H100_SXM.roof()
    gemm = KernelRow(TF32_GEMM, "gemm", 10, 900.0, 90.0)
    sgemm = KernelRow("volta_sgemm_128x64_nn", "gemm", 10, 300.0, 30.0)
    on_tf32 = dataclasses.replace(_capture(totals), kernels=(gemm, sgemm))
    u = utilisation(on_tf32, 5.0, H100, sheet)  # 20 TFLOP/s: below the FP32 peak
    assert u is not None and u.peak == "tf32"
    assert u.mfu == pytest.approx(20.0 / 494.5)
    # mostly FP32 GEMMs on the CUDA cores: the FP32 peak
    on_fp32 = dataclasses.replace(
        _capture(totals), kernels=(dataclasses.replace(sgemm, total_us=3000.0), gemm)
    )
    u = utilisation(on_fp32, 5.0, H100, sheet)
    assert u is not None and u.peak == "fp32"
    # a trace: the kernel table says so the same way
    u, _ = trace_utilisation((totals, 5), 200_000.0, H100, sheet, tf32=True)
    assert u is not None and u.peak == "tf32" and u.mfu == pytest.approx(20.0 / 494.5)
    u, _ = trace_utilisation((totals, 5), 200_000.0, H100, sheet)
    assert u is not None and u.peak == "fp32"


def test_no_capture_with_flops_no_mfu() -> None:
    assert utilisation(None, 50.0, H100, H100_SXM.roof()) is None
    plain = CaptureResult(id="c", first_step=1, last_step=2)
    assert utilisation(plain, 50.0, H100, H100_SXM.roof()) is None


def test_no_unprofiled_steps_no_rate() -> None:
    u = utilisation(_capture(BF16_TOTALS), None, H100, H100_SXM.roof())
    assert u is not None and u.mfu is None and u.achieved_tflops is None
    assert u.note == "no unprofiled steps yet to time"


def test_an_older_hook_is_counted_from_its_op_rows() -> None:
    def row(name: str, flops: float) -> OpRow:
        return OpRow(name, ((4, 4),), ("c10::BFloat16",), 1, 1.0, 1, flops, "estimated", 0, "")

    rows = (row("aten::mm", 5 * 3e12), row("aten::add", 5 * 1e12))  # elementwise: left out
    u = utilisation(_capture(None, rows), 10.0, H100, H100_SXM.roof())
    assert u is not None and u.partial
    assert u.model_flops_per_step == pytest.approx(3e12)
    assert "top op rows" in mfu_text.line(u)


def test_the_line_names_mfu_hfu_rate_and_peak() -> None:
    u = utilisation(_capture(BF16_TOTALS), 50.0, H100, H100_SXM.roof(), _measured(800.0))
    assert u is not None
    text = mfu_text.line(u)
    assert text.startswith("MFU 20.2%, HFU 25.3%, 200.0 TFLOP/s bf16")
    assert "25.0% of the measured bf16 ceiling" in text
    assert "4.00 TFLOP per step (5.00 TFLOP with recomputation)" in text


# -- a trace's steps (gputui analyze) ---------------------------------------------------------
def test_a_trace_gets_the_live_convention_over_its_own_step_time() -> None:
    """The same figures as a capture's with the same totals, the step rate
    being the trace's own (1/step time), and the sentence says so."""
    sheet = H100_SXM.roof()
    u, why = trace_utilisation((BF16_TOTALS, 5), 20_000.0, H100, sheet, _measured(800.0))
    live = utilisation(_capture(BF16_TOTALS), 50.0, H100, sheet, _measured(800.0))
    assert why is None and u is not None and live is not None
    assert u.as_dict() == {**live.as_dict(), "capture_id": None}
    text = " ".join(mfu_text.trace_lines(u, why))
    assert "at 50.00 steps/s during the trace" in text and "unprofiled" not in text
    assert "the profiler slows the steps it records" in text


@pytest.mark.parametrize(
    ("flops", "step_us", "gpu", "expect"),
    [
        (None, 20_000.0, H100, NO_SHAPES),
        ((FlopTotals(0.0, 0.0, (), 0.0, 0, 0), 2), 20_000.0, H100, NO_FLOP_OPS),
    ],
    ids=["no-shapes", "no-flop-ops"],
)
def test_a_trace_without_mfu_says_why(
    flops: tuple[FlopTotals, int] | None, step_us: float, gpu: str, expect: str
) -> None:
    u, why = trace_utilisation(flops, step_us, gpu, H100_SXM.roof())
    assert u is None and why == expect
    assert mfu_text.trace_lines(u, why) == [f"MFU over the trace: unknown: {expect}"]


def test_a_trace_naming_no_gpu_gives_its_rate_and_says_so() -> None:
    u, why = trace_utilisation((BF16_TOTALS, 5), 20_000.0, None, None)
    assert why is None and u is not None
    assert u.achieved_tflops == pytest.approx(200.0) and u.mfu is None
    assert u.note == NO_GPU
    u, _ = trace_utilisation((BF16_TOTALS, 5), None, H100, H100_SXM.roof())
    assert u is not None and u.achieved_tflops is None and u.note == "no step time in the trace"


@pytest.mark.parametrize(
    ("first", "last", "steps", "counted"),
    [(10, 14, 5, 5), (None, None, 5, 5), (None, 14, 3, 3), (None, None, None, 1), (7, 7, 5, 1)],
)
def test_the_mfu_and_the_capture_rules_count_the_same_captured_steps(
    first: int | None, last: int | None, steps: int | None, counted: int
) -> None:
    """One count: the first to the last step, else the steps the capture was asked
    for (the hook records that many before it stops), read by the MFU's FLOPs per
    step and the capture rules' kernels per step alike."""
    cap = dataclasses.replace(
        _capture(BF16_TOTALS), first_step=first, last_step=last, steps=steps, kernel_calls=60
    )
    view = CaptureView.of(cap)
    assert view.steps == counted
    assert view.kernels_per_step == pytest.approx(60 / counted)
    u = utilisation(cap, 50.0, H100, H100_SXM.roof())
    assert u is not None
    assert u.model_flops_per_step == pytest.approx(5 * 4e12 / counted)


def test_a_trace_whose_flop_ops_mostly_fit_no_formula_has_no_mfu() -> None:
    """Convolutions recorded without their stride and padding (older torch): a
    rate of the one linear layer that fits would read as the model's."""
    sheet = H100_SXM.roof()
    few = FlopTotals(5 * 1e6, 5 * 1e6, (("fp32", 5 * 1e6),), 0.0, 5, 100)
    u, why = trace_utilisation((few, 5), 20_000.0, H100, sheet)
    assert u is None and why is not None
    assert why.startswith("the FLOPs of 100 of the steps' 105 matrix products")
    most = dataclasses.replace(few, ops=100, unknown=5)
    u, why = trace_utilisation((most, 5), 20_000.0, H100, sheet)
    assert u is not None and why is None


def test_steps_of_compiled_code_say_why_their_ops_are_missing() -> None:
    """torch.compile's code and graph replays record kernels, not the aten ops
    whose shapes give FLOPs: the reason says so, where an eager trace's says
    only that there is no such op."""
    sheet = H100_SXM.roof()
    none = FlopTotals(0.0, 0.0, (), 0.0, 0, 0)
    _, eager = trace_utilisation((none, 2), 20_000.0, H100, sheet)
    _, compiled = trace_utilisation((none, 2), 20_000.0, H100, sheet, compiled=True)
    assert eager == NO_FLOP_OPS and compiled == NO_FLOP_OPS_COMPILED
