"""Attention written by hand, and SDPA that ran off its fast kernels.

- ``attention.hand_written``: softmax kernels over a large share of the GPU
  time with matrix products around them and no fused attention anywhere: the
  T x T score matrix is written to memory and read back (several times, with the
  scale, the mask and the backward pass) where ``F.scaled_dot_product_attention``
  never materializes it.
- ``attention.sdpa_math``: ``scaled_dot_product_attention`` ran its math
  backend (``aten::_scaled_dot_product_attention_math``): the same T x T
  materialization, and the reason flash was not eligible where the recorded
  shapes and dtypes tell (torch's documented constraints for the flash kernel:
  fp16 or bf16 inputs, head dim at most 256 and a multiple of 8, no explicit
  mask beyond causal, sm 8.0 or newer).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gputui import fmt
from gputui.analysis import thresholds
from gputui.analysis.evidence import CaptureView, JobEvidence
from gputui.analysis.finding import Finding
from gputui.analysis.ledger import GPU_BUSY
from gputui.analysis.registry import finding, rule
from gputui.protocol.op_rows import OpRow
from gputui.trace import kernels

#: softmax kernels' share of kernel time from which attention is worth fusing
SOFTMAX_SHARE = thresholds.value("attention.softmax_share")
#: sequence length from which a materialized T x T score matrix costs
MIN_T = int(thresholds.value("attention.min_t"))
_SOFTMAX_KERNEL = re.compile(r"softmax", re.IGNORECASE)
_FUSED_KERNEL = re.compile(r"flash|fmha|sdpa|attention|mha_", re.IGNORECASE)
_SDPA_OPS = re.compile(
    r"^aten::(scaled_dot_product_attention|_scaled_dot_product_\w+|_flash_attention_\w+|"
    r"_efficient_attention_\w+|_cudnn_attention\w*)$"
)
_MATH_OP = "aten::_scaled_dot_product_attention_math"
_MATMUL_OPS = frozenset({"aten::bmm", "aten::matmul", "aten::mm", "aten::baddbmm"})
_DTYPE_BYTES = {"float": 4, "c10::Half": 2, "c10::BFloat16": 2, "double": 8}


def softmax_share(cap: CaptureView) -> float:
    """Softmax kernels' (forward and backward) share of all kernel time."""
    total = cap.kernel_total_us
    if total <= 0:
        return 0.0
    soft = sum(
        k.total_us
        for k in cap.kernels
        if _SOFTMAX_KERNEL.search(k.name) and not _FUSED_KERNEL.search(k.name)
    )
    return soft / total


def recoverable(cap: CaptureView) -> float:
    """What fusing the attention could recover, as a share of the step: the
    softmax kernels and half of the elementwise kernels (scale, mask, dropout,
    casts around the scores) of the GPU's busy time."""
    elementwise = cap.class_share(kernels.ELEMENTWISE)
    return min(1.0, softmax_share(cap) + 0.5 * elementwise) * (cap.busy_share or 0.0)


def fused_attention(cap: CaptureView) -> bool:
    """Any sign of a fused attention kernel or SDPA op in the capture."""
    return (
        cap.by_class_us.get(kernels.ATTENTION, 0.0) > 0
        or any(_SDPA_OPS.match(o.name) for o in cap.cpu_ops)
        or any(_SDPA_OPS.match(r.name) for r in cap.op_rows)
    )


def score_shapes(rows: Iterable[OpRow]) -> tuple[int, int] | None:
    """(T, bytes of one score matrix batch) of the largest ``q @ k^T``-shaped
    matmul among the op rows: [..., T, d] x [..., d, T] with T >= MIN_T."""
    best: tuple[int, int] | None = None
    for r in rows:
        if r.name not in _MATMUL_OPS or len(r.input_dims) < 2:
            continue
        a, b = r.input_dims[0], r.input_dims[1]
        if not a or not b or len(a) < 2 or len(b) < 2:
            continue
        t, d, d2, t2 = a[-2], a[-1], b[-2], b[-1]
        if d != d2 or t != t2 or t < MIN_T or d >= t:
            continue
        batch = 1
        for n in a[:-2]:
            batch *= n
        size = _DTYPE_BYTES.get(r.input_types[0] if r.input_types else "", 2)
        score = batch * t * t * size
        if best is None or score > best[1]:
            best = (t, score)
    return best


@rule(
    "attention.hand_written",
    "kernels",
    "attention as matmul -> softmax -> matmul materializes the T x T scores; "
    "F.scaled_dot_product_attention (flash, memory-efficient, cuDNN kernels) does not",
    ("capture",),
    trigger=(
        "capture or trace: softmax kernels >= {attention.softmax_share} of kernel time, "
        "matrix products present, no fused attention kernel or SDPA op (with shapes: a "
        "[..,T,d] x [..,d,T] matmul, T >= {attention.min_t}); cost: softmax plus half the "
        "elementwise kernels, of the GPU's busy time"
    ),
    bucket=GPU_BUSY,
)
def hand_written(ev: JobEvidence) -> Iterable[Finding]:
    cap = ev.capture
    if cap is None or not cap.kernel_total_us or fused_attention(cap):
        return []
    share = softmax_share(cap)
    if share < SOFTMAX_SHARE or cap.class_share(kernels.GEMM) <= 0:
        return []
    shapes = score_shapes(cap.op_rows)
    if cap.op_rows and shapes is None:
        return []  # shapes recorded, and no T x T product among them: not attention
    evidence = (
        f"softmax kernels take {share * 100:.0f}% of kernel time beside the matrix "
        "products, with no fused attention kernel"
    )
    if shapes is not None:
        t, score = shapes
        evidence += f"; a T x T score matrix at T = {t:,}: {fmt.size(score)} per product"
    else:
        evidence += " (record shapes to see the sequence length)"
    return [
        finding(
            ev,
            "attention.hand_written",
            "attention is written by hand: the T x T scores go through memory",
            evidence,
            "replace softmax(q @ k.transpose(-2, -1) / sqrt(d)) @ v with "
            "torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=...) in "
            "bf16/fp16: its flash kernel never materializes the scores (memory O(T) not "
            "O(T^2), several times faster at T >= 1024)",
            "the softmax kernels leave the capture; flash/sdpa kernels appear",
            share=recoverable(cap),
        )
    ]


def _math_reasons(ev: JobEvidence, rows: Iterable[OpRow]) -> list[str]:
    """Why flash attention was likely not eligible, from the SDPA op's recorded
    inputs (query, key, value, attn_mask, ...)."""
    reasons: list[str] = []
    for r in rows:
        if not _SDPA_OPS.match(r.name) or not r.input_dims:
            continue
        dtype = r.input_types[0] if r.input_types else ""
        if dtype == "float":
            reasons.append("fp32 inputs (flash needs fp16 or bf16: autocast)")
        q = r.input_dims[0]
        if q:
            head = q[-1]
            if head > 256:
                reasons.append(f"head dim {head} > 256")
            elif head % 8:
                reasons.append(f"head dim {head} not a multiple of 8")
        if len(r.input_dims) > 3 and r.input_dims[3]:
            reasons.append("an explicit attn_mask (use is_causal=True for a causal mask)")
        break
    cc = ev.compute_capability
    try:
        if cc and float(cc) < 8.0:
            reasons.append(f"compute capability {cc} (flash needs 8.0 or newer)")
    except ValueError:
        pass
    return reasons


@rule(
    "attention.sdpa_math",
    "kernels",
    "PyTorch's SDPA picks flash, memory-efficient, cuDNN or the math backend; math "
    "materializes the T x T scores",
    ("capture",),
    trigger=(
        "capture or trace: aten::_scaled_dot_product_attention_math ran; the reason from "
        "the recorded dtype, head dim, mask and GPU where the trace has shapes; cost: "
        "softmax plus half the elementwise kernels, of the GPU's busy time"
    ),
    bucket=GPU_BUSY,
)
def sdpa_math(ev: JobEvidence) -> Iterable[Finding]:
    cap = ev.capture
    if cap is None:
        return []
    math_op = cap.op(_MATH_OP)
    in_rows = [r for r in cap.op_rows if r.name == _MATH_OP]
    if math_op is None and not in_rows:
        return []
    calls = math_op.calls if math_op is not None else sum(r.calls for r in in_rows)
    share = softmax_share(cap)
    reasons = _math_reasons(ev, cap.op_rows)
    why = (
        "; likely not flash because of " + ", ".join(reasons)
        if reasons
        else ("; the reason is unknown without recorded shapes (record_shapes=True)")
    )
    return [
        finding(
            ev,
            "attention.sdpa_math",
            "scaled_dot_product_attention ran its math backend",
            f"{_MATH_OP} x{calls}: the T x T scores are materialized; softmax kernels "
            f"{share * 100:.0f}% of kernel time" + why,
            "make the call eligible for flash: bf16/fp16 inputs (autocast), head dim <= 256 "
            "and a multiple of 8, is_causal=True instead of a causal attn_mask; drop any "
            "sdpa_kernel(SDPBackend.MATH) context or enable_flash_sdp(False)",
            "flash or cudnn sdpa kernels appear in the capture and the softmax kernels leave",
            share=recoverable(cap),
        )
    ]
