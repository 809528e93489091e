"""What one rank's trace says, as values: the input of the trace rules and of
``gputui analyze`` (pure).

:func:`summarize` turns a :class:`~gputui.trace.timeline.Timeline` into a
:class:`TraceSummary`: the trace metrics (HTA breakdowns, launch statistics,
the TensorBoard plugin's step breakdown), the top kernels and CPU ops in the
same row types a capture result carries (so a rule reads a trace file and a
live capture alike), and what the trace says about its GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import field
from typing import Any

from gputui import fmt
from gputui.analysis.evidence import COUNTED_OPS, CPU_OP_US, cast_load, many_casts
from gputui.analysis.finding import Finding, ranked
from gputui.protocol.capture import CpuOpRow, KernelRow
from gputui.protocol.op_rows import FlopTotals, OpRow
from gputui.protocol.trace_metrics import TraceMetrics
from gputui.protocol.value import ValueBase, value_class
from gputui.trace import tables
from gputui.trace.kernels import short_kernel_name
from gputui.trace.scan import (
    KERNEL_LAUNCHES,
    WARMUP_RATIO,
    CollectiveCalls,
    Outside,
    Sanity,
    Scan,
    collective_calls,
)
from gputui.trace.tables import TOP_ROWS
from gputui.trace.timeline import Timeline, step_id
from gputui.trace.trace_metrics import compute

#: what a trace's window is
WINDOW_STEPS = "profiled steps"
WINDOW_GPU = "GPU activity"
WINDOW_HOST = "host activity"
WINDOW_LAUNCHES = "kernel launches"


@value_class
class TraceSummary(ValueBase):
    """One rank's trace, summarized.  Every time is in microseconds of the
    trace; None where the trace cannot say.

    - ``rank``: from the trace's ``distributedInfo``, else the file's position
      among those given (``rank_from`` says which: "distributedInfo", "order").
    - ``steps``: the N of every host-side ``ProfilerStep#N``, in time order.
    - ``metrics``: :class:`~gputui.protocol.trace_metrics.TraceMetrics` -- the
      same value a capture result carries (``temporal``, ``idle_breakdown``,
      ``comm_compute_overlap_pct``, ``launch``, ``step_breakdown``).
    - ``window_us``: the analyzer's window (``window_kind``): from the first
      step's start to the last step's end (each step stretched over the GPU
      work it launched), or, without steps, the span of GPU activity; what
      lies before it is set-up (``setup``), what lies after it tear-down
      (``teardown``).
    - ``kernels``: the top GPU activities by total time (kernels, memcpy,
      memset; ``kernel_class`` from :mod:`gputui.trace.kernels`) that start in
      the window; ``kernel_us_by_class`` totals every such activity per class.
    - ``cpu_ops``: the top host ops and runtime calls by self time (a
      ``cudaStreamSynchronize`` row is a host sync) that start in the window.
    - ``sanity``: what the trace says of itself that the figures depend on
      (:func:`warnings` words it).
    """

    rank: int
    rank_from: str
    path: str
    world_size: int | None = None
    device_name: str | None = None
    device_memory_bytes: int | None = None
    compute_capability: str | None = None
    #: recorded under ROCm (an AMD GPU): no CUDA compute capability, no NVIDIA tools
    rocm: bool = False
    #: the slow ops of ``cpu_ops`` (``launch.cpu_op_us`` or more a call) that
    #: launched GPU work: host time of a GPU op (cuDNN choosing its algorithm on
    #: a first call), not an op computing on host tensors
    launching_ops: tuple[str, ...] = ()
    events: int = 0
    gpu_activities: int = 0
    steps: tuple[int, ...] = ()
    metrics: TraceMetrics = field(default_factory=TraceMetrics)
    kernels: tuple[KernelRow, ...] = ()
    kernel_names: int = 0
    kernel_total_us: float = 0.0
    kernel_us_by_class: Mapping[str, float] = field(default_factory=dict)
    #: the activities ``kernel_total_us`` counts
    kernel_calls: int = 0
    #: from the first GPU activity in the window to the last one's end (what
    #: ``kernels`` and ``kernel_us_by_class`` cover)
    gpu_span_us: float | None = None
    #: the window's communication kernels in start order, each its collective's
    #: kind, its start from the window's and its time on the GPU (µs):
    #: :meth:`~gputui.trace.scan.Scan.comm_sequence`
    comm_kernels: tuple[tuple[str, float, float], ...] = ()
    #: the window's collectives by the messages their kernels record (traces
    #: of torch 2.1 and later: :func:`~gputui.trace.scan.collective_calls`)
    collectives: tuple[CollectiveCalls, ...] = ()
    #: the window's conversions (``aten::to``) by the op or autograd node each
    #: runs inside, "" for the program's own, where they are many (at least
    #: ``copy.casts_per_step`` a step): :meth:`~gputui.trace.scan.Scan.cast_parents`
    cast_parents: tuple[tuple[str, int], ...] = ()
    #: the window's calls of :data:`gputui.analysis.evidence.COUNTED_OPS` (those
    #: called), whatever their time: the CPU-op table keeps only the top ones
    op_calls: tuple[tuple[str, int], ...] = ()
    cpu_ops: tuple[CpuOpRow, ...] = ()
    cpu_op_names: int = 0
    cpu_self_total_us: float = 0.0
    #: per op and input signature, most GPU time first (traces with shapes)
    op_rows: tuple[OpRow, ...] = ()
    #: the FLOPs of the ops inside the host steps and how many steps (traces
    #: with shapes; None otherwise)
    step_flops: tuple[FlopTotals, int] | None = None
    window_us: tuple[int, int] | None = None
    #: "profiled steps", "GPU activity" (no steps), "kernel launches" (no steps,
    #: no GPU activity recorded), "host activity" (none of these)
    window_kind: str = WINDOW_STEPS
    setup: Outside = field(default_factory=Outside)
    teardown: Outside = field(default_factory=Outside)
    sanity: Sanity = field(default_factory=Sanity)

    @property
    def step_us_mean(self) -> float | None:
        sb = self.metrics.step_breakdown
        return None if sb is None else sb.step_us_mean

    @property
    def gpu_ran(self) -> bool:
        """Whether any work went to a GPU: GPU activity, or kernel launches the
        profiler recorded without their kernels.  A trace with neither ran its
        ops on the CPU, even where it names the machine's GPUs."""
        return self.gpu_activities > 0 or self.sanity.kernel_launch_calls > 0


#: The trace rules: each reads a summary and returns findings.  The rule engine
#: registers its trace rules here; ``gputui analyze`` shows what they return.
TraceRule = Callable[[TraceSummary], Iterable[Finding]]
TRACE_RULES: list[TraceRule] = []


def trace_findings(
    summary: TraceSummary, rules: Sequence[TraceRule] | None = None
) -> list[Finding]:
    """Every registered trace rule's findings for one rank, ranked."""
    found: list[Finding] = []
    for rule in TRACE_RULES if rules is None else rules:
        found.extend(rule(summary))
    return ranked(found)


def kernel_rows(scan: Scan, top: int = TOP_ROWS) -> tables.KernelTable:
    """The GPU activities that start in the window, by name (the top ``top`` by
    total time), their count, total and total per kernel class."""
    return tables.kernel_table(scan.kernel_tally(), top)


def cpu_op_rows(
    scan: Scan, top: int = TOP_ROWS
) -> tuple[tuple[CpuOpRow, ...], int, float, tuple[tuple[str, int], ...]]:
    """Top host ops and runtime calls in the window by self time (own time minus
    direct children's, per thread); annotations and Python functions take part in
    the nesting but are not rows.  Also the number of names, the total self
    time and the calls of :data:`~gputui.analysis.evidence.COUNTED_OPS`."""
    per_name = {t.name: [t.calls, t.self_us, t.total_us] for t in scan.op_tally()}
    table = tables.cpu_op_table(per_name, top, per_us=1.0)
    counted = tuple(
        (name, per_name[name][0]) for name in COUNTED_OPS if per_name.get(name, (0,))[0]
    )
    return table.rows, table.names, table.self_total_us, counted


def summarize(
    timeline: Timeline,
    rank: int,
    rank_from: str,
    path: str,
    *,
    world_size: int | None = None,
    device_name: str | None = None,
    device_memory_bytes: int | None = None,
    compute_capability: str | None = None,
    rocm: bool = False,
    include_last_step: bool = False,
    top: int = TOP_ROWS,
    op_rows: Sequence[OpRow] = (),
    step_flops: tuple[FlopTotals, int] | None = None,
) -> TraceSummary:
    """The summary of one rank (the device fields: what the trace says of its GPU).
    Sorts the timeline's lists by start (:class:`~gputui.trace.scan.Scan`)."""
    scan = Scan(timeline, include_last_step)
    metrics = compute(timeline, include_last_step, scan)
    table = kernel_rows(scan, top)
    ops, op_names, self_total, op_calls = cpu_op_rows(scan, top)
    slow = {o.name for o in ops if "::" in o.name and o.calls and o.mean_self_us >= CPU_OP_US}
    steps = tuple(s for s in (step_id(r[2]) for r in scan.step_ranges) if s is not None)
    setup, teardown = scan.outside()
    # the casts' own ops are tallied where copy.frequent_casts would speak
    acct = metrics.account
    many = many_casts(
        *cast_load(ops), acct.steps if acct is not None and acct.steps else len(steps)
    )
    if any(r[1] > r[0] for r in scan.step_ranges):
        kind = WINDOW_STEPS
    elif any(a[5] != -1 and a[1] > a[0] for a in timeline.gpu):
        kind = WINDOW_GPU
    elif not scan.runtime_names.isdisjoint(KERNEL_LAUNCHES):
        kind = WINDOW_LAUNCHES
    else:
        kind = WINDOW_HOST
    return TraceSummary(
        rank=rank,
        rank_from=rank_from,
        path=path,
        world_size=world_size,
        device_name=device_name,
        device_memory_bytes=device_memory_bytes,
        compute_capability=compute_capability,
        rocm=rocm,
        launching_ops=tuple(sorted(scan.launchers(slow))),
        events=timeline.events,
        gpu_activities=len(timeline.gpu),
        steps=steps,
        metrics=metrics,
        kernels=table.rows,
        kernel_names=table.names,
        kernel_total_us=table.total_us,
        kernel_us_by_class=table.by_class_us,
        kernel_calls=table.calls,
        gpu_span_us=scan.gpu_span(),
        comm_kernels=scan.comm_sequence(),
        collectives=collective_calls(timeline.collectives, scan.window),
        cast_parents=scan.cast_parents() if many else (),
        op_calls=op_calls,
        cpu_ops=ops,
        cpu_op_names=op_names,
        cpu_self_total_us=self_total,
        op_rows=tuple(op_rows),
        step_flops=step_flops,
        window_us=scan.window,
        window_kind=kind,
        setup=_outside(setup, top),
        teardown=_outside(teardown, top),
        sanity=scan.sanity(),
    )


#: the ops a summary keeps of what lies outside the window
OUTSIDE_ROWS = 5


def _outside(side: Outside, top: int) -> Outside:
    return Outside(side.us, side.ops[: min(top, OUTSIDE_ROWS)], side.gpu_activities, side.gpu_us)


#: the figures a disagreement between the host's and the GPU's clocks makes wrong
#: the kernel time rounding leaves out, as a share of the window, from which a
#: trace is told so (two points of the GPU's busy share: a difference a reader
#: comparing with TensorBoard would see)
ROUNDED_SHARE = 0.02
SKEWED_FIGURES = (
    "the launch delays, HTA's host-wait idle time, the steps' stretch over their GPU work, "
    "and the split of the GPU's idle time by what the host did"
)


def _by_name(rows: tuple[tuple[str, int, float], ...]) -> str:
    """``cudaFree x2 6534ms, cudaMalloc 1867ms``: the first four (name, calls, us)."""
    return ", ".join(
        f"{fmt.clean(name, 60)}{f' x{n}' if n > 1 else ''} {fmt.ms(us / 1e6)}"
        for name, n, us in rows[:4]
    )


def _setup_warning(s: Sanity, window: tuple[int, int]) -> str:
    """The warning for long set-up calls in the window (Sanity.setup_calls)."""
    lo, hi = window
    return (
        f"{s.setup_calls:,} set-up call{'' if s.setup_calls == 1 else 's'} took "
        f"{fmt.ms(s.setup_call_us / 1e6)} of the {fmt.ms((hi - lo) / 1e6)} window while the "
        f"GPU idled ({_by_name(s.setup_by_name)}; 100ms or more each): memory reserved or "
        "freed, streams or handles made, a warm-up (the caching allocator's first "
        "reservations, cuDNN's algorithm search) that is no cost of the loop, left out of the "
        "launch and idle findings; profile steps after a warm-up"
    )


def _warmup_warning(s: Sanity, window: tuple[int, int], gpu: bool = True) -> str:
    """The warning for ops' warm-up calls in the window (Sanity.warmup_calls);
    ``gpu``: the trace records GPU work (a CPU-only one has no GPU to idle, nor
    CUDA's first calls)."""
    lo, hi = window
    named = _by_name(s.warmup_by_name)
    convolutions = any("convolution" in name for name, _n, _us in s.warmup_by_name)
    if not gpu:
        why = "first calls (a library's set-up: oneDNN making its primitives, memory first touched)"
    elif convolutions:
        why = (
            "cuDNN's algorithm search on each new convolution shape "
            "(torch.backends.cudnn.benchmark=True), and the first calls of other ops (CUDA "
            "loading their kernels, cuBLAS's set-up)"
        )
    else:
        why = "first calls (CUDA loading their kernels, a library's set-up: cuBLAS, cuDNN)"
    return (
        f"{s.warmup_calls:,} op call{'' if s.warmup_calls == 1 else 's'} took "
        f"{fmt.ms(s.warmup_us / 1e6)} of the {fmt.ms((hi - lo) / 1e6)} window"
        + (" while the GPU idled" if gpu else "")
        + f", each {WARMUP_RATIO} times its op's median call or more ({named}): warm-up, "
        f"{why}, a one-off that is no cost of the loop, left out of the "
        + ("launch and idle findings" if gpu else "findings")
        + "; profile steps after a warm-up (torch.profiler.schedule(wait=1, warmup=1, "
        "active=3) with prof.step() each step)"
    )


def warnings(summary: TraceSummary) -> list[str]:
    """What a reader of this rank's figures must know first, one sentence each:
    GPU activity the profiler did not record, clocks that disagree, torch.compile
    compiling inside the window, a trace without steps."""
    out: list[str] = []
    s = summary.sanity
    if s.kernel_launch_calls and not s.kernel_records:
        out.append(
            f"GPU activity not recorded: {s.kernel_launch_calls:,} kernel launch "
            f"call{'' if s.kernel_launch_calls == 1 else 's'} and no kernel records (profile "
            "with ProfilerActivity.CUDA); the GPU's busy and idle time, the kernel table and "
            "the launch delays are unknown"
        )
    if s.records_graphs:
        ran = s.kernels_launched
        out.append(
            f"the trace records {s.graph_captures:,} CUDA graph "
            f"capture{'' if s.graph_captures == 1 else 's'} (a stream's begin-capture call): "
            f"of its {s.kernel_launch_calls:,} kernel launch calls {ran:,} ran a kernel, the "
            "others put theirs in a graph; the launch figures and the GPU's idle time describe the "
            "capture, not the model's run (no launch finding): profile the graphs' replays"
        )
    if s.graph_capture_us > 0 and not s.records_graphs and summary.window_us is not None:
        lo, hi = summary.window_us
        out.append(
            f"{fmt.ms(s.graph_capture_us / 1e6)} of the {fmt.ms((hi - lo) / 1e6)} window is "
            "inside CUDA graph captures (a stream's begin-capture call to its end): their "
            "launch calls put kernels in a graph and run nothing, one-off time left out of "
            "the launch and idle findings; profile the graphs' replays after the first steps"
        )
    if s.blind_waits:
        out.append(
            f"{s.blind_waits:,} synchronizing call{'' if s.blind_waits == 1 else 's'} waited "
            f"{fmt.ms(s.blind_wait_us / 1e6)} in the window while the GPU ran nothing the trace "
            "recorded: what the CPU waited for is not in it (work the profiler did not see: "
            "another process, graphs replayed without kernel records); that time is left out "
            "of the idle GPU's causes"
        )
    if s.setup_calls and summary.window_us is not None:
        out.append(_setup_warning(s, summary.window_us))
    if s.warmup_calls and summary.window_us is not None:
        out.append(_warmup_warning(s, summary.window_us, summary.gpu_ran))
    if s.kernels_before_launch:
        out.append(
            f"{s.kernels_before_launch:,} of {s.kernels_launched:,} kernels start before their "
            "launch call (the host's and the GPU's clocks disagree): "
            + SKEWED_FIGURES
            + " are unreliable"
        )
    if s.compile_us > 0 and summary.window_us is not None:
        lo, hi = summary.window_us
        out.append(
            f"torch.compile compiled inside the window: {fmt.ms(s.compile_us / 1e6)} of its "
            f"{fmt.ms((hi - lo) / 1e6)} in its compiling ranges (… (dynamo_timed)), host time "
            "that is the compiler's, not the model's; profile compiled steps after the first "
            "ones (a schedule's wait and warmup)"
        )
    if s.cold_launches:
        out.append(
            f"{s.cold_launches:,} launch call{'' if s.cold_launches == 1 else 's'} took "
            f"{fmt.ms(s.cold_launch_us / 1e6)} in the window (100ms or more each, or 1ms or "
            "more for a kernel's first launch while the GPU idled): CUDA loading kernels' "
            "modules or compiling them on first use, a one-off that is no launch cost of "
            "the loop; profile steps after a warm-up"
        )
    lost = s.kernel_exact_us - s.kernel_counted_us
    if s.kernels_in_window and summary.window_us is not None:
        lo, hi = summary.window_us
        if hi > lo and lost >= ROUNDED_SHARE * (hi - lo):
            out.append(
                f"kernels of a few microseconds ({fmt.us(s.kernel_exact_us / s.kernels_in_window)} "
                "on average): rounded to whole microseconds as HTA rounds them, they count "
                f"{fmt.ms(lost / 1e6)} less than their {fmt.ms(s.kernel_exact_us / 1e6)} in the "
                f"window ({100 * lost / s.kernel_exact_us:.0f}% of it), up to "
                f"{100 * lost / (hi - lo):.0f} points of the window: the GPU's busy and kernel "
                "shares read that much lower than in tools that keep the fractions (the "
                "TensorBoard plugin, Perfetto)"
            )
    if summary.window_kind != WINDOW_STEPS and summary.window_us is not None:
        lo, hi = summary.window_us
        what = {WINDOW_GPU: "GPU activity", WINDOW_LAUNCHES: "kernel launch calls"}.get(
            summary.window_kind, "host activity"
        )
        out.append(
            f"no ProfilerStep marks: the window is the span of {what} ({fmt.ms((hi - lo) / 1e6)}), "
            "taken as one step; profile with a schedule and call prof.step() each step for "
            "per-step figures"
        )
    repeated = _repeated_step(summary.steps)
    if repeated is not None:
        step, times = repeated
        out.append(
            f"ProfilerStep#{step} is marked {times} times: the file holds several processes' "
            "steps (ranks merged into one file), and a file is read as one rank, so its "
            "figures mix them; analyze each rank's own trace (a directory of them reads as "
            "the job's ranks)"
        )
    return out


def _repeated_step(steps: Sequence[int]) -> tuple[int, int] | None:
    """The step number marked most often, and how often, where one is marked
    more than once (a process marks each of its steps once)."""
    counts: dict[int, int] = {}
    for step in steps:
        counts[step] = counts.get(step, 0) + 1
    step, times = max(counts.items(), key=lambda kv: (kv[1], -kv[0]), default=(0, 0))
    return (step, times) if times > 1 else None


def collective_json(c: CollectiveCalls) -> dict[str, Any]:
    """One collective of a rank's window, as ``gputui analyze --json`` gives it."""
    per_call = c.bytes_per_call
    return {
        "name": c.name,
        "calls": c.calls,
        "sized_calls": c.sized,
        "bytes": c.bytes,
        "bytes_per_call": None if per_call is None else round(per_call, 1),
        "us": round(c.us, 3),
        "us_per_call": round(c.us_per_call, 3),
        "group_size": c.group or None,
        "mean_gbps": None if c.mean_gbps is None else _figures(c.mean_gbps),
        "best_gbps": None if c.best_gbps is None else _figures(c.best_gbps),
        "split_calls": c.split_calls,
        "split_skew": None if c.split_skew is None else round(c.split_skew, 3),
    }


def _figures(value: float) -> float:
    """``value`` to six significant figures (a rate from bytes a nanosecond)."""
    return float(f"{value:.6g}")


def outside_json(side: Outside) -> dict[str, Any]:
    return {
        "us": side.us,
        "gpu_activities": side.gpu_activities,
        "gpu_us": side.gpu_us,
        "ops": [
            {"name": o.name, "calls": o.calls, "self_us": o.self_us, "total_us": o.total_us}
            for o in side.ops
        ],
    }


def summary_json(summary: TraceSummary, findings: Sequence[Finding] = ()) -> dict[str, Any]:
    """One rank of ``gputui analyze --json`` (docs/json.md)."""
    m = summary.metrics
    out: dict[str, Any] = {
        "rank": summary.rank,
        "rank_from": summary.rank_from,
        "path": summary.path,
        "world_size": summary.world_size,
        "device": {
            "name": summary.device_name,
            "total_memory_bytes": summary.device_memory_bytes,
            "compute_capability": summary.compute_capability,
            "rocm": summary.rocm,
        },
        "events": summary.events,
        "gpu_activities": summary.gpu_activities,
        "steps": list(summary.steps),
    }
    out.update(m.to_wire())
    out["kernels"] = [
        {**k.to_wire(), "short_name": short_kernel_name(k.name)} for k in summary.kernels
    ]
    out["kernel_names"] = summary.kernel_names
    out["kernel_total_us"] = summary.kernel_total_us
    out["kernel_calls"] = summary.kernel_calls
    out["kernel_us_by_class"] = dict(summary.kernel_us_by_class)
    out["collectives"] = [collective_json(c) for c in summary.collectives]
    out["cpu_ops"] = [o.to_wire() for o in summary.cpu_ops]
    out["cpu_op_names"] = summary.cpu_op_names
    out["cpu_self_total_us"] = summary.cpu_self_total_us
    window = summary.window_us
    out["window"] = {
        "kind": summary.window_kind,
        "start_us": None if window is None else window[0],
        "end_us": None if window is None else window[1],
        "us": None if window is None else window[1] - window[0],
    }
    out["setup"] = outside_json(summary.setup)
    out["teardown"] = outside_json(summary.teardown)
    sanity = summary.sanity
    out["sanity"] = {
        "kernels_launched": sanity.kernels_launched,
        "kernels_before_launch": sanity.kernels_before_launch,
        "kernel_launch_calls": sanity.kernel_launch_calls,
        "kernel_records": sanity.kernel_records,
        "kernel_exact_us": round(sanity.kernel_exact_us, 3),
        "kernel_counted_us": sanity.kernel_counted_us,
        "kernels_in_window": sanity.kernels_in_window,
        "kernels_under_10us": sanity.kernels_under_10us,
        "graph_captures": sanity.graph_captures,
        "graph_capture_us": sanity.graph_capture_us,
        "blind_waits": sanity.blind_waits,
        "blind_wait_us": sanity.blind_wait_us,
        "setup_calls": sanity.setup_calls,
        "setup_call_us": sanity.setup_call_us,
        "setup_by_name": [
            {"name": name, "calls": n, "us": us} for name, n, us in sanity.setup_by_name
        ],
        "python_frames": [{"name": name, "us": us} for name, us in sanity.python_frames],
        "python_packages": [{"name": name, "us": us} for name, us in sanity.python_packages],
        "warmup_calls": sanity.warmup_calls,
        "warmup_us": sanity.warmup_us,
        "warmup_by_name": [
            {"name": name, "calls": n, "us": us} for name, n, us in sanity.warmup_by_name
        ],
        "micro_batches": sanity.micro_batches,
        "optimizer_launch_share": sanity.optimizer_launch_share,
    }
    out["warnings"] = warnings(summary)
    out["findings"] = [f.to_json() for f in findings]
    return out
