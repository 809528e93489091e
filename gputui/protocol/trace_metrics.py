"""Trace metrics as values: the breakdowns Holistic Trace Analysis and the
TensorBoard profiler plugin compute, as a capture result carries them and as
``gputui analyze`` reports them (standard library only).

Computed by :mod:`gputui.trace.trace_metrics` (definitions there and in
docs/analyze.md).  Times are microseconds; every ``*_pct`` is a property derived
from them (sent on the wire for readers, ignored when read back).  See
:mod:`gputui.protocol.schema` for the conventions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, overload

from gputui.protocol import fields as f
from gputui.protocol import spec
from gputui.protocol.value import value_class

_BIG = 1e15  # microseconds: a bound no real trace reaches
MAX_STREAMS = 1024
MAX_STEPS = 10_000


def _pct(part: float, whole: float) -> float | None:
    return round(100.0 * part / whole, 2) if whole > 0 else None


class _Percent:
    """A read-only attribute: one of the value's attributes as a percentage of
    another, to 2 decimals (None when the whole is not positive)."""

    def __init__(self, part: str, whole: str) -> None:
        self.part = part
        self.whole = whole

    @overload
    def __get__(self, obj: None, owner: type) -> _Percent: ...
    @overload
    def __get__(self, obj: object, owner: type) -> float | None: ...
    def __get__(self, obj: object, owner: type) -> _Percent | float | None:
        if obj is None:
            return self
        return _pct(getattr(obj, self.part), getattr(obj, self.whole))


def _us(**kw: Any) -> Any:
    """Microseconds (absent: 0)."""
    return spec.number(0.0, hi=_BIG, **kw)


def _us_required(**kw: Any) -> Any:
    """Microseconds the class requires (the wire's default: 0)."""
    return spec.number(hi=_BIG, missing=0.0, **kw)


def _gap_us(**kw: Any) -> Any:
    """Microseconds of a gap between activities (may be negative)."""
    return spec.number(lo=-_BIG, hi=_BIG, missing=0.0, **kw)


def _opt_us(**kw: Any) -> Any:
    return spec.number(None, hi=_BIG, **kw)


@spec.value("temporal")
@value_class
class TemporalBreakdown(spec.Wire):
    """HTA's temporal breakdown: over the span from the first GPU activity's
    start to the last one's end, the time no activity ran (idle), the union of
    computation kernels (compute), and the rest (memcpy, memset, communication
    not overlapped by computation: non-compute)."""

    span_us: float = _us_required()
    idle_us: float = _us_required()
    compute_us: float = _us_required()
    non_compute_us: float = _us_required(then=("idle_pct", "compute_pct", "non_compute_pct"))

    idle_pct = _Percent("idle_us", "span_us")
    compute_pct = _Percent("compute_us", "span_us")
    non_compute_pct = _Percent("non_compute_us", "span_us")


class _Gaps:
    """Idle gaps by cause, and their sum."""

    host_wait_us: float
    kernel_wait_us: float
    other_us: float

    @property
    def idle_us(self) -> float:
        return self.host_wait_us + self.kernel_wait_us + self.other_us


@spec.value("stream")
@value_class
class StreamIdle(_Gaps, spec.Wire):
    """The gaps between consecutive activities on one stream, by cause."""

    stream: int = spec.integer(lo=-1, hi=2**63 - 1)
    host_wait_us: float = _gap_us(default=0.0)
    kernel_wait_us: float = _gap_us(default=0.0)
    other_us: float = _gap_us(default=0.0)


@spec.value("idle_breakdown")
@value_class
class IdleBreakdown(_Gaps, spec.Wire):
    """HTA's idle-time breakdown, summed over the streams: a gap before an
    activity is host wait when its launch call started after the previous
    activity on the stream ended (the host was late), kernel wait when shorter
    than 30 µs (back-to-back launch overhead), else other.  Shares are of this
    idle time (the sum of per-stream gaps, not the temporal idle time)."""

    host_wait_us: float = _gap_us()
    kernel_wait_us: float = _gap_us()
    other_us: float = _gap_us(then=("host_wait_pct", "kernel_wait_pct", "other_pct"))
    streams: tuple[StreamIdle, ...] = spec.rows(StreamIdle, MAX_STREAMS)

    host_wait_pct = _Percent("host_wait_us", "idle_us")
    kernel_wait_pct = _Percent("kernel_wait_us", "idle_us")
    other_pct = _Percent("other_us", "idle_us")


@spec.value("launch")
@value_class
class LaunchStats(spec.Wire):
    """HTA's kernel launch statistics: each launch call (``cudaLaunchKernel``,
    ``cudaLaunchKernelExC``, ``cudaMemcpyAsync``, ``cudaMemsetAsync``) joined to
    the GPU work it queued by correlation id.  Launch delay = the work's start
    minus the call's end (0 when negative)."""

    launches: int = spec.integer(missing=0)
    #: the call took <= 50 µs and the GPU work was shorter than the call
    short_kernels: int = spec.integer(0, then=("short_kernel_pct",))
    #: the call itself took > 50 µs
    runtime_outliers: int = 0
    #: the work started > 100 µs after the call returned
    launch_delay_outliers: int = 0
    runtime_us_mean: float | None = _opt_us()
    runtime_us_p95: float | None = _opt_us()
    gpu_us_median: float | None = _opt_us()
    launch_delay_us_mean: float | None = _opt_us()
    launch_delay_us_median: float | None = _opt_us()
    launch_delay_us_p95: float | None = _opt_us()
    launch_delay_us_max: float | None = _opt_us()

    short_kernel_pct = _Percent("short_kernels", "launches")


#: the TensorBoard plugin's step-time categories, in the order they claim time
STEP_CATEGORIES = (
    "kernel",
    "memcpy",
    "memset",
    "communication",
    "runtime",
    "dataloader",
    "cpu_op",
    "other",
)


def _step_times(obj: Mapping[str, Any], key: str, where: str) -> tuple[float, ...]:
    return tuple(
        f.check_number(v, f"{where}.{key}[{i}]", 0.0, _BIG)
        for i, v in enumerate(f.items(obj, key, where, MAX_STEPS))
    )


def _category(**kw: Any) -> Any:
    """A step-time category's microseconds (written as a float)."""
    return _us(write="float({v})", **kw)


def _category_pcts(breakdown: StepBreakdown) -> dict[str, float | None]:
    return {f"{c}_pct": breakdown.category_pct(c) for c in STEP_CATEGORIES}


@spec.value("step_breakdown")
@value_class
class StepBreakdown(spec.Wire):
    """The TensorBoard profiler plugin's step breakdown over all steps: each
    moment of a step goes to the first category active then, in the order of
    :data:`STEP_CATEGORIES` (GPU kernel, memcpy, memset, communication, CUDA
    runtime, DataLoader, CPU op), the rest to other; so the parts add up to
    ``steps_us``.  ``gpu_utilization_pct`` = the union of kernel time within the
    steps over ``steps_us`` (the plugin's "GPU Utilization").  The categories'
    shares of ``steps_us`` follow them on the wire."""

    steps: int = spec.integer(missing=0)
    steps_us: float = _us_required()
    kernel_us: float = _category()
    memcpy_us: float = _category()
    memset_us: float = _category()
    communication_us: float = _category()
    runtime_us: float = _category()
    dataloader_us: float = _category()
    cpu_op_us: float = _category()
    other_us: float = _category(then=_category_pcts)
    gpu_utilization_pct: float | None = spec.number(None, hi=100.0 + 1e-6)
    #: N of the first ProfilerStep#N (None: no step marks)
    first_step: int | None = None
    #: each step's duration, host range extended to the end of the GPU work it launched
    step_us: tuple[float, ...] = spec.field(
        _step_times, default=(), write=lambda v: list(v[:MAX_STEPS])
    )

    @property
    def step_us_mean(self) -> float | None:
        return self.steps_us / self.steps if self.steps else None

    def category_us(self, category: str) -> float:
        return float(getattr(self, f"{category}_us"))

    def category_pct(self, category: str) -> float | None:
        return _pct(self.category_us(category), self.steps_us)


#: the step's time account's buckets, in the order they claim time (DESIGN §10):
#: data wait, user phases, communication, host sync wait, kernel launch, torch
#: dispatch, and Python outside torch (what no other bucket claimed)
ACCOUNT_BUCKETS = ("data", "phase", "comm", "sync", "launch", "dispatch", "python", "ahead")
ACCOUNT_LABELS = {
    "data": "data wait",
    "phase": "user phases",
    "comm": "communication",
    "sync": "host sync wait",
    "launch": "kernel launch",
    "dispatch": "torch dispatch",
    "python": "Python outside torch",
    "ahead": "CPU ahead of the GPU",
}
#: a job without a GPU: torch's ops run on the CPU, and the time they take there
#: is the step's compute, not a dispatch on the way to a GPU (the same bucket,
#: named for what it is)
CPU_JOB_LABELS = {"dispatch": "torch ops (compute)"}


def account_label(bucket: str, cuda: bool = True) -> str:
    """A bucket's name in the step's account; ``cuda``: the job runs on a GPU."""
    if not cuda and bucket in CPU_JOB_LABELS:
        return CPU_JOB_LABELS[bucket]
    return ACCOUNT_LABELS[bucket]


#: the buckets of the host's own time in a step (all but the time the CPU ran
#: ahead of the GPU and the step waited for the GPU's work)
HOST_BUCKETS = ACCOUNT_BUCKETS[:-1]


def _bucket(bucket: str) -> Any:
    """An account bucket's microseconds, its share of the step after it."""

    def pct(account: StepAccount) -> dict[str, float | None]:
        return {f"{bucket}_pct": _pct(account.bucket_us(bucket), account.step_us)}

    return _us(write="float({v})", then=pct)


def _idle_by_bucket(obj: Mapping[str, Any], key: str, where: str) -> dict[str, float] | None:
    raw = f.child(obj, key, where)
    if raw is None:
        return None
    here = f"{where}.{key}"
    return {b: f.number(raw, b, here, hi=_BIG, default=0.0) for b in HOST_BUCKETS if b in raw}


#: the most ops an account's synchronizing calls are given to, and the length of a name
MAX_SYNC_OPS = 8
MAX_OP_NAME = 4096


def _sync_ops(obj: Mapping[str, Any], key: str, where: str) -> dict[str, float] | None:
    raw = f.child(obj, key, where)
    if raw is None:
        return None
    here = f"{where}.{key}"
    return {
        str(k)[:MAX_OP_NAME]: f.check_number(v, f"{here}.{k}", 0.0, _BIG)
        for k, v in list(raw.items())[:MAX_SYNC_OPS]
    }


@spec.value("account")
@value_class
class StepAccount(spec.Wire):
    """Where a step's wall time goes, as exclusive buckets that sum to the step:
    each bucket takes only time no earlier bucket (:data:`ACCOUNT_BUCKETS`)
    claimed.  Means per step, microseconds, over ``steps`` profiled steps.  The
    GPU side: the union of GPU activity inside the step (busy) and the rest.
    Definitions in docs/analyzer.md ("The step's time account").  Each bucket's
    share of the step follows it on the wire."""

    steps: int = spec.integer(hi=MAX_STEPS, missing=0)
    step_us: float = _us_required()
    data_us: float = _bucket("data")
    phase_us: float = _bucket("phase")
    comm_us: float = _bucket("comm")
    sync_us: float = _bucket("sync")
    launch_us: float = _bucket("launch")
    dispatch_us: float = _bucket("dispatch")
    python_us: float = _bucket("python")
    #: the step's time past the host's own (the ``ProfilerStep`` range stretched
    #: to the end of the GPU work launched in it): the CPU ran ahead and the step
    #: waited for the GPU (0 in an older hook's account)
    ahead_us: float = _bucket("ahead")
    gpu_busy_us: float | None = _opt_us()
    #: calls per step of the synchronizing and the launching runtime calls
    sync_calls_per_step: float = _us()
    launch_calls_per_step: float = _us()
    #: the GPU's idle time per step by what the host did meanwhile (a host
    #: bucket; "sync": the GPU drained while the CPU waited, then idled until the
    #: CPU queued work again); None (absent on the wire) in an older hook's account
    gpu_idle_us: Mapping[str, float] | None = spec.field(
        _idle_by_bucket, default=None, write="dict({v})", omit_none=True
    )
    #: the GPU's compute kernels per step, and communication kernels and copies
    #: (memcpy, memset) where no compute runs (exposed); None (absent on the
    #: wire) in an older hook's account
    gpu_compute_us: float | None = _opt_us(omit_none=True)
    gpu_comm_us: float | None = _opt_us(omit_none=True)
    gpu_copy_us: float | None = _opt_us(omit_none=True)
    #: of the synchronizing calls per step, the copies to the GPU from pageable
    #: memory and to pageable host memory (each blocks the CPU); None (absent on
    #: the wire) in an older hook's account
    blocking_h2d_per_step: float | None = _opt_us(omit_none=True)
    blocking_d2h_per_step: float | None = _opt_us(omit_none=True)
    #: the other synchronizing calls per step (cudaStreamSynchronize, ...) by the
    #: op they ran in ("" outside any op), the most first; None (absent on the
    #: wire) in an older account
    sync_ops_per_step: Mapping[str, float] | None = spec.field(
        _sync_ops, default=None, write="dict({v})", omit_none=True
    )
    #: the time per step (us) the CPU spent in the blocking copies' calls by
    #: direction, and in the other synchronizing calls by the op they ran in
    #: (the same keys as sync_ops_per_step): what each source of waiting
    #: costs, which orders them; None (absent on the wire) in an older account
    blocking_h2d_us_per_step: float | None = _opt_us(omit_none=True)
    blocking_d2h_us_per_step: float | None = _opt_us(omit_none=True)
    sync_ops_us_per_step: Mapping[str, float] | None = spec.field(
        _sync_ops, default=None, write="dict({v})", omit_none=True
    )
    #: of ``python_us``, the time inside the model's module calls (a Python frame
    #: of ``nn.Module``'s call on the trace's Python stack), less a numeric
    #: library's code there: the model's own Python around the ops it issues.
    #: Only a trace recorded with Python stacks tells it; None (absent on the
    #: wire) elsewhere
    model_python_us: float | None = _opt_us(omit_none=True)

    def bucket_us(self, bucket: str) -> float:
        return float(getattr(self, f"{bucket}_us"))

    def share(self, bucket: str) -> float:
        """The bucket's share of the step, 0..1."""
        return self.bucket_us(bucket) / self.step_us if self.step_us > 0 else 0.0

    @property
    def largest(self) -> str:
        """The bucket that holds most of the step."""
        return max(ACCOUNT_BUCKETS, key=self.bucket_us)

    @property
    def gpu_busy_share(self) -> float | None:
        if self.gpu_busy_us is None or self.step_us <= 0:
            return None
        return min(1.0, self.gpu_busy_us / self.step_us)

    @property
    def model_python_share(self) -> float:
        """The share of the step in the model's own Python (``model_python_us``,
        at most the Python bucket; 0 where the trace's stack did not tell it)."""
        model = self.model_python_us
        if not model or self.step_us <= 0:
            return 0.0
        return min(model, self.python_us) / self.step_us

    def gpu_part_share(self, part: str) -> float | None:
        """The step's share of GPU ``part`` ("compute", "comm": communication
        kernels where no compute runs, "copy": copies where neither runs)."""
        value = getattr(self, f"gpu_{part}_us")
        return None if value is None or self.step_us <= 0 else min(1.0, value / self.step_us)

    def idle_share(self, bucket: str) -> float | None:
        """The GPU's idle time while the host was in ``bucket``, as a share of the
        step (None: an older account that did not split it)."""
        if self.gpu_idle_us is None or self.step_us <= 0:
            return None
        return self.gpu_idle_us.get(bucket, 0.0) / self.step_us


@spec.value("markers")
@value_class
class JobMarkers(spec.Wire):
    """What kind of job the timeline is, from the names in it
    (:mod:`gputui.trace.markers`): compiled by torch.compile, run in CUDA graphs,
    with a backward pass and an optimizer (training) or not, the collectives
    and the SDPA backends it used."""

    compiled: bool = False
    cuda_graphs: bool = False
    backward: bool = False
    optimizer: bool = False
    #: "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv",
    #: "broadcast"
    collectives: tuple[str, ...] = spec.texts(16)
    #: "flash", "efficient", "cudnn", "math"
    attention: tuple[str, ...] = spec.texts(8)
    #: what the SDPA calls' own ops and kernels show of their inputs: "mask" (an
    #: attn_mask was prepared for the kernel), "causal" (the math backend built
    #: the is_causal mask), "upcast" (the math backend cast 16-bit inputs to
    #: fp32), "dropout" (dropout ran inside the attention)
    attention_inputs: tuple[str, ...] = spec.texts(8, 16)
    #: where the DataLoader made the batches: "workers" (worker processes) or
    #: "main" (num_workers=0), by the iterator its ``__next__`` range names; None
    #: (absent) where no DataLoader ran, or from an older gputui
    loader: str | None = spec.text(None, 16, omit_none=True)
    #: the training framework whose names the trace holds: "lightning" (its
    #: profiler's ``[pl][…]`` ranges), "transformers" (the HF Trainer's loop in
    #: the Python stack of a trace recorded with_stack); None (absent) otherwise
    framework: str | None = spec.text(None, 32, omit_none=True)
    #: the optimizer's class, as its ``Optimizer.step#CLASS.step`` ranges name
    #: it ("AdamW", "SGD"); None (absent) where none, several, or from an older
    #: gputui
    optimizer_class: str | None = spec.text(None, 64, omit_none=True)
    #: of the window's kernel launch calls, the share made inside torch.compile's
    #: ranges (on their thread): near 1 where the compiled code issues the
    #: step, near 0 where one small region is compiled and the rest runs eager;
    #: None (absent) where nothing is compiled, or from an older gputui
    compiled_launch_share: float | None = spec.number(None, hi=1.0 + 1e-6, omit_none=True)
    #: the optimizer's kernels, by the ops that issue them anywhere in the
    #: timeline: "fused" (``aten::_fused_adamw_`` and the like), "foreach"
    #: (``aten::_foreach_*`` beyond the norm and scaling that gradient clipping
    #: runs); None (absent) where neither ran, or from an older gputui
    optimizer_kernels: str | None = spec.text(None, 16, omit_none=True)

    @property
    def training(self) -> bool:
        return self.backward or self.optimizer


@spec.value("trace_metrics")
@value_class
class TraceMetrics(spec.Wire):
    """All of a trace's (or a capture's) timeline metrics.  A part is None where
    the trace has nothing to compute it from (no GPU activity, no launch calls,
    no communication).

    The HTA parts (``temporal``, ``idle_breakdown``, ``comm_compute_overlap_pct``,
    ``launch``) cover HTA's window: the last ``ProfilerStep`` is left out when
    ``last_step_dropped``.  ``step_breakdown`` covers the plugin's steps."""

    steps_total: int = 0  # host-side ProfilerStep ranges in the trace
    last_step_dropped: bool = False
    temporal: TemporalBreakdown | None = spec.nested(TemporalBreakdown)
    idle_breakdown: IdleBreakdown | None = spec.nested(IdleBreakdown)
    #: |computation ∩ communication| / |communication|, in percent
    comm_compute_overlap_pct: float | None = spec.number(None, hi=100.0 + 1e-6)
    launch: LaunchStats | None = spec.nested(LaunchStats)
    step_breakdown: StepBreakdown | None = spec.nested(StepBreakdown)
    #: the step's time account (absent from captures of an older hook)
    account: StepAccount | None = spec.nested(StepAccount)
    #: what kind of job it is (absent from captures of an older hook)
    markers: JobMarkers | None = spec.nested(JobMarkers)
