"""The job's context, as evidence for the advice (DESIGN §12): compiled or
eager, CUDA graphs, training or inference, the collectives in use, the SDPA
backends that ran, the GPU's architecture.

Read from what the job itself says (torch.compile's counters and graph breaks
from the hook, the phases of its steps) and from the names in its newest
capture or trace (:class:`~gputui.protocol.trace_metrics.JobMarkers`).  None
where nothing tells.  Pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gputui import fmt
from gputui.analysis import thresholds
from gputui.protocol.messages import BACKWARD, OPTIMIZER
from gputui.protocol.value import ValueBase, value_class

if TYPE_CHECKING:
    from gputui.analysis.steps import StepStats
    from gputui.protocol.compile import CompileReason, CompileReport
    from gputui.protocol.trace_metrics import JobMarkers

#: torch.compile's regions' share of the launches from which a job counts as
#: compiled (the advice for a compiled job), not as eager with one region compiled
COMPILED_SHARE = thresholds.value("launch.compiled_share")


@value_class
class JobContext(ValueBase):
    #: compiled by torch.compile (None: nothing tells)
    compiled: bool | None = None
    #: the share of the launches torch.compile's regions made (None: unknown,
    #: or nothing compiled): a compiled job whose regions make few of them
    #: runs mostly eager
    compiled_share: float | None = None
    #: steps run through CUDA graphs (mode="reduce-overhead", or by hand)
    cuda_graphs: bool = False
    #: a backward pass or an optimizer runs in the steps (None: nothing tells)
    training: bool | None = None
    #: collective kinds in use ("all_reduce", "all_to_all", ...)
    collectives: tuple[str, ...] = ()
    #: SDPA backends that ran ("flash", "efficient", "cudnn", "math")
    attention: tuple[str, ...] = ()
    #: what the SDPA calls' own ops show of their inputs ("mask", "causal",
    #: "upcast", "dropout": gputui.trace.markers.attention_inputs)
    attention_inputs: tuple[str, ...] = ()
    #: the graph breaks torch.compile reported, most frequent first
    breaks: tuple[CompileReason, ...] = ()
    #: the GPU's compute capability ("9.0"), where known
    compute_capability: str | None = None
    #: the framework that runs the training loop (analysis.frameworks), whose
    #: arguments the advice names; None: a loop of the job's own, or unknown
    framework: str | None = None
    #: the optimizer's class ("AdamW", "SGD"), where the capture's ranges name it
    optimizer_class: str | None = None

    @property
    def inference(self) -> bool:
        return self.training is False

    @property
    def mostly_compiled(self) -> bool:
        """torch.compile ran, and its regions issue a fair share of the step
        (:data:`COMPILED_SHARE` of the launches, where that is known)."""
        return self.compiled is True and (
            self.compiled_share is None or self.compiled_share >= COMPILED_SHARE
        )

    def break_where(self) -> str | None:
        """``forward (train.py:12): Tensor.item()``: the most frequent graph
        break and where it is, cleaned; None without one."""
        if not self.breaks:
            return None
        b = self.breaks[0]
        where = b.where
        reason = fmt.clean(b.reason, 120)
        return f"{fmt.clean(where, 160)}: {reason}" if where else reason


def job_context(
    markers: JobMarkers | None,
    report: CompileReport | None,
    stats: StepStats,
    phases_coarse: bool = False,
    compute_capability: str | None = None,
    framework: str | None = None,
) -> JobContext:
    """The context from a capture's (or trace's) markers, torch.compile's report
    and the step statistics' phases."""
    compiled: bool | None = None
    if report is not None and report.graphs is not None:
        compiled = report.graphs > 0
    if markers is not None and markers.compiled:
        compiled = True
    elif markers is not None and compiled is None:
        compiled = False
    training: bool | None = None
    if markers is not None:
        training = markers.training
    phases = {d.name for d in stats.phases if d.total > 0}
    if BACKWARD in phases or OPTIMIZER in phases:
        training = True
    elif training is None and stats.count and not phases_coarse and phases:
        training = False
    return JobContext(
        compiled=compiled,
        compiled_share=None if markers is None else markers.compiled_launch_share,
        cuda_graphs=bool(markers and markers.cuda_graphs),
        training=training,
        collectives=() if markers is None else markers.collectives,
        attention=() if markers is None else markers.attention,
        attention_inputs=() if markers is None else markers.attention_inputs,
        breaks=() if report is None else report.breaks,
        compute_capability=compute_capability,
        framework=framework,
        optimizer_class=None if markers is None else markers.optimizer_class,
    )
