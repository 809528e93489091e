"""Attention on every SDPA backend: which one ran, why flash did not, what it
costs against flash (gputui/analysis/rules/attention.py), from synthetic op rows
and kernels; and the markers that say what SDPA's own ops show of its inputs
(gputui/trace/markers.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from gputui.analysis import engine
from gputui.analysis.evidence import JobEvidence
from gputui.analysis.finding import Finding
from gputui.analysis.rules import attention
from gputui.analysis.thresholds import value
from gputui.ceilings.datasheet import A100_SXM_80, H100_SXM
from gputui.protocol.op_rows import OpRow
from gputui.protocol.trace_metrics import JobMarkers
from gputui.trace.markers import attention_inputs, job_markers
from gputui.trace.timeline import OP, HostRange, Timeline
from tests.helpers.evidence import capture, evidence, kernel, op, op_row, sdpa_row, steps

H100 = H100_SXM.roof()
A100 = A100_SXM_80.roof()
F32, BF16 = "float", "c10::BFloat16"
Q = [4, 8, 2048, 64]
KERNELS = {
    ("efficient", "f32"): (
        "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, "
        "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",
        "fmha_cutlassB_f32_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackward"
        "Kernel<cutlass::arch::Sm80, float, true, false, false, 64, 64, 64, false>::Params)",
    ),
    ("efficient", "bf16"): (
        "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<"
        "cutlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",
        "fmha_cutlassB_bf16_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackward"
        "Kernel<cutlass::arch::Sm80, cutlass::bfloat16_t, true, false, false, 64, 64, 64>::Params)",
    ),
    ("flash", "bf16"): (
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, "
        "false, cutlass::bfloat16_t>, false, true, false, false, false, true>(Flash_fwd_params)",
        "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits"
        "<64, 128, 128, 8, 4, 4, 4, false, false, cutlass::bfloat16_t>>(Flash_bwd_params)",
    ),
    ("cudnn", "bf16"): (
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_"
        "cga1x1x1_kernel0_0",
        "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_"
        "cga1x1x1_kernel0_0",
    ),
}
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
SOFTMAX = "cunn_SoftMaxForward<SoftMaxForwardEpilogue>"
SOFTMAX_BWD = "cunn_SoftMaxBackward<SoftMaxBackwardEpilogue>"
MATH_OP = "aten::_scaled_dot_product_attention_math"
TOTAL = 100_000.0  # us of kernels in every capture here, all of it busy


def sdpa_job(
    backend: str,
    *,
    dtype: str = "f32",
    attention_us: float = 60_000.0,
    rows: Sequence[OpRow] = (),
    inputs: Sequence[str] = (),
    cc: str | None = "9.0",
    sheet: Any = H100,
    training: bool = True,
    markers: bool = True,
) -> JobEvidence:
    """100 ms of kernels: the backend's attention kernels (a third forward, two
    thirds backward; the math backend: softmax and elementwise kernels beside
    GEMMs) take ``attention_us``, bf16 GEMMs the rest."""
    ops = []
    if backend == "math":
        ks = [
            kernel(SOFTMAX, "reduction", 30, attention_us * 0.2),
            kernel(SOFTMAX_BWD, "reduction", 30, attention_us * 0.2),
            kernel("elementwise_kernel<CUDAFunctor_add>", "elementwise", 60, attention_us * 0.2),
            kernel(GEMM, "gemm", 100, attention_us * 0.4),
        ]
        ops = [op(MATH_OP, 30, 500.0)]
    else:
        fwd, bwd = KERNELS[(backend, dtype)]
        ks = [kernel(fwd, "attention", 30, attention_us / 3)]
        if training:
            ks.append(kernel(bwd, "attention", 30, attention_us * 2 / 3))
        else:
            ks[0] = kernel(fwd, "attention", 30, attention_us)
    ks.append(kernel(GEMM, "gemm", 100, TOTAL - attention_us))
    mark = JobMarkers(backward=training, attention=(backend,), attention_inputs=tuple(inputs))
    cap = capture(ks, ops, busy_us=TOTAL, op_rows=rows, markers=mark if markers else None)
    phases = None if training else steps(phases={"forward": 0.03, "other": 0.005})
    return evidence(phases, cap=cap, compute_capability=cc, datasheet=sheet)


def found(ev: JobEvidence, rule_id: str) -> list[Finding]:
    return [f for f in engine.analyze(ev) if f.rule == rule_id]


def one(ev: JobEvidence, rule_id: str) -> Finding:
    (f,) = found(ev, rule_id)
    return f


def rows(dtype: str, q: Sequence[int] = Q, fwd_us: float = 20_000.0, **kw: Any) -> list[OpRow]:
    """The forward (public op) and memory-efficient backward rows of 3 calls."""
    bwd = {k: v for k, v in kw.items() if k != "mask"}
    mask = kw.get("mask")
    return [
        sdpa_row(q, dtype, device_us=fwd_us, **kw),
        sdpa_row(
            q,
            dtype,
            name="aten::_scaled_dot_product_efficient_attention_backward",
            device_us=2 * fwd_us,
            mask=None if mask is None else [q[0], q[1], *mask[-2:]],
            **bwd,
        ),
    ]


# -- which backend ran --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("backend", "dtype", "rule_id"),
    [
        ("flash", "bf16", None),
        ("cudnn", "bf16", None),
        ("efficient", "f32", "attention.sdpa_efficient"),
        ("efficient", "bf16", "attention.sdpa_efficient"),
        ("math", "f32", "attention.sdpa_math"),
    ],
)
def test_each_backend_is_named_and_only_the_slow_ones_speak(
    backend: str, dtype: str, rule_id: str | None
) -> None:
    ev = sdpa_job(backend, dtype=dtype)
    attn = [f for f in engine.analyze(ev) if f.rule.startswith("attention.")]
    assert [f.rule for f in attn] == ([rule_id] if rule_id else [])
    if rule_id:
        label = attention.LABELS[backend]
        assert f"ran its {label}" in attn[0].title and label in attn[0].evidence


@pytest.mark.parametrize("backend", ["flash", "cudnn"])
def test_a_healthy_bf16_job_gets_no_attention_warning_with_shapes_either(backend: str) -> None:
    """bf16, head dim 64, is_causal, on an H100: nothing to say; a mask on cuDNN
    (which takes one) neither."""
    fine = [sdpa_row(Q, BF16, causal=True, device_us=5_000.0)]
    masked = [sdpa_row(Q, BF16, mask=[2048, 2048], device_us=5_000.0)]
    for shaped in (fine, masked if backend == "cudnn" else fine):
        ev = sdpa_job(backend, dtype="bf16", rows=shaped)
        assert [f for f in engine.analyze(ev) if f.rule.startswith("attention.")] == []


def test_the_backend_is_told_by_kernels_or_ops_without_markers() -> None:
    """A capture from a hook before the markers: the kernel names tell the
    memory-efficient backend, the math backend's op tells it."""
    eff = one(sdpa_job("efficient", markers=False), "attention.sdpa_efficient")
    assert "fmha_cutlassB_f32_aligned_64x64_k64_sm80" in eff.evidence
    math = one(sdpa_job("math", markers=False), "attention.sdpa_math")
    assert f"{MATH_OP} x30" in math.evidence


def test_a_call_is_given_to_the_backend_its_inputs_leave() -> None:
    """cuDNN ran the unmasked bf16 calls, the memory-efficient kernels the masked
    fp32 ones: only the masked calls are costed, and the finding says what else ran."""
    masked = sdpa_row(Q, F32, mask=[2048, 2048], device_us=30_000.0)
    plain = sdpa_row([4, 8, 1024, 64], BF16, device_us=30_000.0)
    mark = JobMarkers(backward=True, attention=("cudnn", "efficient"), attention_inputs=("mask",))
    fwd, _bwd = KERNELS[("efficient", "f32")]
    cudnn, _ = KERNELS[("cudnn", "bf16")]
    ks = [kernel(fwd, "attention", 3, 30_000.0), kernel(cudnn, "attention", 3, 30_000.0)]
    ks.append(kernel(GEMM, "gemm", 100, TOTAL - 60_000.0))
    cap = capture(ks, busy_us=TOTAL, op_rows=[masked, plain], markers=mark)
    ev = evidence(cap=cap, compute_capability="9.0", datasheet=H100)
    seen = attention.backends_seen(ev)
    calls = [attention.sdpa_call(r) for r in (masked, plain)]
    assert [attention.owner(c, seen, ev) for c in calls if c] == ["efficient", "cudnn"]
    f = one(ev, "attention.sdpa_efficient")
    assert "3 calls of scaled_dot_product_attention (q 4x8x2048x64 fp32)" in f.evidence
    assert "(and cuDNN for others)" in f.evidence
    assert "these calls take 30.0ms of GPU time" in f.evidence


# -- why flash did not run ------------------------------------------------------------------
def slow(q: Sequence[int], dtype: str, **kw: Any) -> OpRow:
    """A forward row whose 3 calls take 50 ms: far slower than flash."""
    return sdpa_row(q, dtype, device_us=50_000.0, **kw)


@pytest.mark.parametrize(
    ("row", "says"),
    [
        (slow(Q, F32), "fp32 inputs (flash takes fp16 or bf16)"),
        (
            slow(Q, BF16, mask=[2048, 2048]),
            "an attn_mask (2048x2048: flash takes none; if it is the causal triangle, "
            "is_causal=True takes its place)",
        ),
        (slow(Q, BF16, mask=[4, 1, 1, 2048]), "an attn_mask (4x1x1x2048: flash takes none)"),
        (slow([4, 8, 2048, 320], BF16), "head dim 320 (flash takes at most 256)"),
        (
            slow([4, 8, 2048, 192], BF16, v=[4, 8, 2048, 128]),
            "head dims that differ (q 192, k 192, v 128",
        ),
        (
            slow([4, 8, 1, 64], BF16, kv=[4, 8, 2048, 64], causal=True),
            "is_causal with 1 queries and 2,048 keys",
        ),
    ],
)
def test_the_shapes_say_why_flash_did_not_run(row: OpRow, says: str) -> None:
    f = one(sdpa_job("efficient", dtype="bf16", rows=[row]), "attention.sdpa_efficient")
    assert f"flash is out because of {says}" in f.evidence


def test_the_fix_follows_the_reasons() -> None:
    f = one(
        sdpa_job("efficient", rows=[sdpa_row(Q, F32, mask=[2048, 2048])]),
        "attention.sdpa_efficient",
    )
    assert "torch.autocast('cuda', dtype=torch.bfloat16)" in f.fix
    assert "pass is_causal=True instead of a causal attn_mask" in f.fix
    assert "head dim" not in f.fix
    padded = one(
        sdpa_job("efficient", rows=[slow(Q, BF16, mask=[4, 1, 1, 2048])]),
        "attention.sdpa_efficient",
    )
    assert "a padding mask that pads nothing can go" in padded.fix


def test_the_gpu_keeps_flash_out_below_sm80() -> None:
    """On sm 7.5 flash cannot run: the memory-efficient kernel is SDPA's best
    there (no finding), the math backend still gets one, and says why."""
    assert found(sdpa_job("efficient", cc="7.5", sheet=None), "attention.sdpa_efficient") == []
    f = one(sdpa_job("math", cc="7.5", sheet=None, rows=[sdpa_row(Q, F32)]), "attention.sdpa_math")
    assert "the GPU's sm 7.5 (flash needs sm 8.0 or newer)" in f.evidence
    assert "flash needs an sm 8.0 (Ampere) or newer GPU" in f.fix


def test_rocm_runs_flash_and_memory_efficient_on_the_same_kernels() -> None:
    ev = sdpa_job("efficient", dtype="bf16", cc="9.4", sheet=None)
    cap = ev.capture
    assert cap is not None and found(ev, "attention.sdpa_efficient")
    hip = capture(list(cap.kernels), [op("hipLaunchKernel", 90, 900.0)], busy_us=TOTAL)
    rocm = evidence(cap=hip, compute_capability="9.4")
    assert found(rocm, "attention.sdpa_efficient") == []


@pytest.mark.parametrize(
    ("head", "inputs", "blocked"),
    [(192, (), False), (208, (), True), (240, (), False), (240, ("dropout",), True)],
)
def test_flash_backward_head_dims_on_sm86(
    head: int, inputs: tuple[str, ...], blocked: bool
) -> None:
    """sm 8.6 with a backward: flash takes a head dim of at most 192, or 225 to
    256 without dropout (torch's sdp_utils.cpp)."""
    ev = sdpa_job("efficient", dtype="bf16", cc="8.6", sheet=None, inputs=inputs)
    call = attention.sdpa_call(sdpa_row([4, 8, 2048, head], BF16))
    assert call is not None
    said = any("with a backward on sm 8.6" in r for r in attention.flash_blockers(call, ev))
    assert said == blocked
    inference = sdpa_job("efficient", dtype="bf16", cc="8.6", sheet=None, training=False)
    assert attention.flash_blockers(call, inference) == []


@pytest.mark.parametrize(
    ("row", "says"),
    [
        (slow(Q, "double"), "fp64 inputs (no fused kernel takes them)"),
        (
            slow([4, 8, 2048, 100], BF16),
            "head dim 100 not a multiple of 8 (the memory-efficient and cuDNN kernels need it)",
        ),
    ],
)
def test_the_math_backend_says_why_the_fused_kernels_did_not_run(row: OpRow, says: str) -> None:
    f = one(sdpa_job("math", rows=[row]), "attention.sdpa_math")
    assert says in f.evidence


def test_the_math_backend_on_inputs_the_fused_kernel_takes_was_chosen_by_hand() -> None:
    """fp32 keeps flash out, but not the memory-efficient kernel: the math
    backend ran because the fused kernels were turned off."""
    f = one(sdpa_job("math", rows=[slow(Q, F32)]), "attention.sdpa_math")
    assert "flash is out because of fp32 inputs" in f.evidence
    assert "nothing recorded keeps the memory-efficient kernel out" in f.evidence
    assert "enable_mem_efficient_sdp(False)" in f.fix
    hd100 = one(sdpa_job("math", rows=[slow([4, 8, 2048, 100], BF16)]), "attention.sdpa_math")
    assert "memory-efficient kernel out:" not in hd100.evidence


def test_eligible_shapes_mean_flash_was_turned_off() -> None:
    f = one(sdpa_job("math", rows=[sdpa_row(Q, BF16, causal=True)]), "attention.sdpa_math")
    assert "nothing in the recorded shapes, dtypes or GPU keeps flash out" in f.evidence
    assert "enable_flash_sdp(False)" in f.fix and "record" not in f.fix


def test_without_shapes_the_kernels_and_ops_say_why() -> None:
    """The memory-efficient kernels' names tell fp32; SDPA's mask ops tell a mask;
    record_shapes is asked for the rest."""
    f = one(sdpa_job("efficient", inputs=("mask",)), "attention.sdpa_efficient")
    assert "fp32 inputs (the memory-efficient kernels ran fp32" in f.evidence
    assert "an attn_mask (SDPA prepared one for its kernel" in f.evidence
    assert "record_shapes=True" in f.evidence


def test_without_shapes_the_math_backends_ops_say_what_suits_flash() -> None:
    f = one(sdpa_job("math", inputs=("causal", "upcast")), "attention.sdpa_math")
    assert (
        "16-bit inputs (the math backend cast them to fp32), is_causal=True with no mask, "
        "sm 9.0 all suit flash: it was turned off"
    ) in f.evidence
    assert "or the head dim kept it out" in f.evidence


def test_without_anything_to_go_on_it_asks_for_shapes() -> None:
    f = one(sdpa_job("efficient", dtype="bf16", cc=None), "attention.sdpa_efficient")
    assert "the capture has no input shapes: record the input shapes" in f.evidence
    assert f.fix.startswith("record the input shapes")


# -- what it costs against flash ------------------------------------------------------------
def test_with_shapes_the_cost_is_the_time_beyond_flashs() -> None:
    """3 forward calls of q 4x8x2048x64 fp32: 4·B·H·T²·d = 34.36 GFLOP each, the
    backward 2.5x that; flash at 30% of the H100's 989.5 bf16 TFLOP/s."""
    ev = sdpa_job("efficient", rows=rows(F32))
    f = one(ev, "attention.sdpa_efficient")
    flops = 3 * 4 * 32 * 2048**2 * 64 * 3.5
    flash_us = flops / (value("attention.flash_sm90") * 989.5e6)
    assert flash_us == pytest.approx(1_215.0, abs=1.0)
    assert f.impact_pct == pytest.approx((60_000.0 - flash_us) / TOTAL * 100, abs=0.1)
    assert "360.8 GFLOP would take flash about 1.2ms at 30% of the H100 SXM5 80GB's" in (f.evidence)


def test_is_causal_halves_the_flops_flash_would_run() -> None:
    f = one(sdpa_job("efficient", rows=rows(F32, causal=True)), "attention.sdpa_efficient")
    assert "their 180.4 GFLOP" in f.evidence


def test_the_math_backward_counts_at_the_forwards_time() -> None:
    row = sdpa_row(Q, BF16, causal=True, device_us=20_000.0)
    f = one(sdpa_job("math", rows=[row]), "attention.sdpa_math")
    assert "40.0ms of GPU time in the capture (its backward counted at the forward's time)" in (
        f.evidence
    )
    flops = 3 * 4 * 32 * 2048**2 * 64 / 2 * 3.5
    flash_us = flops / (value("attention.flash_sm90") * 989.5e6)
    assert f.impact_pct == pytest.approx((40_000.0 - flash_us) / TOTAL * 100, abs=0.1)
    inference = one(sdpa_job("math", rows=[row], training=False), "attention.sdpa_math")
    assert "its backward" not in inference.evidence


def test_calls_already_at_flashs_rate_are_not_a_finding() -> None:
    fast = rows(F32, fwd_us=300.0)  # 900 us in all, under flash's 1,215
    assert found(sdpa_job("efficient", rows=fast), "attention.sdpa_efficient") == []


def test_an_ampere_gpu_takes_flash_at_half_its_peak() -> None:
    f = one(sdpa_job("efficient", rows=rows(F32), cc="8.0", sheet=A100), "attention.sdpa_efficient")
    assert "at 50% of the A100 SXM4 80GB's 312.0 bf16 TFLOP/s" in f.evidence


@pytest.mark.parametrize(("dtype", "kept"), [("f32", 0.5), ("bf16", 1 / 3)])
def test_without_shapes_the_cost_is_a_documented_share_of_the_kernels(
    dtype: str, kept: float
) -> None:
    """fp32: flash in bf16 takes at most half the memory-efficient kernels'
    time (their products run 3xTF32); fp16/bf16: at most two thirds."""
    f = one(sdpa_job("efficient", dtype=dtype), "attention.sdpa_efficient")
    assert f.impact_pct == pytest.approx(60.0 * kept, abs=0.1)
    assert "of kernel time, and flash in bf16 would take at most" in f.evidence


def test_a_gpu_without_a_datasheet_costs_shaped_calls_by_the_ratio() -> None:
    f = one(sdpa_job("efficient", rows=rows(F32), sheet=None), "attention.sdpa_efficient")
    assert f.impact_pct == pytest.approx(30.0, abs=0.1)
    assert "no datasheet peak of this GPU to count the calls' FLOPs against" in f.evidence


def test_the_math_backend_without_shapes_costs_its_softmax_and_scores() -> None:
    """Softmax kernels 24% of kernel time and elementwise 12%: their sum with half
    the elementwise, of the busy time."""
    f = one(sdpa_job("math"), "attention.sdpa_math")
    assert f.impact_pct == pytest.approx(24.0 + 6.0, abs=0.1)


def test_the_roofline_leaves_attention_ops_to_the_attention_rules() -> None:
    """An SDPA op far under its roof gets no GEMM advice; a GEMM there still does."""
    from gputui.analysis.evidence import roofline_of

    sdpa = sdpa_row(Q, BF16, device_us=50_000.0)
    gemm = op_row("aten::mm", [[4096, 4096], [4096, 4096]], BF16, 3, 50_000.0)
    for row, speaks in ((sdpa, False), (gemm, True)):
        cap = capture([kernel(GEMM, "gemm", 10, TOTAL)], busy_us=TOTAL, op_rows=[row])
        ev = evidence(cap=cap, roof=H100)
        assert ev.roofline is not None and roofline_of([row], H100) is not None
        assert bool(found(ev, "roofline.below_roof")) == speaks


@pytest.mark.parametrize(("backend", "label"), [("cudnn", "cuDNN"), ("flash", "flash")])
def test_a_dominant_fast_attention_kernel_is_named_with_its_backend(
    backend: str, label: str
) -> None:
    f = one(sdpa_job(backend, dtype="bf16", attention_us=90_000.0), "kernels.top_kernel")
    assert f"SDPA's {label} backend, its fastest" in f.fix


# -- what SDPA's own ops show of its inputs -------------------------------------------------
def ranges(*spans: tuple[str, int, int]) -> list[HostRange]:
    return [HostRange(lo, hi, name, 1, OP, -1) for name, lo, hi in spans]


SDPA = ("aten::scaled_dot_product_attention", 0, 100)
EFFICIENT = ("aten::_scaled_dot_product_efficient_attention", 20, 90)
MATH = (MATH_OP, 10, 95)


@pytest.mark.parametrize(
    ("spans", "expected"),
    [
        # a float mask expanded for the kernel, before the backend op
        ([SDPA, ("aten::expand", 5, 8), EFFICIENT], {"mask"}),
        # a boolean mask made additive
        ([SDPA, ("aten::logical_not", 2, 4), ("aten::where", 5, 8), EFFICIENT], {"mask"}),
        # an expand inside the backend op is the kernel's own
        ([SDPA, EFFICIENT, ("aten::expand", 30, 31)], set()),
        # the math backend: is_causal's triangle, the casts, the mask it adds
        (
            [
                SDPA,
                MATH,
                ("aten::_to_copy", 11, 12),
                ("aten::tril", 13, 14),
                ("aten::add_", 50, 51),
            ],
            {"causal", "upcast"},
        ),
        (
            [SDPA, MATH, ("aten::add_", 50, 51), ("aten::native_dropout", 60, 61)],
            {"mask", "dropout"},
        ),
        # ops of the same name outside SDPA
        ([SDPA, EFFICIENT, ("aten::expand", 200, 201), ("aten::tril", 300, 301)], set()),
    ],
)
def test_sdpas_own_ops_show_its_inputs(spans: list[tuple[str, int, int]], expected: set) -> None:
    assert attention_inputs(ranges(*spans)) == expected


def test_the_markers_name_the_backends_and_their_inputs() -> None:
    timeline = Timeline(ranges=ranges(SDPA, ("aten::expand", 5, 8), EFFICIENT))
    mark = job_markers(timeline)
    assert mark.attention == ("efficient",) and mark.attention_inputs == ("mask",)
    again = JobMarkers.from_wire(mark.to_wire())
    assert again == mark
    older = {k: v for k, v in mark.to_wire().items() if k != "attention_inputs"}
    assert JobMarkers.from_wire(older).attention_inputs == ()
