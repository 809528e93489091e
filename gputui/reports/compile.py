"""torch.compile in words: what ``attach --once`` prints and the attach screen's
header shows of a job's graph breaks, recompiles and compile time."""

from __future__ import annotations

from gputui import fmt
from gputui.protocol.compile import CompileReason, CompileReport
from gputui.protocol.hello import Status

#: reasons listed of each kind
TOP = 5


def unavailable(report: CompileReport | None, status: Status | None) -> str | None:
    """Why a job that compiles shows no details: its hook predates them, or this
    torch lacks the sources (None when there is nothing to say)."""
    if report is None:
        if status is not None and status.compiled_graphs:
            return "torch.compile details: unavailable (the job's hook predates them)"
        return None
    if report.unavailable:
        missing = ", ".join(fmt.clean(s, 64) for s in report.unavailable)
        return f"torch.compile: {missing} unavailable on this torch"
    return None


def short(report: CompileReport) -> str:
    """``compile: 3 breaks, 1 recompile, 3.3 s`` (the header's few words)."""
    parts = []
    if report.graph_breaks is not None:
        parts.append(f"{report.graph_breaks} break{'s' if report.graph_breaks != 1 else ''}")
    if report.recompiles is not None:
        n = sum(r.count for r in report.recompile_reasons)
        parts.append(f"{n} recompile{'s' if n != 1 else ''}")
    if report.compile_s is not None:
        parts.append(f"{report.compile_s:,.1f} s")
    return "compile: " + (", ".join(parts) or "on")


def _reason(r: CompileReason) -> str:
    where = r.where
    text = f"x{r.count}  {fmt.clean(r.reason, 300)}"
    return text + (f"  at {fmt.clean(where, 600)}" if where else "")


def lines(report: CompileReport) -> list[str]:
    """The report's sentences: a summary, then one line per top reason."""
    head = (
        f"torch.compile: {report.frames if report.frames is not None else '?'} frames, "
        f"{report.graphs if report.graphs is not None else '?'} graphs, "
        + short(report).removeprefix("compile: ")
        + f" compiling; {report.compile_steps} compiling steps left out of the statistics"
    )
    if report.hook_recompiles:
        head += f"; {report.hook_recompiles} recompile(s) from gputui's own hooks (once)"
    out = [head]
    out += [f"graph break {_reason(r)}" for r in report.breaks[:TOP]]
    out += [f"recompile {_reason(r)}" for r in report.recompile_reasons[:TOP]]
    return out
