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
from dataclasses import dataclass
from typing import Any

from gputui.protocol import fields as f
from gputui.protocol.fields import SchemaError

_BIG = 1e15  # microseconds: a bound no real trace reaches
MAX_STREAMS = 1024
MAX_STEPS = 10_000


def _pct(part: float, whole: float) -> float | None:
    return round(100.0 * part / whole, 2) if whole > 0 else None


def _us(obj: Mapping[str, Any], key: str, where: str) -> float:
    return f.number(obj, key, where, hi=_BIG, default=0.0)  # type: ignore[no-any-return]


def _opt_us(obj: Mapping[str, Any], key: str, where: str) -> float | None:
    return f.opt_number(obj, key, where, hi=_BIG)


def _typed(obj: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise SchemaError(where, "expected a JSON object")
    return obj


@dataclass(frozen=True)
class TemporalBreakdown:
    """HTA's temporal breakdown: over the span from the first GPU activity's
    start to the last one's end, the time no activity ran (idle), the union of
    computation kernels (compute), and the rest (memcpy, memset, communication
    not overlapped by computation: non-compute)."""

    span_us: float
    idle_us: float
    compute_us: float
    non_compute_us: float

    @property
    def idle_pct(self) -> float | None:
        return _pct(self.idle_us, self.span_us)

    @property
    def compute_pct(self) -> float | None:
        return _pct(self.compute_us, self.span_us)

    @property
    def non_compute_pct(self) -> float | None:
        return _pct(self.non_compute_us, self.span_us)

    @classmethod
    def from_wire(cls, obj: Any, where: str = "temporal") -> TemporalBreakdown:
        obj = _typed(obj, where)
        return cls(
            span_us=_us(obj, "span_us", where),
            idle_us=_us(obj, "idle_us", where),
            compute_us=_us(obj, "compute_us", where),
            non_compute_us=_us(obj, "non_compute_us", where),
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "span_us": self.span_us,
            "idle_us": self.idle_us,
            "compute_us": self.compute_us,
            "non_compute_us": self.non_compute_us,
            "idle_pct": self.idle_pct,
            "compute_pct": self.compute_pct,
            "non_compute_pct": self.non_compute_pct,
        }


@dataclass(frozen=True)
class StreamIdle:
    """The gaps between consecutive activities on one stream, by cause."""

    stream: int
    host_wait_us: float = 0.0
    kernel_wait_us: float = 0.0
    other_us: float = 0.0

    @property
    def idle_us(self) -> float:
        return self.host_wait_us + self.kernel_wait_us + self.other_us

    @classmethod
    def from_wire(cls, obj: Any, where: str) -> StreamIdle:
        obj = _typed(obj, where)
        return cls(
            stream=f.integer(obj, "stream", where, lo=-1, hi=2**63 - 1),
            host_wait_us=f.number(obj, "host_wait_us", where, lo=-_BIG, hi=_BIG, default=0.0),
            kernel_wait_us=f.number(obj, "kernel_wait_us", where, lo=-_BIG, hi=_BIG, default=0.0),
            other_us=f.number(obj, "other_us", where, lo=-_BIG, hi=_BIG, default=0.0),
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "host_wait_us": self.host_wait_us,
            "kernel_wait_us": self.kernel_wait_us,
            "other_us": self.other_us,
        }


@dataclass(frozen=True)
class IdleBreakdown:
    """HTA's idle-time breakdown, summed over the streams: a gap before an
    activity is host wait when its launch call started after the previous
    activity on the stream ended (the host was late), kernel wait when shorter
    than 30 µs (back-to-back launch overhead), else other.  Shares are of this
    idle time (the sum of per-stream gaps, not the temporal idle time)."""

    host_wait_us: float
    kernel_wait_us: float
    other_us: float
    streams: tuple[StreamIdle, ...] = ()

    @property
    def idle_us(self) -> float:
        return self.host_wait_us + self.kernel_wait_us + self.other_us

    @property
    def host_wait_pct(self) -> float | None:
        return _pct(self.host_wait_us, self.idle_us)

    @property
    def kernel_wait_pct(self) -> float | None:
        return _pct(self.kernel_wait_us, self.idle_us)

    @property
    def other_pct(self) -> float | None:
        return _pct(self.other_us, self.idle_us)

    @classmethod
    def from_wire(cls, obj: Any, where: str = "idle_breakdown") -> IdleBreakdown:
        obj = _typed(obj, where)
        return cls(
            host_wait_us=f.number(obj, "host_wait_us", where, lo=-_BIG, hi=_BIG, default=0.0),
            kernel_wait_us=f.number(obj, "kernel_wait_us", where, lo=-_BIG, hi=_BIG, default=0.0),
            other_us=f.number(obj, "other_us", where, lo=-_BIG, hi=_BIG, default=0.0),
            streams=tuple(
                StreamIdle.from_wire(s, f"{where}.streams[{i}]")
                for i, s in enumerate(f.items(obj, "streams", where, MAX_STREAMS))
            ),
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "host_wait_us": self.host_wait_us,
            "kernel_wait_us": self.kernel_wait_us,
            "other_us": self.other_us,
            "host_wait_pct": self.host_wait_pct,
            "kernel_wait_pct": self.kernel_wait_pct,
            "other_pct": self.other_pct,
            "streams": [s.to_wire() for s in self.streams],
        }


@dataclass(frozen=True)
class LaunchStats:
    """HTA's kernel launch statistics: each launch call (``cudaLaunchKernel``,
    ``cudaLaunchKernelExC``, ``cudaMemcpyAsync``, ``cudaMemsetAsync``) joined to
    the GPU work it queued by correlation id.  Launch delay = the work's start
    minus the call's end (0 when negative)."""

    launches: int
    #: the call took <= 50 µs and the GPU work was shorter than the call
    short_kernels: int = 0
    #: the call itself took > 50 µs
    runtime_outliers: int = 0
    #: the work started > 100 µs after the call returned
    launch_delay_outliers: int = 0
    runtime_us_mean: float | None = None
    runtime_us_p95: float | None = None
    gpu_us_median: float | None = None
    launch_delay_us_mean: float | None = None
    launch_delay_us_median: float | None = None
    launch_delay_us_p95: float | None = None
    launch_delay_us_max: float | None = None

    @property
    def short_kernel_pct(self) -> float | None:
        return _pct(self.short_kernels, self.launches)

    _TIMES = (
        "runtime_us_mean",
        "runtime_us_p95",
        "gpu_us_median",
        "launch_delay_us_mean",
        "launch_delay_us_median",
        "launch_delay_us_p95",
        "launch_delay_us_max",
    )

    @classmethod
    def from_wire(cls, obj: Any, where: str = "launch") -> LaunchStats:
        obj = _typed(obj, where)
        return cls(
            launches=f.integer(obj, "launches", where, default=0),
            short_kernels=f.integer(obj, "short_kernels", where, default=0),
            runtime_outliers=f.integer(obj, "runtime_outliers", where, default=0),
            launch_delay_outliers=f.integer(obj, "launch_delay_outliers", where, default=0),
            **{key: _opt_us(obj, key, where) for key in cls._TIMES},
        )

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "launches": self.launches,
            "short_kernels": self.short_kernels,
            "short_kernel_pct": self.short_kernel_pct,
            "runtime_outliers": self.runtime_outliers,
            "launch_delay_outliers": self.launch_delay_outliers,
        }
        for key in self._TIMES:
            out[key] = getattr(self, key)
        return out


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


@dataclass(frozen=True)
class StepBreakdown:
    """The TensorBoard profiler plugin's step breakdown over all steps: each
    moment of a step goes to the first category active then, in the order of
    :data:`STEP_CATEGORIES` (GPU kernel, memcpy, memset, communication, CUDA
    runtime, DataLoader, CPU op), the rest to other; so the parts add up to
    ``steps_us``.  ``gpu_utilization_pct`` = the union of kernel time within the
    steps over ``steps_us`` (the plugin's "GPU Utilization")."""

    steps: int
    steps_us: float
    kernel_us: float = 0.0
    memcpy_us: float = 0.0
    memset_us: float = 0.0
    communication_us: float = 0.0
    runtime_us: float = 0.0
    dataloader_us: float = 0.0
    cpu_op_us: float = 0.0
    other_us: float = 0.0
    gpu_utilization_pct: float | None = None
    first_step: int | None = None  # N of the first ProfilerStep#N (None: no step marks)
    #: each step's duration, host range extended to the end of the GPU work it launched
    step_us: tuple[float, ...] = ()

    @property
    def step_us_mean(self) -> float | None:
        return self.steps_us / self.steps if self.steps else None

    def category_us(self, category: str) -> float:
        return float(getattr(self, f"{category}_us"))

    def category_pct(self, category: str) -> float | None:
        return _pct(self.category_us(category), self.steps_us)

    @classmethod
    def from_wire(cls, obj: Any, where: str = "step_breakdown") -> StepBreakdown:
        obj = _typed(obj, where)
        step_us = f.items(obj, "step_us", where, MAX_STEPS)
        return cls(
            steps=f.integer(obj, "steps", where, default=0),
            steps_us=_us(obj, "steps_us", where),
            **{f"{c}_us": _us(obj, f"{c}_us", where) for c in STEP_CATEGORIES},
            gpu_utilization_pct=f.opt_number(obj, "gpu_utilization_pct", where, hi=100.0 + 1e-6),
            first_step=f.opt_integer(obj, "first_step", where),
            step_us=tuple(
                f.check_number(v, f"{where}.step_us[{i}]", 0.0, _BIG) for i, v in enumerate(step_us)
            ),
        )

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"steps": self.steps, "steps_us": self.steps_us}
        for c in STEP_CATEGORIES:
            out[f"{c}_us"] = self.category_us(c)
        for c in STEP_CATEGORIES:
            out[f"{c}_pct"] = self.category_pct(c)
        out["gpu_utilization_pct"] = self.gpu_utilization_pct
        out["first_step"] = self.first_step
        out["step_us"] = list(self.step_us[:MAX_STEPS])
        return out


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


@dataclass(frozen=True)
class StepAccount:
    """Where a step's wall time goes, as exclusive buckets that sum to the step:
    each bucket takes only time no earlier bucket (:data:`ACCOUNT_BUCKETS`)
    claimed.  Means per step, microseconds, over ``steps`` profiled steps.  The
    GPU side: the union of GPU activity inside the step (busy) and the rest.
    Definitions in docs/analyzer.md ("The step's time account")."""

    steps: int
    step_us: float
    data_us: float = 0.0
    phase_us: float = 0.0
    comm_us: float = 0.0
    sync_us: float = 0.0
    launch_us: float = 0.0
    dispatch_us: float = 0.0
    python_us: float = 0.0
    #: the step's time past the host's own (the ``ProfilerStep`` range stretched
    #: to the end of the GPU work launched in it): the CPU ran ahead and the step
    #: waited for the GPU (0 in an older hook's account)
    ahead_us: float = 0.0
    gpu_busy_us: float | None = None
    #: calls per step of the synchronizing and the launching runtime calls
    sync_calls_per_step: float = 0.0
    launch_calls_per_step: float = 0.0
    #: the GPU's idle time per step by what the host did meanwhile (a host
    #: bucket; "sync": the GPU drained while the CPU waited, then idled until the
    #: CPU queued work again); None in an older hook's account
    gpu_idle_us: Mapping[str, float] | None = None
    #: the GPU's compute kernels per step, and communication kernels and copies
    #: (memcpy, memset) where no compute runs (exposed); None in an older
    #: hook's account
    gpu_compute_us: float | None = None
    gpu_comm_us: float | None = None
    gpu_copy_us: float | None = None

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

    @classmethod
    def from_wire(cls, obj: Any, where: str = "account") -> StepAccount:
        obj = _typed(obj, where)
        return cls(
            steps=f.integer(obj, "steps", where, 0, MAX_STEPS, default=0),
            step_us=_us(obj, "step_us", where),
            **{f"{b}_us": _us(obj, f"{b}_us", where) for b in ACCOUNT_BUCKETS},
            gpu_busy_us=_opt_us(obj, "gpu_busy_us", where),
            sync_calls_per_step=f.number(obj, "sync_calls_per_step", where, hi=_BIG, default=0.0),
            launch_calls_per_step=f.number(
                obj, "launch_calls_per_step", where, hi=_BIG, default=0.0
            ),
            gpu_idle_us=_idle_by_bucket(obj, where),
            gpu_compute_us=_opt_us(obj, "gpu_compute_us", where),
            gpu_comm_us=_opt_us(obj, "gpu_comm_us", where),
            gpu_copy_us=_opt_us(obj, "gpu_copy_us", where),
        )

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"steps": self.steps, "step_us": self.step_us}
        for b in ACCOUNT_BUCKETS:
            out[f"{b}_us"] = self.bucket_us(b)
            out[f"{b}_pct"] = _pct(self.bucket_us(b), self.step_us)
        out["gpu_busy_us"] = self.gpu_busy_us
        out["sync_calls_per_step"] = self.sync_calls_per_step
        out["launch_calls_per_step"] = self.launch_calls_per_step
        if self.gpu_idle_us is not None:
            out["gpu_idle_us"] = dict(self.gpu_idle_us)
        for part in ("compute", "comm", "copy"):
            value = getattr(self, f"gpu_{part}_us")
            if value is not None:
                out[f"gpu_{part}_us"] = value
        return out

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


def _idle_by_bucket(obj: Mapping[str, Any], where: str) -> dict[str, float] | None:
    raw = f.child(obj, "gpu_idle_us", where)
    if raw is None:
        return None
    return {b: _us(raw, b, f"{where}.gpu_idle_us") for b in HOST_BUCKETS if b in raw}


@dataclass(frozen=True)
class JobMarkers:
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
    collectives: tuple[str, ...] = ()
    #: "flash", "efficient", "cudnn", "math"
    attention: tuple[str, ...] = ()
    #: what the SDPA calls' own ops and kernels show of their inputs: "mask" (an
    #: attn_mask was prepared for the kernel), "causal" (the math backend built
    #: the is_causal mask), "upcast" (the math backend cast 16-bit inputs to
    #: fp32), "dropout" (dropout ran inside the attention)
    attention_inputs: tuple[str, ...] = ()

    @property
    def training(self) -> bool:
        return self.backward or self.optimizer

    @classmethod
    def from_wire(cls, obj: Any, where: str = "markers") -> JobMarkers:
        obj = _typed(obj, where)
        return cls(
            compiled=f.flag(obj, "compiled", where),
            cuda_graphs=f.flag(obj, "cuda_graphs", where),
            backward=f.flag(obj, "backward", where),
            optimizer=f.flag(obj, "optimizer", where),
            collectives=tuple(f.texts(obj, "collectives", where, 16)),
            attention=tuple(f.texts(obj, "attention", where, 8)),
            attention_inputs=tuple(f.texts(obj, "attention_inputs", where, 8, 16)),
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "compiled": self.compiled,
            "cuda_graphs": self.cuda_graphs,
            "backward": self.backward,
            "optimizer": self.optimizer,
            "collectives": list(self.collectives),
            "attention": list(self.attention),
            "attention_inputs": list(self.attention_inputs),
        }


@dataclass(frozen=True)
class TraceMetrics:
    """All of a trace's (or a capture's) timeline metrics.  A part is None where
    the trace has nothing to compute it from (no GPU activity, no launch calls,
    no communication).

    The HTA parts (``temporal``, ``idle_breakdown``, ``comm_compute_overlap_pct``,
    ``launch``) cover HTA's window: the last ``ProfilerStep`` is left out when
    ``last_step_dropped``.  ``step_breakdown`` covers the plugin's steps."""

    steps_total: int = 0  # host-side ProfilerStep ranges in the trace
    last_step_dropped: bool = False
    temporal: TemporalBreakdown | None = None
    idle_breakdown: IdleBreakdown | None = None
    #: |computation ∩ communication| / |communication|, in percent
    comm_compute_overlap_pct: float | None = None
    launch: LaunchStats | None = None
    step_breakdown: StepBreakdown | None = None
    #: the step's time account (absent from captures of an older hook)
    account: StepAccount | None = None
    #: what kind of job it is (absent from captures of an older hook)
    markers: JobMarkers | None = None

    @classmethod
    def from_wire(cls, obj: Any, where: str = "trace_metrics") -> TraceMetrics:
        obj = _typed(obj, where)
        temporal = f.child(obj, "temporal", where)
        idle = f.child(obj, "idle_breakdown", where)
        launch = f.child(obj, "launch", where)
        steps = f.child(obj, "step_breakdown", where)
        account = f.child(obj, "account", where)
        markers = f.child(obj, "markers", where)
        return cls(
            steps_total=f.integer(obj, "steps_total", where, default=0),
            last_step_dropped=f.flag(obj, "last_step_dropped", where),
            temporal=None
            if temporal is None
            else TemporalBreakdown.from_wire(temporal, where + ".temporal"),
            idle_breakdown=None
            if idle is None
            else IdleBreakdown.from_wire(idle, where + ".idle_breakdown"),
            comm_compute_overlap_pct=f.opt_number(
                obj, "comm_compute_overlap_pct", where, hi=100.0 + 1e-6
            ),
            launch=None if launch is None else LaunchStats.from_wire(launch, where + ".launch"),
            step_breakdown=None
            if steps is None
            else StepBreakdown.from_wire(steps, where + ".step_breakdown"),
            account=None if account is None else StepAccount.from_wire(account, where + ".account"),
            markers=None if markers is None else JobMarkers.from_wire(markers, where + ".markers"),
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "steps_total": self.steps_total,
            "last_step_dropped": self.last_step_dropped,
            "temporal": None if self.temporal is None else self.temporal.to_wire(),
            "idle_breakdown": None
            if self.idle_breakdown is None
            else self.idle_breakdown.to_wire(),
            "comm_compute_overlap_pct": self.comm_compute_overlap_pct,
            "launch": None if self.launch is None else self.launch.to_wire(),
            "step_breakdown": None
            if self.step_breakdown is None
            else self.step_breakdown.to_wire(),
            "account": None if self.account is None else self.account.to_wire(),
            "markers": None if self.markers is None else self.markers.to_wire(),
        }
