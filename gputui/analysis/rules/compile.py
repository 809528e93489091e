"""torch.compile's cost: graph breaks and recompiles.

- ``compile.breaks_recompiles``: dynamo broke the model into several graphs
  (each break runs Python between graphs and stops fusion across it) or
  compiled a frame again (each recompile costs its compile time again, and a
  frame that keeps recompiling falls back to eager after its cache limit).
  Names the top reasons with the user's line where dynamo's records tell it;
  its cost is the time the window's compiling steps (after the warm-up: the
  first compile is paid once) spent beyond an ordinary step.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gputui import fmt
from gputui.analysis.evidence import JobEvidence
from gputui.analysis.finding import Finding
from gputui.analysis.ledger import OUTSIDE
from gputui.analysis.registry import finding, rule
from gputui.analysis.severity import INFO
from gputui.analysis.steps import is_warmup
from gputui.protocol.compile import CompileReason
from gputui.protocol.messages import StepFlag

COMPILE_FLAG = int(StepFlag.COMPILE)
#: reasons named in the evidence, of each kind
TOP_REASONS = 3
_PRINT = re.compile(r"\bprint\b|logging|logger", re.IGNORECASE)
_ITEM = re.compile(r"\.item\(\)|Tensor\.item|tolist|data-dependent|dynamic shape operator", re.I)
_SHAPE = re.compile(r"size mismatch|stride mismatch|dim\(\)|rank mismatch", re.IGNORECASE)


def _named(r: CompileReason) -> str:
    """``Failed to trace print ×3 at forward (train.py:12)``."""
    text = fmt.clean(r.reason, 160)
    where = r.where
    if where is not None:
        path = (r.file or "").replace("\\", "/").rsplit("/", 1)[-1]
        place = f"{path or '?'}:{r.line if r.line is not None else '?'}"
        place = fmt.clean(place, 120)
        where = f"{fmt.clean(r.function, 80)} ({place})" if r.function else place
    return f"{text} x{r.count}" + (f" at {where}" if where else "")


def _fix(breaks: tuple[CompileReason, ...], recompiles: tuple[CompileReason, ...]) -> str:
    texts = " ".join(r.reason for r in breaks + recompiles)
    fixes = []
    if _PRINT.search(texts):
        fixes.append(
            "move print and logging calls out of the compiled forward (or log every N steps "
            "outside it)"
        )
    if _ITEM.search(texts):
        fixes.append(
            "keep values as tensors inside the compiled code instead of .item()/.tolist() "
            "(or torch._dynamo.config.capture_scalar_outputs = True)"
        )
    if _SHAPE.search(" ".join(r.reason for r in recompiles)):
        fixes.append(
            "give the compiled code steady shapes: DataLoader(drop_last=True), pad to fixed "
            "sizes, or mark the varying dimension dynamic (torch._dynamo.mark_dynamic(x, 0) "
            "or torch.compile(dynamic=True))"
        )
    fixes.append(
        "TORCH_LOGS=graph_breaks,recompiles names each one with its stack; "
        "torch._dynamo.explain(model)(*inputs) lists the breaks"
    )
    return "; ".join(fixes)


#: where the rule comes from, and when it fires (docs/analyzer.md)
_SOURCE = (
    "torch.compile's own counters: graph breaks split the model into several graphs "
    "(Python between them, no fusion across); recompiles pay the compile again "
    "(TORCH_LOGS=graph_breaks,recompiles)"
)
_TRIGGER = (
    "torch.compile reports graph breaks or recompiles of the job's code (the hook "
    "reads dynamo's counters); cost: the time compiling steps after the warm-up took "
    "beyond an ordinary step, of the window's time"
)


@rule(
    "compile.breaks_recompiles", "compile", _SOURCE, ("compile",), trigger=_TRIGGER, bucket=OUTSIDE
)
def breaks_recompiles(ev: JobEvidence) -> Iterable[Finding]:
    report = ev.compile_report
    if report is None or not (report.graph_breaks or report.recompile_reasons):
        return []
    breaks = report.breaks
    recompiles = report.recompile_reasons
    n_breaks = report.graph_breaks or 0
    n_recompiles = sum(r.count for r in recompiles)
    if not n_breaks and not n_recompiles:
        return []
    parts = []
    if n_breaks:
        parts.append(f"{n_breaks} graph break{'s' if n_breaks != 1 else ''}")
    if n_recompiles:
        parts.append(f"{n_recompiles} recompile{'s' if n_recompiles != 1 else ''}")
    evidence = f"torch.compile: {' and '.join(parts)}"
    if report.graphs is not None:
        evidence += f" ({report.graphs} graphs from {report.frames or 0} frames)"
    if breaks:
        evidence += "; breaks: " + "; ".join(_named(r) for r in breaks[:TOP_REASONS])
    if recompiles:
        evidence += "; recompiles: " + "; ".join(_named(r) for r in recompiles[:TOP_REASONS])
    share = None
    # the first compile is paid once, in the warm-up: the cost is in the later ones
    compiling = [s for s in ev.steps if s.flags & COMPILE_FLAG and not is_warmup(s.index)]
    total = sum(s.wall for s in ev.steps)
    step_s = ev.step_s
    if compiling and total > 0:
        extra = sum(max(0.0, s.wall - (step_s or 0.0)) for s in compiling)
        share = extra / total
        evidence += (
            f"; {len(compiling)} compiling step{'s' if len(compiling) != 1 else ''} after the "
            f"warm-up took {fmt.ms(extra)} beyond an ordinary step ({share * 100:.0f}% of "
            "the window's time; left out of the step statistics)"
        )
    if report.compile_s is not None:
        evidence += f"; {report.compile_s:,.1f} s compiling since the start"
    if report.hook_recompiles:
        evidence += (
            f"; {report.hook_recompiles} more recompile(s) came from gputui's own module "
            "hooks, once, when its step detection ended"
        )
    return [
        finding(
            ev,
            "compile.breaks_recompiles",
            "graph breaks and recompiles cost time"
            if n_breaks and n_recompiles
            else ("graph breaks cost time" if n_breaks else "recompiles cost time"),
            evidence,
            _fix(breaks, recompiles),
            "attach --once shows no graph breaks or recompiles after the change (and no "
            "compiling steps after the first ones)",
            share=share,
            severity=None if share is not None else INFO,
        )
    ]
