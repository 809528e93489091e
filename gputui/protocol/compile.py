"""torch.compile in a hooked job, on the wire (standard library only).

The hook reads what dynamo keeps about its work -- all private to torch, so
each source is read guarded and named in ``unavailable`` when this torch lacks
it: ``torch._dynamo.utils.counters`` (graph breaks and their reasons, the
resume functions named after the line of each break, frames and graphs),
``guard_failures`` (why a frame was compiled again), the compilation metrics
(which frame each break happened in) and ``compilation_time_metrics`` (time
spent compiling).  Only when the job imported dynamo itself and something was
compiled: a job without torch.compile gets no ``compile`` message at all.

The message goes to subscribed viewers when it changes (at most once a status
period) and once right after a subscribe.  A hook older than it sends none (a
viewer says the details are unavailable when the status shows compiled
graphs); a viewer older than it ignores it, as the protocol promises for
unknown types.  File, function and reason texts are the job's and torch's own
(untrusted): viewers clean them before display.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from gputui.protocol import fields as f
from gputui.protocol import messages as m
from gputui.protocol.fields import typed

#: reasons (graph breaks, recompiles) kept per message, most frequent first
MAX_REASONS = 16
MAX_REASON = 1000
MAX_FILENAME = 512
MAX_FUNCTION = 256
MAX_LINE = 1 << 31

#: the sources the hook reads, by the names ``unavailable`` uses
SOURCE_COUNTERS = "counters"
SOURCE_GUARD_FAILURES = "guard_failures"
SOURCE_TIME = "compilation_time_metrics"
SOURCE_METRICS = "compilation_metrics"
#: what keeps the hook's own code out of compilation and ends its root
#: detection before the first compile (without them, the hook can cause
#: recompiles: ``hook_recompiles``)
SOURCE_SKIP_CODE = "eval_frame.skip_code"
SOURCE_START_CALLBACKS = "compile start callbacks"


@dataclass(frozen=True)
class CompileReason:
    """One graph-break or recompile reason, how often it happened, and where:
    the user's file, line and function when dynamo's records tell it (a graph
    break's line is that of the resume function dynamo made at the break; a
    recompile's is the first line of the function compiled again)."""

    reason: str
    count: int
    file: str | None = None
    line: int | None = None
    function: str | None = None

    @property
    def where(self) -> str | None:
        """``function (file:line)``, or as much of it as is known."""
        if self.file is None and self.line is None:
            return self.function
        place = f"{self.file or '?'}:{self.line if self.line is not None else '?'}"
        return f"{self.function} ({place})" if self.function else place

    @classmethod
    def from_wire(cls, obj: Any, where: str) -> CompileReason:
        obj = typed(obj, where)
        return cls(
            reason=f.text(obj, "reason", where, MAX_REASON),
            count=f.integer(obj, "count", where, default=1),
            file=f.opt_text(obj, "file", where, MAX_FILENAME),
            line=f.opt_integer(obj, "line", where, 0, MAX_LINE),
            function=f.opt_text(obj, "function", where, MAX_FUNCTION),
        )

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"reason": self.reason, "count": self.count}
        for key in ("file", "line", "function"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


def _reasons(obj: Any, key: str, where: str) -> tuple[CompileReason, ...]:
    return tuple(
        CompileReason.from_wire(item, f"{where}.{key}[{i}]")
        for i, item in enumerate(f.items(obj, key, where, MAX_REASONS))
    )


@dataclass(frozen=True)
class CompileReport:
    """What torch.compile did in the job so far.  None: not known (the source
    is unavailable on this torch)."""

    TYPE: ClassVar[str] = m.COMPILE

    frames: int | None = None  #: frames dynamo compiled
    graphs: int | None = None  #: distinct graphs
    graph_breaks: int | None = None
    recompiles: int | None = None
    compile_s: float | None = None  #: time spent compiling (dynamo and the backend)
    #: steps during which compilation happened (left out of step statistics)
    compile_steps: int = 0
    breaks: tuple[CompileReason, ...] = ()  #: most frequent first
    recompile_reasons: tuple[CompileReason, ...] = ()
    #: recompiles caused by gputui's own hook (its module hooks removed once its
    #: root detection is over): counted here, not in ``recompile_reasons``
    hook_recompiles: int = 0
    #: sources this torch lacks (SOURCE_* names)
    unavailable: tuple[str, ...] = ()

    @classmethod
    def from_wire(cls, obj: Any, where: str = "compile") -> CompileReport:
        obj = typed(obj, where)
        return cls(
            frames=f.opt_integer(obj, "frames", where),
            graphs=f.opt_integer(obj, "graphs", where),
            graph_breaks=f.opt_integer(obj, "graph_breaks", where),
            recompiles=f.opt_integer(obj, "recompiles", where),
            compile_s=f.opt_number(obj, "compile_s", where, hi=f.MAX_SECONDS),
            compile_steps=f.integer(obj, "compile_steps", where, default=0),
            breaks=_reasons(obj, "breaks", where),
            recompile_reasons=_reasons(obj, "recompile_reasons", where),
            hook_recompiles=f.integer(obj, "hook_recompiles", where, default=0),
            unavailable=f.texts(obj, "unavailable", where, 8, 64),
        )

    def to_wire(self) -> dict[str, Any]:
        out = {**f.header(m.COMPILE), **asdict(self)}  # the wire's keys are the fields'
        out["breaks"] = [r.to_wire() for r in self.breaks]
        out["recompile_reasons"] = [r.to_wire() for r in self.recompile_reasons]
        out["unavailable"] = list(self.unavailable)
        return out
