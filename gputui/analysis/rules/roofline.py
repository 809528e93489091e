"""Rules over the roofline: the top ops of a capture recorded with FLOPs and
shapes, each placed against the GPU's ceilings (measured by ``gputui bench``, else
the datasheet).

An op below the balance point is bound by memory bandwidth, above it by the
compute ceiling of its dtype; its efficiency is its achieved rate against what its
arithmetic intensity allows (``min(peak, intensity × bandwidth)``).  The time a
fix could recover is the time the op would save at a reachable efficiency
(:data:`TARGET_PCT`), never the whole distance to the ceiling.

Attention ops are left to the attention rules (``attention.sdpa_*``): the best
attention kernels reach a third to a half of the tensor-core peak, so their
distance to the roof is no fault to fix, and a slower backend's time is costed
there against flash.
"""

from __future__ import annotations

from collections.abc import Iterable

from gputui import fmt
from gputui.analysis.evidence import JobEvidence
from gputui.analysis.finding import Finding
from gputui.analysis.ledger import GPU_BUSY
from gputui.analysis.registry import finding, rule
from gputui.analysis.roofline import COMPUTE, MEMORY, OpRoofline, RooflineReport
from gputui.analysis.rules.efficiency import tensor_core_precisions
from gputui.analysis.severity import INFO
from gputui.trace import op_costs

#: an op with this share of the ranked ops' GPU time is worth a look
OP_SHARE = 0.15
#: ... when it reaches less than this % of what its intensity allows
BELOW_ROOF_PCT = 40.0
#: the efficiency a tuned op reaches (large bf16 GEMMs reach 75-80% of the datasheet
#: on an H100; copies and fused pointwise ops 70-90% of the HBM bandwidth): the
#: recoverable time is measured to it
TARGET_PCT = 70.0
#: memory-bound ops' share of the ranked ops' GPU time that makes the step memory-bound
MEMORY_BOUND_SHARE = 0.6
#: tensor-core tiles: dims of 16-bit GEMMs should be multiples of this (16 for fp8)
ALIGN = {"bf16": 8, "fp16": 8, "fp8": 16, "tf32": 4, "fp32": 4}

CONFIRM = (
    "capture again with FLOPs (attach screen: l, then p; or attach --capture N --flops): "
    "the op's % of its roof rises and its GPU time falls"
)


def _report(ev: JobEvidence) -> RooflineReport | None:
    report = ev.roofline
    if report is None or not report.ops or report.device_us <= 0:
        return None
    return report


def _recoverable_us(op: OpRoofline) -> float:
    if op.pct_of_ceiling is None or op.pct_of_ceiling >= TARGET_PCT:
        return 0.0
    return op.device_us * (1.0 - op.pct_of_ceiling / TARGET_PCT)


def _step_share(ev: JobEvidence, us: float) -> float | None:
    cap = ev.capture
    return None if cap is None else cap.span_share(us)


def _misaligned(op: OpRoofline, family: str | None) -> list[int]:
    """Sizes of a matrix product's inputs that tensor-core tiles do not divide."""
    align = ALIGN.get(family or "")
    if align is None or op.bytes_rule != op_costs.MATMUL:
        return []
    sizes: list[int] = []
    for part in op.shapes.split(" · "):
        for text in part.split("x"):
            if text.isdigit() and int(text) % align and int(text) not in sizes:
                sizes.append(int(text))
    return sizes


def _where(op: OpRoofline) -> str:
    shapes = f" {op.shapes}" if op.shapes else ""
    dtype = f" {op.dtype}" if op.dtype else ""
    return f"{fmt.clean(op.name)}{fmt.clean(shapes)}{dtype}"


@rule(
    "roofline.below_roof",
    "roofline",
    "roofline: achieved FLOP/s against min(peak, intensity x bandwidth); workflow: "
    "micro-benchmark the hot op against the ceiling",
    ("capture",),
    trigger=(
        f"capture with FLOPs: an op with >= {OP_SHARE * 100:.0f}% of the ops' GPU time "
        f"reaches < {BELOW_ROOF_PCT:.0f}% of what its arithmetic intensity allows on this "
        "GPU's roof (measured ceilings, else the datasheet); attention ops are the attention "
        "rules'"
    ),
    bucket=GPU_BUSY,
)
def below_roof(ev: JobEvidence) -> Iterable[Finding]:
    report = _report(ev)
    if report is None:
        return []
    out = []
    for op in report.ops:
        pct = op.pct_of_ceiling
        if op.share < OP_SHARE or pct is None or pct >= BELOW_ROOF_PCT or op.bound is None:
            continue
        if op.bytes_rule == op_costs.ATTENTION:
            continue  # the attention rules cost it against flash
        if op.bound == COMPUTE and op.attainable_tflops is not None:
            achieved = f"{op.achieved_tflops or 0.0:.1f} TFLOP/s"
            allows = f"{op.attainable_tflops:.0f} TFLOP/s"
            bad = _misaligned(op, op.ceiling)
            if bad:
                fix = (
                    f"pad or choose sizes that are multiples of {ALIGN[op.ceiling or '']} "
                    f"(here {', '.join(str(n) for n in bad[:4])}): tensor-core tiles then "
                    "divide the matrices; hidden sizes, vocabulary and batch x sequence"
                )
            elif op.ceiling == "fp32":
                fix = f"let it use the tensor cores: {tensor_core_precisions(ev)}"
            else:
                fix = (
                    "give the GEMM more work per call (a larger batch, or one product over "
                    "stacked inputs instead of many small ones); torch.compile("
                    "mode='max-autotune') tries other GEMM kernels; ncu on its kernel "
                    "shows what limits it"
                )
        else:
            achieved = f"{op.achieved_gbps or 0.0:.0f} GB/s"
            allows = f"{report.roof.bandwidth_gbps:.0f} GB/s"
            fix = (
                "fuse it with the ops around it so its tensors are read once: "
                "torch.compile(model); make its inputs contiguous (a strided or "
                "transposed input is copied first); bf16 halves the bytes it moves"
            )
        intensity = op.intensity_flop_per_byte
        where = f"{op.bound}-bound" + (
            f" at {intensity:.1f} FLOP/B" if intensity is not None else ""
        )
        if op.balance_flop_per_byte is not None:
            where += f", balance point {op.balance_flop_per_byte:.0f}"
        out.append(
            finding(
                ev,
                "roofline.below_roof",
                f"{fmt.truncate(fmt.clean(op.name), 40)} runs at {pct:.0f}% of its roof",
                f"{_where(op)}: {achieved}, {pct:.0f}% of the {allows} its intensity allows "
                f"({where}; {report.roof.label}); {op.share * 100:.0f}% of the ops' GPU time "
                f"over {op.calls} calls",
                fix,
                CONFIRM,
                share=_step_share(ev, _recoverable_us(op)),
            )
        )
    return out


@rule(
    "roofline.memory_bound",
    "roofline",
    "roofline classification: ops under the balance point are memory-bound; bottleneck "
    "tables: high memory use but low compute",
    ("capture",),
    trigger=(
        f"capture with FLOPs: ops under the balance point take >= "
        f"{MEMORY_BOUND_SHARE * 100:.0f}% of the ops' GPU time"
    ),
    bucket=GPU_BUSY,
)
def memory_bound(ev: JobEvidence) -> Iterable[Finding]:
    report = _report(ev)
    if report is None:
        return []
    placed = [op for op in report.ops if op.bound is not None]
    under = [op for op in placed if op.bound == MEMORY]
    share = sum(op.share for op in under)
    if share < MEMORY_BOUND_SHARE:
        return []
    moved = sum(op.bytes_moved or 0.0 for op in under)
    seconds = sum(op.device_us for op in under) / 1e6
    gbps = moved / seconds / 1e9 if seconds > 0 else 0.0
    top = max(under, key=lambda op: op.device_us)
    recoverable = sum(_recoverable_us(op) for op in under)
    near = gbps >= report.roof.bandwidth_gbps * TARGET_PCT / 100.0
    return [
        finding(
            ev,
            "roofline.memory_bound",
            "most GPU time goes to memory-bound ops",
            f"ops under the balance point take {share * 100:.0f}% of the top ops' GPU time, "
            f"moving {gbps:,.0f} GB/s of the {report.roof.bandwidth_gbps:,.0f} GB/s ceiling "
            f"({report.roof.label}); the largest: {_where(top)}",
            "move fewer bytes per FLOP: fuse elementwise chains into their GEMMs "
            "(torch.compile), fused attention (F.scaled_dot_product_attention), bf16 "
            "instead of fp32 activations, larger GEMMs (batch) that raise the intensity"
            + (
                "; they already run near the bandwidth ceiling, so only fewer bytes help"
                if near
                else ""
            ),
            CONFIRM,
            share=_step_share(ev, recoverable) if not near else None,
            severity=INFO if near else None,
        )
    ]
