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

from gputui.protocol import messages as m
from gputui.protocol import spec
from gputui.protocol.value import value_class

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


@spec.value("reason")
@value_class
class CompileReason(spec.Wire):
    """One graph-break or recompile reason, how often it happened, and where:
    the user's file, line and function when dynamo's records tell it (a graph
    break's line is that of the resume function dynamo made at the break; a
    recompile's is the first line of the function compiled again)."""

    reason: str = spec.text(limit=MAX_REASON)
    count: int = spec.integer(missing=1)
    file: str | None = spec.text(None, MAX_FILENAME, omit_none=True)
    line: int | None = spec.integer(None, 0, MAX_LINE, omit_none=True)
    function: str | None = spec.text(None, MAX_FUNCTION, omit_none=True)

    @property
    def where(self) -> str | None:
        """``function (file:line)``, or as much of it as is known."""
        if self.file is None and self.line is None:
            return self.function
        place = f"{self.file or '?'}:{self.line if self.line is not None else '?'}"
        return f"{self.function} ({place})" if self.function else place


@spec.message(m.COMPILE)
@value_class
class CompileReport(spec.Wire):
    """What torch.compile did in the job so far.  None: not known (the source
    is unavailable on this torch)."""

    frames: int | None = None  #: frames dynamo compiled
    graphs: int | None = None  #: distinct graphs
    graph_breaks: int | None = None
    recompiles: int | None = None
    #: time spent compiling (dynamo and the backend)
    compile_s: float | None = None
    #: steps during which compilation happened (left out of step statistics)
    compile_steps: int = 0
    #: most frequent first
    breaks: tuple[CompileReason, ...] = spec.rows(CompileReason, MAX_REASONS)
    recompile_reasons: tuple[CompileReason, ...] = spec.rows(CompileReason, MAX_REASONS)
    #: recompiles caused by gputui's own hook (its module hooks removed once its
    #: root detection is over): counted here, not in ``recompile_reasons``
    hook_recompiles: int = 0
    #: sources this torch lacks (SOURCE_* names)
    unavailable: tuple[str, ...] = spec.texts(8, 64)
