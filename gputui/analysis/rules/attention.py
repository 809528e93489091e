"""Attention written by hand, and scaled_dot_product_attention off its flash kernel.

- ``attention.hand_written``: softmax kernels over a large share of the GPU
  time with matrix products around them and no fused attention anywhere: the
  T x T score matrix is written to memory and read back (several times, with the
  scale, the mask and the backward pass) where ``F.scaled_dot_product_attention``
  never materializes it.
- ``attention.sdpa_math`` and ``attention.sdpa_efficient``: SDPA ran its math
  backend (the same T x T materialization) or its memory-efficient kernels
  (fused, but slower than flash), not flash or cuDNN.  Each names the backend
  (from the ops and the kernel names, :mod:`gputui.trace.markers`), says why
  flash was not chosen from what the evidence holds, and costs the calls
  against what flash would take.

Why flash was not chosen follows torch's own checks
(``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp``, ``can_use_flash_attention``),
those the evidence can show:

- the dtype: flash takes fp16 and bf16 only (the op's input types, or the
  memory-efficient kernels' names: ``fmha_cutlassF_f32_…`` ran fp32; the math
  backend copying its inputs to fp32 shows they were 16-bit);
- a mask: flash takes no ``attn_mask`` (the op's inputs; without shapes, the
  ops SDPA runs to prepare one); a causal mask is ``is_causal=True``;
- the head dim: at most 256, the same for q, k and v (on sm 8.6, 8.9 and 12.x
  with a backward, at most 192, or up to 256 without dropout);
- ``is_causal`` with query and key lengths that differ;
- the GPU: flash needs sm 8.0 or newer.
A head dim that is not a multiple of 8 does not keep flash out (torch pads it);
it keeps out the memory-efficient kernel in fp16/bf16 (and cuDNN), which is why
the math backend ran.  Dropout keeps flash out only in the case above.  When
the recorded shapes show none of these, flash was turned off
(``sdpa_kernel``, ``enable_flash_sdp(False)``) or the inputs' layout kept it
out; without shapes, the finding says to record them.

The cost: with input shapes, the calls' GPU time less what their FLOPs (forward
4·B·H·Tq·Tk·d, halved when causal; backward 2.5 times that: flash's backward
runs five T x T products to the forward's two) take at flash's rate, a share of
the GPU's datasheet bf16 peak (``attention.flash_sm80``, ``attention.flash_sm90``:
below the rates FlashAttention-2 is published at, so the time flash would take
is if anything too long, and the cost too low).  The math backend's backward is
no one op: it counts at its forward's time (it runs twice the forward's
products).  Without shapes, or on a GPU the datasheet table does not know, the
memory-efficient kernels' time less what flash would take at a documented
ratio (:data:`SPEEDUP_FP32`, :data:`SPEEDUP_HALF`), and for the math backend its
softmax kernels and half its elementwise kernels (scale, mask, casts), which no
fused kernel runs.  Costs claim the GPU's busy time.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from gputui import fmt
from gputui.analysis import thresholds
from gputui.analysis.evidence import CaptureView, JobEvidence
from gputui.analysis.finding import Finding
from gputui.analysis.ledger import GPU_BUSY
from gputui.analysis.registry import finding, rule
from gputui.protocol.op_rows import OpRow
from gputui.protocol.value import ValueBase, value_class
from gputui.trace import kernels, op_costs
from gputui.trace.markers import kernel_backend, op_backend

#: softmax kernels' share of kernel time from which attention is worth fusing
SOFTMAX_SHARE = thresholds.value("attention.softmax_share")
#: sequence length from which a materialized T x T score matrix costs
MIN_T = int(thresholds.value("attention.min_t"))
#: the share of the datasheet's dense bf16 peak that flash reaches, by architecture
FLASH_SM80 = thresholds.value("attention.flash_sm80")
FLASH_SM90 = thresholds.value("attention.flash_sm90")
#: without input shapes: how many times faster bf16 flash runs what the
#: memory-efficient kernels ran.  fp32 inputs: those kernels multiply fp32 with
#: three TF32 products each (cutlass's OpMultiplyAddFastF32, PyTorch's
#: ``mem_eff_attention/gemm_kernel_utils.h``), a third of the TF32 tensor-core
#: rate and a sixth of bf16's (H100 SXM datasheet: 494.5 and 989.5 TFLOP/s
#: dense); 2x leaves the softmax and the memory traffic, which gain less, out
#: of the claim.  fp16/bf16 inputs: 1.5x, under the 1.82x of PyTorch's SDPA
#: tutorial (fp16: flash 2,305 us, memory-efficient 4,197 us).
SPEEDUP_FP32 = 2.0
SPEEDUP_HALF = 1.5
#: the backend names the findings use
LABELS = {"flash": "flash", "efficient": "memory-efficient", "cudnn": "cuDNN", "math": "math"}
#: the backends that need no advice: flash, and cuDNN (torch's first choice on
#: sm 9.0 and 10.x, as fast)
FAST = ("cudnn", "flash")
PUBLIC_OP = "aten::scaled_dot_product_attention"
MATH_OP = "aten::_scaled_dot_product_attention_math"
_SOFTMAX_KERNEL = re.compile(r"softmax", re.IGNORECASE)
_FUSED_KERNEL = re.compile(r"flash|fmha|sdpa|attention|mha_", re.IGNORECASE)
_SDPA_OPS = re.compile(
    r"^aten::(scaled_dot_product_attention|_scaled_dot_product_\w+|_flash_attention_\w+|"
    r"_efficient_attention_\w+|_cudnn_attention\w*)$"
)
_MATMUL_OPS = frozenset({"aten::bmm", "aten::matmul", "aten::mm", "aten::baddbmm"})
_DTYPE_BYTES = {"float": 4, "c10::Half": 2, "c10::BFloat16": 2, "double": 8}
_HALF = frozenset({"c10::Half", "c10::BFloat16"})
#: the memory-efficient kernels' dtype, in their generated names
_EFFICIENT_DTYPE = re.compile(r"fmha_cutlass[FB]_(f32|f16|bf16)_")
#: flash's backward on these architectures takes a head dim of at most 192, or
#: 225 to 256 without dropout (sdp_utils.cpp)
_SMALL_SMEM = ("8.6", "8.7", "8.8", "8.9", "12.0", "12.1")
#: what to record for the shapes, live and in a trace
RECORD = "record the input shapes (record_shapes=True; gputui attach PID --capture N --shapes)"


def softmax_share(cap: CaptureView) -> float:
    """Softmax kernels' (forward and backward) share of all kernel time."""
    return cap.name_share(
        lambda name: bool(_SOFTMAX_KERNEL.search(name)) and not _FUSED_KERNEL.search(name)
    )


def recoverable(cap: CaptureView) -> float:
    """What fusing the attention could recover, as a share of the step: the
    softmax kernels and half of the elementwise kernels (scale, mask, dropout,
    casts around the scores) of the GPU's busy time."""
    elementwise = cap.class_share(kernels.ELEMENTWISE)
    return min(1.0, softmax_share(cap) + 0.5 * elementwise) * (cap.busy_share or 0.0)


def fused_attention(cap: CaptureView) -> bool:
    """Any sign of a fused attention kernel or SDPA op in the capture."""
    return (
        cap.class_us(kernels.ATTENTION) > 0
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
            "O(T^2), several times faster at T >= 1024); a Hugging Face model runs this "
            'attention when loaded with attn_implementation="eager" (or asked for '
            'output_attentions=True): load it with attn_implementation="sdpa"',
            "the softmax kernels leave the capture; flash/sdpa kernels appear",
            share=recoverable(cap),
        )
    ]


# -- scaled_dot_product_attention: which backend, why not flash, at what cost ----------------
@value_class
class SdpaCall(ValueBase):
    """One SDPA op row (one input signature over its calls), from its shapes."""

    row: OpRow
    backward: bool
    q: tuple[int, ...]
    k: tuple[int, ...]
    v: tuple[int, ...]
    dtype: str  #: the query's type name as the profiler records it ("c10::BFloat16")
    mask: tuple[int, ...] | None  #: the attn_mask's shape; None: no mask
    causal: bool | None  #: is_causal (from the FLOPs the row was counted with)

    @property
    def flops(self) -> float | None:
        """All the row's calls' FLOPs (the row's own, else from the shapes)."""
        if self.row.flops:
            return self.row.flops
        one = op_costs.estimate_flops(self.row.name, self.row.input_dims, self.row.input_types)
        return None if one is None else one * self.row.calls


def sdpa_call(row: OpRow) -> SdpaCall | None:
    """The SDPA call an op row records (None: not an attention op with q, k and
    v shapes)."""
    name = row.name
    if (
        name not in op_costs.ATTENTION_FWD
        and name not in op_costs.ATTENTION_BWD
        and name != MATH_OP
    ):
        return None
    qkv = op_costs.attention_dims(name, row.input_dims, row.input_types)
    if qkv is None:
        return None
    backward = name in op_costs.ATTENTION_BWD
    at = op_costs.ATTENTION_MASK.get(name)
    mask = None if at is None else op_costs.tensor_shape(row.input_dims, row.input_types, at)
    causal: bool | None = None
    full = op_costs.estimate_flops(name, row.input_dims, row.input_types)
    if row.flops and full and row.calls:
        one = row.flops / row.calls  # counted with is_causal: half the full count
        if abs(2 * one - full) <= 1e-6 * full:
            causal = True
        elif abs(one - full) <= 1e-6 * full:
            causal = False
    return SdpaCall(
        row=row,
        backward=backward,
        q=qkv[0],
        k=qkv[1],
        v=qkv[2],
        dtype=row.input_types[1 if backward else 0],
        mask=mask,
        causal=causal,
    )


def _cc(ev: JobEvidence) -> float | None:
    try:
        return float(ev.compute_capability) if ev.compute_capability else None
    except ValueError:
        return None


def _dtype_name(type_name: str) -> str:
    return op_costs.family(type_name) or fmt.clean(type_name, 24) or "non-float"


def flash_blockers(call: SdpaCall, ev: JobEvidence) -> list[str]:
    """Why flash could not take this call, from its shapes and the GPU
    (torch's ``can_use_flash_attention``, the checks a trace can show)."""
    out: list[str] = []
    if call.dtype not in _HALF:
        out.append(f"{_dtype_name(call.dtype)} inputs (flash takes fp16 or bf16)")
    if call.mask is not None:
        shape = "x".join(str(n) for n in call.mask) or "a scalar"
        square = call.mask[-2:] == (call.q[-2], call.k[-2]) and call.q[-2] == call.k[-2]
        causal = "; if it is the causal triangle, is_causal=True takes its place" if square else ""
        out.append(f"an attn_mask ({shape}: flash takes none{causal})")
    dq, dk, dv = call.q[-1], call.k[-1], call.v[-1]
    if not dq == dk == dv:
        out.append(f"head dims that differ (q {dq}, k {dk}, v {dv}: flash needs one)")
    elif dq > 256:
        out.append(f"head dim {dq} (flash takes at most 256)")
    cc, major = ev.compute_capability, _cc(ev)
    if major is not None and major < 8.0:
        out.append(f"the GPU's sm {fmt.clean(cc, 8)} (flash needs sm 8.0 or newer)")
    elif cc in _SMALL_SMEM and ev.context.training and 192 < dq <= 256:
        dropout = "dropout" in ev.context.attention_inputs
        if dq <= 224 or dropout:
            out.append(
                f"head dim {dq} with a backward on sm {cc} (flash's backward there takes at "
                "most 192, or 225-256 without dropout)"
            )
    if call.causal and call.q[-2] != call.k[-2]:
        out.append(
            f"is_causal with {call.q[-2]:,} queries and {call.k[-2]:,} keys (flash takes "
            "is_causal only for equal lengths)"
        )
    return out


def efficient_blockers(call: SdpaCall, ev: JobEvidence) -> list[str]:
    """Why the memory-efficient kernel could not take this call either (what
    sends SDPA to its math backend), from its shapes: its dtypes, and a head dim
    its tensor-core tiles divide (8 for fp16/bf16; 4 for fp32 on sm 8.0 and
    newer, where fp32 runs on the tensor cores too)."""
    if call.dtype not in _HALF and call.dtype != "float":
        return [f"{_dtype_name(call.dtype)} inputs (no fused kernel takes them)"]
    major = _cc(ev)
    align = 8 if call.dtype in _HALF else (4 if major is None or major >= 8.0 else 1)
    if call.q[-1] % align or call.v[-1] % align:
        return [
            f"head dim {call.q[-1]} not a multiple of {align} (the memory-efficient and cuDNN "
            "kernels need it)"
        ]
    return []


def backends_seen(ev: JobEvidence) -> set[str]:
    """The SDPA backends that ran: the job's markers, the CPU ops and op rows,
    the kernels."""
    seen = set(ev.context.attention)
    cap = ev.capture
    if cap is not None:
        seen.update(b for o in cap.cpu_ops if (b := op_backend(o.name)))
        seen.update(b for r in cap.op_rows if (b := op_backend(r.name)))
        seen.update(b for k in cap.kernels if (b := kernel_backend(k.name)))
    return seen


def owner(call: SdpaCall, seen: set[str], ev: JobEvidence) -> str | None:
    """The backend that ran a call: its op's own, else (the public op) the only
    one that ran, else the one its blockers leave."""
    own = op_backend(call.row.name)
    if own is not None:
        return own
    if len(seen) == 1:
        return next(iter(seen))
    if "math" in seen and efficient_blockers(call, ev):
        return "math"
    if flash_blockers(call, ev):
        return "efficient" if "efficient" in seen else ("math" if "math" in seen else None)
    return next((b for b in FAST if b in seen), None)


@value_class
class Cost(ValueBase):
    """What a backend's calls cost against flash: a share of the step, and the
    words that say how it was reckoned."""

    share: float
    words: str


def flash_rate(ev: JobEvidence) -> tuple[float, float] | None:
    """(TFLOP/s flash reaches on the job's GPU, the share of the peak taken);
    None for a GPU without a datasheet bf16 peak."""
    sheet = ev.datasheet
    peak = None if sheet is None else sheet.tflops("bf16")
    if not peak:
        return None
    cc = _cc(ev)
    eff = FLASH_SM80 if cc is not None and cc < 9.0 else FLASH_SM90
    return eff * peak, eff


def shaped_cost(
    ev: JobEvidence, cap: CaptureView, backend: str, calls: Sequence[SdpaCall]
) -> Cost | None:
    """The calls' GPU time less what their FLOPs take at flash's rate (None
    without a rate or without a call that has FLOPs)."""
    rate = flash_rate(ev)
    counted = [c for c in calls if c.flops]
    if rate is None or not counted or not cap.kernel_total_us:
        return None
    tflops, eff = rate
    took = sum(c.row.device_us for c in counted)
    flops = sum(c.flops or 0.0 for c in counted)
    note = ""
    if backend == "math" and ev.context.training and not any(c.backward for c in counted):
        forward = [c for c in counted if not c.backward]
        took += sum(c.row.device_us for c in forward)  # the backward, at the forward's time
        flops += 2.5 * sum(c.flops or 0.0 for c in forward)
        note = " (its backward counted at the forward's time)"
    flash_us = flops / (tflops * 1e6)
    lost = took - flash_us
    if lost <= 0:
        return Cost(0.0, "")
    sheet = ev.datasheet
    label = "" if sheet is None else sheet.label.removesuffix(" datasheet") + "'s "
    words = (
        f"these calls take {fmt.us(took)} of GPU time in the capture{note}, "
        f"{took / cap.kernel_total_us * 100:.0f}% of kernel time; their "
        f"{flops / 1e9:,.1f} GFLOP would take flash about {fmt.us(flash_us)} at "
        f"{eff * 100:.0f}% of the {label}{tflops / eff:,.1f} bf16 TFLOP/s"
    )
    return Cost(lost / cap.kernel_total_us * (cap.busy_share or 0.0), words)


def efficient_kernels(cap: CaptureView) -> tuple[float, str | None]:
    """The memory-efficient kernels' time (us) and their dtype ("f32", "bf16",
    "f16"; None when the names do not say)."""
    rows = [k for k in cap.kernels if kernel_backend(k.name) == "efficient"]
    dtypes = {m.group(1) for k in rows if (m := _EFFICIENT_DTYPE.search(k.name))}
    dtype = "f32" if "f32" in dtypes else (next(iter(dtypes)) if len(dtypes) == 1 else None)
    return sum(k.total_us for k in rows), dtype


def unshaped_cost(cap: CaptureView, backend: str, shaped: bool) -> Cost:
    """Without shapes (``shaped``: with them, but no datasheet peak to count
    their FLOPs against): the memory-efficient kernels' time less what flash
    takes at the documented ratio; the math backend's softmax and half its
    elementwise kernels."""
    if backend == "math":
        return Cost(
            recoverable(cap),
            f"softmax kernels take {softmax_share(cap) * 100:.0f}% of kernel time; they and "
            "the scale, mask and cast kernels around them are what a fused kernel does not "
            "run (cost: the softmax kernels and half the elementwise ones)",
        )
    us, dtype = efficient_kernels(cap)
    speedup = SPEEDUP_FP32 if dtype == "f32" else SPEEDUP_HALF
    share = us / cap.kernel_total_us if cap.kernel_total_us else 0.0
    why = (
        "in fp32 their products run at a sixth of the bf16 tensor-core rate"
        if dtype == "f32"
        else "PyTorch's SDPA tutorial measured flash 1.8x as fast in fp16"
    )
    how = (
        "no datasheet peak of this GPU to count the calls' FLOPs against"
        if shaped
        else "with input shapes the cost is counted from the calls' FLOPs"
    )
    return Cost(
        share * (1.0 - 1.0 / speedup) * (cap.busy_share or 0.0),
        f"the memory-efficient kernels take {share * 100:.0f}% of kernel time, and flash in "
        f"bf16 would take at most {1 / speedup:.0%} of that: {why} ({how})",
    )


def unshaped_reasons(ev: JobEvidence, cap: CaptureView, backend: str) -> list[str]:
    """Why flash was not chosen, from what a capture without shapes holds: the
    memory-efficient kernels' dtype, the ops SDPA ran on a mask, the math
    backend's casts, the GPU."""
    out: list[str] = []
    inputs = ev.context.attention_inputs
    if backend == "efficient" and efficient_kernels(cap)[1] == "f32":
        out.append("fp32 inputs (the memory-efficient kernels ran fp32: flash takes fp16 or bf16)")
    if "mask" in inputs:
        out.append("an attn_mask (SDPA prepared one for its kernel: flash takes none)")
    cc = _cc(ev)
    if cc is not None and cc < 8.0:
        out.append(
            f"the GPU's sm {fmt.clean(ev.compute_capability, 8)} (flash needs sm 8.0 or newer)"
        )
    return out


def unshaped_suits(ev: JobEvidence, backend: str) -> list[str]:
    """What a capture without shapes shows does suit flash (the math backend's
    own ops tell the dtype and is_causal)."""
    out: list[str] = []
    inputs = ev.context.attention_inputs
    if backend == "math" and "upcast" in inputs:
        out.append("16-bit inputs (the math backend cast them to fp32)")
    if backend == "math" and "causal" in inputs and "mask" not in inputs:
        out.append("is_causal=True with no mask")
    cc = _cc(ev)
    if cc is not None and cc >= 8.0:
        out.append(f"sm {fmt.clean(ev.compute_capability, 8)}")
    return out


def _fix(reasons: Sequence[str], shaped: bool) -> str:
    """The change that lets flash run, for the reasons found (``shaped``: the
    calls' shapes were recorded)."""
    parts: list[str] = []
    text = " ".join(reasons)
    if "inputs (flash takes fp16 or bf16)" in text or "fp32 inputs" in text:
        parts.append(
            "run the attention in bf16: torch.autocast('cuda', dtype=torch.bfloat16) around "
            "the model, or q, k, v .to(torch.bfloat16)"
        )
    if "causal triangle" in text:
        parts.append(
            "pass is_causal=True instead of a causal attn_mask (any other mask keeps flash out)"
        )
    elif "attn_mask" in text:
        parts.append(
            "drop the attn_mask: a causal one is is_causal=True; a padding mask that pads "
            "nothing can go, otherwise pack the sequences (nested tensors)"
        )
    if "head dim" in text:
        parts.append("keep the head dim at most 256 and the same for q, k and v")
    if "is_causal with" in text:
        parts.append("give is_causal calls equal query and key lengths (or pass the mask)")
    if "sm " in text and "flash needs" in text:
        parts.append(
            "flash needs an sm 8.0 (Ampere) or newer GPU; here use fp16 inputs so the "
            "memory-efficient kernel can run"
        )
    if not parts and shaped:
        parts.append(
            "let SDPA choose flash: remove sdpa_kernel(...) contexts without "
            "SDPBackend.FLASH_ATTENTION and torch.backends.cuda.enable_flash_sdp(False); make "
            "q, k, v contiguous in their last dimension"
        )
    elif not parts:
        parts.append(
            f"{RECORD} to see why, and make the calls eligible for flash: fp16/bf16 inputs, no "
            "attn_mask (is_causal=True for a causal one), head dim <= 256; remove "
            "sdpa_kernel(...) contexts without SDPBackend.FLASH_ATTENTION and "
            "torch.backends.cuda.enable_flash_sdp(False)"
        )
    return "; ".join(parts)


def _why(
    ev: JobEvidence, cap: CaptureView, backend: str, calls: Sequence[SdpaCall]
) -> tuple[list[str], str]:
    """(the reasons flash was not chosen, the sentence that gives them)."""
    if calls:
        said: dict[str, str] = {}  # one reason of a kind ("an attn_mask"), the forward's first
        fused = False  # what kept the memory-efficient kernel out (the math backend)
        for c in sorted(calls, key=lambda c: c.backward):
            found = flash_blockers(c, ev)
            if backend == "math":  # what kept the memory-efficient kernel out says more
                out = efficient_blockers(c, ev)
                fused = fused or bool(out)
                found = out + found
            for r in found:
                said.setdefault(r.split(" (", 1)[0], r)
        reasons = list(said.values())
        if reasons:
            text = "flash is out because of " + "; ".join(reasons)
            if backend == "math" and not fused:
                text += (
                    "; nothing recorded keeps the memory-efficient kernel out: it was turned "
                    "off (sdpa_kernel(SDPBackend.MATH), enable_mem_efficient_sdp(False)) or an "
                    "input is a view at a misaligned offset"
                )
            return reasons, text
        return [], (
            "nothing in the recorded shapes, dtypes or GPU keeps flash out: it was turned off "
            "(an sdpa_kernel(...) context without SDPBackend.FLASH_ATTENTION, "
            "torch.backends.cuda.enable_flash_sdp(False)), or q, k, v are views whose last "
            "dimension is not contiguous"
        )
    reasons = unshaped_reasons(ev, cap, backend)
    if reasons:
        return reasons, (
            "flash is out because of "
            + "; ".join(reasons)
            + f"; {RECORD} to see the head dim as well"
        )
    suits = unshaped_suits(ev, backend)
    if suits:
        other = (
            "the head dim" if "causal" in ev.context.attention_inputs else "the head dim or a mask"
        )
        return [], (
            f"{', '.join(suits)} all suit flash: it was turned off (an sdpa_kernel(...) "
            f"context, torch.backends.cuda.enable_flash_sdp(False)), or {other} kept it out; "
            f"{RECORD} to tell"
        )
    return [], f"the capture has no input shapes: {RECORD} to see why flash was not chosen"


def _ran(cap: CaptureView, backend: str, calls: Sequence[SdpaCall]) -> str:
    """What ran: the calls with their shapes, else the backend's op or kernels."""
    forward = [c for c in calls if not c.backward]
    if forward:
        top = max(forward, key=lambda c: c.row.calls)
        n = sum(c.row.calls for c in forward)
        q = "x".join(str(d) for d in top.q)
        more = f" and {len(forward) - 1} other shapes" if len(forward) > 1 else ""
        return (
            f"{n:,} calls of scaled_dot_product_attention (q {q} {_dtype_name(top.dtype)}{more}) "
            f"ran on its {LABELS[backend]} backend"
        )
    if backend == "math":
        op = cap.op(MATH_OP)
        times = f" x{op.calls:,}" if op is not None else ""
        return f"scaled_dot_product_attention ran its math backend ({MATH_OP}{times})"
    names = [
        kernels.short_kernel_name(k.name)
        for k in sorted(cap.kernels, key=lambda k: -k.total_us)
        if kernel_backend(k.name) == backend
    ]
    shown = f" ({', '.join(names[:2])})" if names else ""
    return f"scaled_dot_product_attention ran its {LABELS[backend]} kernels{shown}"


def sdpa_findings(ev: JobEvidence, rule_id: str, backend: str) -> list[Finding]:
    """The finding of a backend other than flash and cuDNN that ran: which, why
    flash was not chosen, what it costs against flash."""
    cap = ev.capture
    if cap is None or not cap.kernel_total_us:
        return []
    seen = backends_seen(ev)
    if backend not in seen:
        return []
    cc = _cc(ev)
    if backend == "efficient" and cc is not None and cc < 8.0:
        return []  # no flash on this GPU: the memory-efficient kernel is SDPA's fastest
    if backend == "efficient" and any(o.name.startswith("hip") for o in cap.cpu_ops):
        return []  # ROCm: flash and memory-efficient run the same AOTriton kernels
    mine = [
        c for r in cap.op_rows if (c := sdpa_call(r)) is not None and owner(c, seen, ev) == backend
    ]
    reasons, why = _why(ev, cap, backend, mine)
    cost = shaped_cost(ev, cap, backend, mine)
    if cost is not None and cost.share <= 0:
        return []  # these calls already run at flash's rate
    if cost is None:
        cost = unshaped_cost(cap, backend, bool(mine))
    also = [LABELS[b] for b in sorted(seen - {backend})]
    beside = f" (and {', '.join(also)} for others)" if also else ""
    title = (
        "scaled_dot_product_attention ran its math backend: the T x T scores go through memory"
        if backend == "math"
        else "scaled_dot_product_attention ran its memory-efficient kernels, not flash"
    )
    return [
        finding(
            ev,
            rule_id,
            title,
            f"{_ran(cap, backend, mine)}{beside}; {why}; {cost.words}",
            _fix(reasons, bool(mine))
            + (
                "; let SDPA choose its fused kernels: remove sdpa_kernel(SDPBackend.MATH) "
                "contexts and torch.backends.cuda.enable_mem_efficient_sdp(False)"
                if "enable_mem_efficient_sdp(False)" in why
                else ""
            ),
            "flash (pytorch_flash::flash_fwd_kernel) or cuDNN (cudnn_generated_fort_native_sdpa…) "
            f"kernels replace the {LABELS[backend]} ones in the next capture, and their time falls",
            share=cost.share,
        )
    ]


@rule(
    "attention.sdpa_math",
    "kernels",
    "PyTorch's SDPA picks flash, memory-efficient, cuDNN or the math backend "
    "(sdp_utils.cpp); math materializes the T x T scores",
    ("capture",),
    trigger=(
        "capture or trace: SDPA's math backend ran (aten::_scaled_dot_product_attention_math); "
        "why flash and the memory-efficient kernel were not chosen from the shapes, dtypes, "
        "mask and GPU (without shapes: from the ops SDPA ran); cost: with shapes, the calls' "
        "GPU time (the backward at the forward's) less their FLOPs at flash's rate "
        "({attention.flash_sm80} of the datasheet bf16 peak on sm 8.x, {attention.flash_sm90} "
        "on sm 9.0 and newer), else the softmax kernels and half the elementwise ones"
    ),
    bucket=GPU_BUSY,
)
def sdpa_math(ev: JobEvidence) -> Iterable[Finding]:
    return sdpa_findings(ev, "attention.sdpa_math", "math")


@rule(
    "attention.sdpa_efficient",
    "kernels",
    "PyTorch's SDPA picks flash, memory-efficient, cuDNN or the math backend "
    "(sdp_utils.cpp); flash is the fastest where its constraints hold (FlashAttention-2)",
    ("capture",),
    trigger=(
        "capture or trace: SDPA's memory-efficient kernels ran (fmha_cutlass*, "
        "aten::_efficient_attention_*) on sm 8.0 or newer (not on ROCm, where both backends "
        "run the same kernels); why flash was not chosen from the "
        "shapes, dtypes, mask and GPU (without shapes: the kernels' dtype, the ops SDPA ran on "
        "a mask); cost: with shapes, the calls' GPU time less their FLOPs at flash's rate "
        "({attention.flash_sm80} of the datasheet bf16 peak on sm 8.x, {attention.flash_sm90} "
        "on sm 9.0 and newer; quiet when they run faster), else half the kernels' time for "
        "fp32 inputs, a third for fp16/bf16"
    ),
    bucket=GPU_BUSY,
)
def sdpa_efficient(ev: JobEvidence) -> Iterable[Finding]:
    return sdpa_findings(ev, "attention.sdpa_efficient", "efficient")
