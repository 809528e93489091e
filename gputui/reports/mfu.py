"""The MFU in words: the one line ``attach --once`` prints and the attach
screen's header shows, and ``gputui analyze``'s for a trace (analysis.mfu has
the convention)."""

from __future__ import annotations

from gputui import fmt
from gputui.analysis.mfu import Utilisation


def _pct(share: float) -> str:
    return f"{share * 100:.1f}%"


def _flops(value: float) -> str:
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9)):
        if value >= scale:
            return f"{value / scale:,.2f} {unit}"
    return f"{value / 1e6:,.2f} MFLOP"


def _rate(tflops: float) -> str:
    if tflops >= 0.1:
        return f"{tflops:,.1f} TFLOP/s"
    return f"{tflops * 1000:,.3g} GFLOP/s"


def short(u: Utilisation) -> str:
    """``MFU 41.2%, HFU 47.0%, 407.5 TFLOP/s bf16`` (the header's few words)."""
    if u.achieved_tflops is None:
        return f"MFU -: {fmt.clean(u.note or 'not known yet')}"
    rate = f"{_rate(u.achieved_tflops)} {u.dtype or ''}".rstrip()
    if u.mfu is None:
        return f"{rate} (MFU: {fmt.clean(u.note or 'no peak')})"
    return f"MFU {_pct(u.mfu)}, HFU {_pct(u.hfu or 0.0)}, {rate}"


def line(u: Utilisation, during_trace: bool = False) -> str:
    """The whole sentence: rates, peaks, the measured ceiling's share, FLOPs per
    step.  ``during_trace``: the rate is that of a trace's own steps."""
    parts = [short(u)]
    if u.peak_tflops is not None:
        parts.append(f"{u.peak} datasheet peak {u.peak_tflops:,.1f} TFLOP/s (dense)")
    if u.measured_share is not None and u.measured_tflops is not None:
        parts.append(
            f"{_pct(u.measured_share)} of the measured {u.peak} ceiling "
            f"({u.measured_tflops:,.1f} TFLOP/s, gputui bench)"
        )
    per_step = f"{_flops(u.model_flops_per_step)} per step"
    if u.hardware_flops_per_step > u.model_flops_per_step * 1.0005:
        per_step += f" ({_flops(u.hardware_flops_per_step)} with recomputation)"
    if u.steps_per_s is not None:
        steps = "steps/s during the trace" if during_trace else "unprofiled steps/s"
        per_step += f" at {u.steps_per_s:,.2f} {steps}"
    parts.append(per_step)
    if u.partial:
        parts.append("counted from the top op rows only (the job's hook predates FLOP totals)")
    return "; ".join(parts)


#: what a trace's MFU is not: the live one
DURING_TRACE = (
    "(the profiler slows the steps it records: this can read lower than the job's "
    "MFU without it, which gputui attach measures)"
)


def trace_lines(u: Utilisation | None, note: str | None, window: str = "the trace") -> list[str]:
    """``gputui analyze``'s sentences on a trace's MFU (unwrapped); ``window``:
    what it is over (``the 3 profiled steps``)."""
    if u is None:
        return [f"MFU over {window}: unknown: {fmt.clean(note or 'no FLOPs counted')}"]
    return [f"MFU over {window}: {line(u, during_trace=True)}", DURING_TRACE]
