"""What the analyzer's rules read: frozen values gathered from a job (its steps,
memory, latest capture and GPU) or from a trace.

Builders here turn the raw inputs (step records, memory samples, a capture
result, device snapshots) into the few numbers rules compare with thresholds,
so that every rule sees the same definitions.  Pure: no I/O, no UI.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING

from gputui.analysis import ledger, thresholds
from gputui.analysis.context import JobContext, job_context
from gputui.analysis.frameworks import GENERATE_OPS, framework_of
from gputui.analysis.gpu_window import GpuWindow
from gputui.analysis.ledger import Ledger
from gputui.analysis.live_account import sampled_python
from gputui.analysis.medians import median
from gputui.analysis.memory import MemoryGrowth, memory_growth
from gputui.analysis.roofline import Roof, RooflineReport
from gputui.analysis.roofline import analyze as place_on_roof
from gputui.analysis.steps import WARMUP_STEPS, StepStats, step_stats
from gputui.protocol.messages import COMM, StepFlag
from gputui.protocol.value import ValueBase, value_class
from gputui.trace import account, kernels

if TYPE_CHECKING:  # annotations only: gputui analyze loads none of these messages
    from gputui.protocol.capture import CaptureResult, CpuOpRow, KernelRow
    from gputui.protocol.compile import CompileReport
    from gputui.protocol.memsnap import MemorySnapshotResult
    from gputui.protocol.op_rows import OpRow
    from gputui.protocol.profile import PythonProfile
    from gputui.protocol.schema import LoaderInfo, MemorySample, StepRecord
    from gputui.protocol.trace_metrics import JobMarkers, StepAccount
    from gputui.snapshot.model import DeviceSnapshot
    from gputui.trace.scan import CollectiveCalls

#: rules about steps stay silent until MIN_STEPS ordinary steps were seen
#: (warm-up and profiled steps are not ordinary); GPU rules until the job's GPU
#: has MIN_GPU_SAMPLES samples (both from the thresholds table; the engine
#: enforces each rule's own minimum)
MIN_STEPS = int(thresholds.value("min.steps"))
MIN_GPU_SAMPLES = int(thresholds.value("min.gpu_samples"))
#: the GPU rules read this many of the newest samples of the job's GPU (about
#: 30 s at the viewer's 1 Hz)
GPU_WINDOW = 30
#: kernels shorter than this are "tiny": launch overhead dominates them
TINY_KERNEL_US = thresholds.value("launch.tiny_kernel_us")
#: a profiled step's launch + dispatch time over the job's own (DESIGN §4: CPU+CUDA
#: profiling slowed a launch-bound H100 step by 75-95%; the low end is taken)
PROFILER_SLOWDOWN = thresholds.value("idle.profiler_slowdown")
#: the ops that pin host memory: the DataLoader's pin-memory thread runs them
#: beside the training thread
PIN_OPS = frozenset({"aten::pin_memory", "aten::_pin_memory"})
#: a torch op this slow a call (self time) computes on the CPU: neither a cost of
#: issuing ops nor slowed down by the profiler
CPU_OP_US = thresholds.value("launch.cpu_op_us")
#: ops placed on the roofline (by GPU time)
ROOFLINE_TOP = 10


# -- a capture ---------------------------------------------------------------------------------
#: CPU-side calls that wait for the GPU (the host synchronises)
SYNC_CALLS = tuple(sorted(account.SYNC_CALLS))
#: CPU ops that copy a GPU value to the host, and so wait for the GPU
READBACK_OPS = ("aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::equal")
#: a tensor's value read as a Python bool (`if tensor:`, `while tensor:`,
#: torch.equal): on a GPU tensor, a read-back
TRUTH_OPS = ("aten::is_nonzero", "aten::equal")
#: the ops whose every call a trace's summary counts in its window, whatever
#: their time (:attr:`CaptureView.op_calls`): the op tables keep the top ones
COUNTED_OPS = (*GENERATE_OPS, *TRUTH_OPS)
_COUNTED = frozenset(COUNTED_OPS)
#: a copy from pageable host memory ("Memcpy HtoD (Pageable -> Device)") or to
#: it ("Memcpy DtoH (Device -> Pageable)")
_PAGEABLE = re.compile(r"^Memcpy (HtoD|DtoH) \([^)]*Pageable", re.IGNORECASE)


#: a conversion: aten::to runs aten::_to_copy inside it when it converts (one
#: conversion, two ops: their self times add up, their calls would count twice)
CAST_OPS = ("aten::to", "aten::_to_copy")


def cast_load(rows: Iterable[CpuOpRow]) -> tuple[float, int, float]:
    """The conversions among CPU op rows: their self time (us), how many, and
    the self time of all the rows (what copy.frequent_casts compares)."""
    us = total = 0.0
    calls = {name: 0 for name in CAST_OPS}
    for o in rows:
        total += o.self_us
        if o.name in calls:
            us += o.self_us
            calls[o.name] += o.calls
    return us, max(calls.values()), total


CASTS_PER_STEP = thresholds.value("copy.casts_per_step")
CAST_CPU_SHARE = thresholds.value("copy.cast_cpu_share")


def many_casts(us: float, calls: int, total_us: float, steps: int) -> bool:
    """copy.frequent_casts' trigger: conversions (:func:`cast_load`) this many
    a step, taking this share of the CPU ops' time."""
    return (
        calls / max(1, steps) >= CASTS_PER_STEP and total_us > 0 and us / total_us >= CAST_CPU_SHARE
    )


def captured_steps(cap: CaptureResult) -> int:
    """The steps a capture recorded: its first to its last step, else (a result
    that does not say them) the steps it was asked to record, which the hook
    records before it stops (at least 1)."""
    if cap.first_step is not None and cap.last_step is not None:
        return max(1, cap.last_step - cap.first_step + 1)
    return max(1, cap.steps or 1)


@value_class
class CaptureView(ValueBase):
    """A capture's (or a trace's) tables, with the derived numbers rules use and
    the attach screen draws: the one view of a :class:`CaptureResult`.  Times are
    microseconds over the whole capture window of ``steps`` steps."""

    steps: int
    span_us: float | None
    busy_us: float | None
    kernel_total_us: float
    kernel_calls: int
    by_class_us: Mapping[str, float]
    kernels: tuple[KernelRow, ...]
    cpu_ops: tuple[CpuOpRow, ...]
    comm_compute_overlap: float | None = None
    trace_path: str | None = None
    #: the step's time account over the captured steps (None: an older hook's)
    account: StepAccount | None = None
    #: what kind of job the capture saw (None: an older hook's)
    markers: JobMarkers | None = None
    #: every op with its input shapes (captures and traces recorded with shapes)
    op_rows: tuple[OpRow, ...] = ()
    #: whether its steps are the job's own (a capture's, a trace's ProfilerStep
    #: marks); False for a trace without marks, whose one step is its whole
    #: window, the program's first iterations (the allocator's warm-up) included
    marked_steps: bool = True
    #: the share of the window's kernels that ran under TINY_KERNEL_US, counted
    #: one by one (a trace's); None: estimated from the kernel rows' means
    tiny_share_counted: float | None = None
    #: a trace's communication kernels in the window, in start order: each its
    #: collective's kind, its start from the window's and its time on the GPU
    #: (µs); () for a capture
    comm_kernels: tuple[tuple[str, float, float], ...] = ()
    #: the conversions (``aten::to``) by the torch op or autograd node each runs
    #: inside, "" for the program's own, the most first: a trace's where they
    #: are many, a capture's where its top ops hold one; () otherwise
    cast_parents: tuple[tuple[str, int], ...] = ()
    #: a trace's collectives in its window by the messages their kernels
    #: record (:func:`gputui.trace.scan.collective_calls`); () for a capture
    collectives: tuple[CollectiveCalls, ...] = ()
    #: a trace's calls of :data:`COUNTED_OPS` in its window
    #: (:attr:`gputui.analysis.trace_summary.TraceSummary.op_calls`); () for a
    #: capture (:meth:`op_count` reads its op table instead)
    op_calls: tuple[tuple[str, int], ...] = ()
    # -- where it comes from (a capture; None for a trace) --------------------------------
    id: str | None = None
    first_step: int | None = None
    last_step: int | None = None
    started_s: float | None = None  #: Unix seconds the profiler started
    events: int | None = None  #: raw profiler events reduced
    trace_error: str | None = None
    error: str | None = None
    #: sent again to a viewer that connected after the capture finished
    replayed: bool = False
    #: a viewer's automatic capture (False from a hook that predates the flag)
    auto: bool = False

    @classmethod
    def of(cls, cap: CaptureResult) -> CaptureView:
        gpu = cap.gpu_time
        return cls(
            steps=captured_steps(cap),
            span_us=None if gpu is None else gpu.span_us,
            busy_us=None if gpu is None else gpu.busy_us,
            kernel_total_us=cap.kernel_total_us,
            kernel_calls=cap.kernel_calls,
            by_class_us=dict(cap.by_class),
            kernels=cap.kernels,
            cpu_ops=cap.cpu_ops,
            comm_compute_overlap=cap.comm_compute_overlap,
            trace_path=cap.trace_path,
            account=None if cap.trace_metrics is None else cap.trace_metrics.account,
            markers=None if cap.trace_metrics is None else cap.trace_metrics.markers,
            op_rows=cap.op_rows,
            id=cap.id,
            first_step=cap.first_step,
            last_step=cap.last_step,
            started_s=cap.started,
            events=cap.events,
            trace_error=cap.trace_error,
            error=cap.error,
            replayed=cap.replay,
            auto=cap.auto,
            cast_parents=cap.cast_parents,
        )

    # -- derived numbers --------------------------------------------------------------------
    @cached_property
    def classes(self) -> tuple[tuple[str, float, float], ...]:
        """(kernel class, microseconds, share of the classes' time), biggest first."""
        total = math.fsum(self.by_class_us.values())
        return tuple(
            (name, us, us / total if total > 0 else 0.0)
            for name, us in sorted(self.by_class_us.items(), key=lambda item: -item[1])
        )

    @property
    def busy_share(self) -> float | None:
        """The share of the step the GPU is busy: from the step's time account
        (GPU activity inside the profiled steps) where there is one, else from
        HTA's span (first to last GPU activity, which leaves out the host time
        before the first kernel)."""
        acct = self.account
        if acct is not None and acct.gpu_busy_us is not None and acct.step_us > 0:
            return acct.gpu_busy_share
        idle = self.idle_share
        return None if idle is None else 1.0 - idle

    @property
    def idle_share(self) -> float | None:
        """GPU idle over the capture span (HTA: span minus the union of activity)."""
        if not self.span_us or self.busy_us is None:
            return None
        return max(0.0, 1.0 - self.busy_us / self.span_us)

    def class_share(self, *classes: str) -> float:
        """Share of all kernel time in these kernel classes (0..1)."""
        total = self.kernel_total_us
        if total <= 0:
            return 0.0
        return self.class_us(*classes) / total

    def class_us(self, *classes: str) -> float:
        """GPU time (us) of the kernels in these kernel classes."""
        return sum(self.by_class_us.get(c, 0.0) for c in classes)

    @property
    def cpu_op_us(self) -> float:
        """Self time (us) of all the capture's CPU ops."""
        return sum(o.self_us for o in self.cpu_ops)

    def cpu_work(self, min_call_us: float) -> list[CpuOpRow]:
        """The torch ops that average ``min_call_us`` or more a call: ops that
        compute on the CPU (a random tensor made there, a sort of a host
        tensor), where issuing an op for the GPU takes microseconds.  Runtime
        calls (a blocking copy, a synchronization) are not ops, and pinning
        (the DataLoader's pin-memory thread, beside the step) does not count."""
        return [
            o
            for o in self.cpu_ops
            if "::" in o.name
            and o.name not in PIN_OPS
            and o.calls
            and o.self_us / o.calls >= min_call_us
        ]

    def cpu_work_us(self, min_call_us: float) -> float:
        """Self time (us) of :meth:`cpu_work`."""
        return sum(o.self_us for o in self.cpu_work(min_call_us))

    @property
    def cpu_work_share(self) -> float:
        """The share of the step torch's ops spent computing on the CPU
        (:meth:`cpu_work_us` of the ops from ``launch.cpu_op_us`` a call), at most
        the account's torch dispatch; 0 without a step account."""
        acct = self.account
        if acct is None or acct.step_us <= 0 or not self.steps:
            return 0.0
        us = self.cpu_work_us(CPU_OP_US)
        return min(acct.share("dispatch"), us / self.steps / acct.step_us) if us else 0.0

    def span_share(self, us: float) -> float | None:
        """``us`` microseconds as a share of the capture span (at most all of it:
        a copy that started before the window counts only inside it)."""
        return min(1.0, us / self.span_us) if self.span_us else None

    @property
    def kernels_per_step(self) -> float:
        return self.kernel_calls / self.steps if self.steps else 0.0

    @property
    def mean_kernel_us(self) -> float | None:
        return self.kernel_total_us / self.kernel_calls if self.kernel_calls else None

    def tiny_kernel_share(self) -> float | None:
        """Share of the kernel launches that ran shorter than TINY_KERNEL_US:
        counted one by one where a trace has them, else the top rows' launches
        whose kernel is that short on average (the top rows cover most launches
        of a step)."""
        if self.tiny_share_counted is not None:
            return self.tiny_share_counted
        calls = sum(k.calls for k in self.kernels if k.kernel_class not in _NOT_KERNELS)
        if not calls:
            return None
        tiny = sum(
            k.calls
            for k in self.kernels
            if k.kernel_class not in _NOT_KERNELS and k.mean_us < TINY_KERNEL_US
        )
        return tiny / calls

    def op(self, name: str) -> CpuOpRow | None:
        return next((o for o in self.cpu_ops if o.name == name), None)

    def op_count(self, names: Iterable[str]) -> int:
        """Calls of the ops with these names: a trace's count of every call
        (:attr:`op_calls`, for :data:`COUNTED_OPS`), else the op table's."""
        wanted = set(names)
        if self.op_calls and wanted <= _COUNTED:
            return sum(n for name, n in self.op_calls if name in wanted)
        return self.ops_us(wanted)[1]

    def ops_us(self, names: Iterable[str]) -> tuple[float, int]:
        """Self time (us) and calls of the CPU ops with these names."""
        wanted = set(names)
        rows = [o for o in self.cpu_ops if o.name in wanted]
        return sum(o.self_us for o in rows), sum(o.calls for o in rows)

    def pageable_copies(self, way: str | None = None) -> tuple[float, int]:
        """GPU time (us) and count of copies from or to pageable host memory
        (``way``: only those ``"HtoD"`` or ``"DtoH"``)."""
        rows = [
            k
            for k in self.kernels
            if (m := _PAGEABLE.match(k.name)) is not None
            and (way is None or m.group(1).lower() == way.lower())
        ]
        return sum(k.total_us for k in rows), sum(k.calls for k in rows)

    def unprofiled_idle(self) -> float | None:
        """The GPU's idle share of the step once the profiler's own CPU cost is
        taken out: the host's own time (the step less the time it ran ahead of
        the GPU) with kernel launch and torch dispatch shrunk by the profiler's
        slowdown (``idle.profiler_slowdown``); the GPU idles only for the
        host time its busy time does not cover.  None without a step account
        with GPU time."""
        acct = self.account
        if acct is None or acct.step_us <= 0:
            return None
        busy = acct.gpu_part_share("compute")
        if busy is None:  # an older hook's account: all GPU activity
            busy = acct.gpu_busy_share
        if busy is None:
            return None
        # what the profiler slows down: issuing ops, not their work on the CPU
        issuing = acct.share("launch") + acct.share("dispatch") - self.cpu_work_share
        cpu = 1.0 - acct.share("ahead") - issuing * (1.0 - 1.0 / PROFILER_SLOWDOWN)
        return max(0.0, cpu - busy) / cpu if cpu > 0 else 0.0

    def name_share(self, match: Callable[[str], bool]) -> float:
        """Share of all kernel time in the kernels whose names ``match`` (0..1)."""
        total = self.kernel_total_us
        if total <= 0:
            return 0.0
        return sum(k.total_us for k in self.kernels if match(k.name)) / total

    def fp32_gemm_share(self, convolutions: bool = False) -> float:
        """Share of kernel time in FP32 GEMMs on the CUDA cores (SIMT sgemm, the
        f32 xmma kernels cuBLAS picks when TF32 is off), and with
        ``convolutions``, in cuDNN's FP32 convolution kernels too."""
        if convolutions:
            return self.name_share(lambda name: is_fp32_gemm(name) or is_fp32_conv(name))
        return self.name_share(is_fp32_gemm)


_NOT_KERNELS = frozenset({kernels.MEMCPY, kernels.MEMSET})
_FP32_GEMM = re.compile(
    r"sgemm|gemm_f32f32_f32f32_f32|_simt_sgemm|cutlass_80_simt_s|volta_sgemm|ampere_sgemm",
    re.IGNORECASE,
)
_TF32 = re.compile(r"tf32|tensorop_s1688|s1688|xmma_gemm_tf32", re.IGNORECASE)


def is_fp32_gemm(name: str) -> bool:
    """A GEMM kernel that runs in full FP32 on the CUDA cores (not TF32 on the
    tensor cores)."""
    return bool(_FP32_GEMM.search(name)) and not _TF32.search(name)


def is_tf32_gemm(name: str) -> bool:
    """A GEMM kernel of FP32 tensors on the TF32 tensor cores (cuBLAS's
    ``f32f32_tf32f32`` xmma kernels, CUTLASS's ``s1688`` tensor ops)."""
    return bool(_TF32.search(name))


def on_tf32(rows: Iterable[KernelRow]) -> bool:
    """Whether the job's FP32 matrix products ran on TF32 tensor cores: its TF32
    GEMM kernels take more time than its FP32 ones on the CUDA cores."""
    tf32 = fp32 = 0.0
    for k in rows:
        if is_tf32_gemm(k.name):
            tf32 += k.total_us
        elif is_fp32_gemm(k.name):
            fp32 += k.total_us
    return tf32 > fp32


#: cuDNN's convolution kernels on the CUDA cores in FP32: the single-precision
#: ``scudnn`` kernels and the templated engines instantiated for ``float``
#: (weight and data gradients, Winograd, FFT)
_FP32_CONV = re.compile(
    r"scudnn|(?:wgrad|dgrad)\w*_engine<float|winograd\w*<float|fft\w*<float", re.IGNORECASE
)


def is_fp32_conv(name: str) -> bool:
    """A convolution kernel of cuDNN's that runs in full FP32 on the CUDA cores
    (one named for the FP32 GEMM it lowers to, ``implicit_convolve_sgemm``, is
    also :func:`is_fp32_gemm`: a share counts each kernel once)."""
    return bool(_FP32_CONV.search(name)) and not _TF32.search(name)


# -- the job ----------------------------------------------------------------------------------
@value_class
class JobEvidence(ValueBase):
    """Everything known about one job over the analyzer's window."""

    #: statistics over ordinary steps (warm-up and profiled steps left out)
    stats: StepStats
    #: all steps in the window, in order (outlier rules read them)
    steps: tuple[StepRecord, ...] = ()
    cuda: bool = False
    phases_coarse: bool = False
    batch_size: int | None = None
    memory: MemorySample | None = None
    growth: MemoryGrowth | None = None
    device_total_bytes: int | None = None
    #: the GPU a trace's header lists (deviceProperties), if any
    device_name: str | None = None
    capture: CaptureView | None = None
    gpu: GpuWindow | None = None
    #: the DataLoader being iterated, as the hook saw it (None: none, or unknown)
    loader: LoaderInfo | None = None
    #: the training frameworks the hook saw the job import (Status.frameworks)
    frameworks: tuple[str, ...] = ()
    #: the CPU cores the job may use (Hello.cpus); None: unknown
    cpus: int | None = None
    #: evidence of the other ranks of the job (multi-rank rules); () for one rank
    ranks: tuple[JobEvidence, ...] = ()
    #: read from a profiler trace (``gputui analyze``): its few steps are all
    #: there is, and every one of them was profiled
    from_trace: bool = False
    #: a trace's shares of the window in one-off work, time no fix of the
    #: model's code recovers: torch.compile's compiling ranges, and cold launch
    #: calls (CUDA loading or compiling a kernel on its first use)
    compile_share: float = 0.0
    cold_launch_share: float = 0.0
    #: a trace's share of the window in long waits on GPU work it did not record
    #: (:attr:`gputui.trace.scan.Sanity.blind_wait_us`)
    blind_wait_share: float = 0.0
    #: a trace's share of the window inside CUDA graph captures (launches that
    #: fill a graph and run nothing: one-off, as compiling is)
    capture_share: float = 0.0
    #: a trace's share of the window in long set-up calls while the GPU idled
    #: (:attr:`gputui.trace.scan.Sanity.setup_call_us`: the allocator's first
    #: reservations, a library's streams and handles): one-off, as cold
    #: launches are, but counted with torch's dispatch by the step account
    setup_share: float = 0.0
    #: a trace's share of the window in ops' warm-up calls (their first calls
    #: that last 20 times their op's median or more while the GPU idles: cuDNN's
    #: algorithm search, a library's first call; Sanity.warmup_us): one-off
    warmup_share: float = 0.0
    #: the ops that had warm-up calls in a trace's window (Sanity.warmup_by_name)
    warmup_ops: frozenset[str] = frozenset()
    #: a trace's Python frames (``with_stack=True``) by their self time, each as
    #: a share of the window: (name, share), the most first
    #: (:attr:`gputui.trace.scan.Sanity.python_frames`); empty without stacks
    python_frames: tuple[tuple[str, float], ...] = ()
    #: the same by package, each as a share of the window (Sanity.python_packages)
    python_packages: tuple[tuple[str, float], ...] = ()
    #: the micro-batches every step accumulates gradients over: its DataLoader's
    #: fetches per optimizer step (a trace's Sanity.micro_batches, a live job's
    #: :func:`live_micro_batches`); 0: none seen
    micro_batches: int = 0
    #: the optimizer's share of a trace's kernel launch calls (its
    #: ``Optimizer.step#`` ranges'); None: not a trace, or none told
    optimizer_launch_share: float | None = None
    #: a trace that records CUDA graph captures, most of its launch calls
    #: putting kernels in a graph rather than running them (its launch figures
    #: describe the capture, not the model's run)
    records_graphs: bool = False
    #: the latest memory snapshot's summary (allocation sites, growing ones)
    memory_snapshot: MemorySnapshotResult | None = None
    #: the latest capture's top ops on the GPU's roofline (captures with FLOPs)
    roofline: RooflineReport | None = None
    #: the GPU's compute capability ("9.0"), where known (a trace's device properties)
    compute_capability: str | None = None
    #: the trace was recorded under ROCm (an AMD GPU): AMD's tools, not NVIDIA's
    rocm: bool = False
    #: slow host ops known to have launched GPU work (a trace's: ``TraceSummary.
    #: launching_ops``): their host time is no computing on host tensors
    launching_ops: frozenset[str] = frozenset()
    #: the training thread's Python profile from the hook's stack sampler
    python_profile: PythonProfile | None = None
    #: what torch.compile did in the job (None: nothing compiled, or unknown)
    compile_report: CompileReport | None = None
    #: the last step of the newest capture (where the ledger's carried buckets
    #: come from), None without one
    capture_step: int | None = None
    #: the GPU's datasheet ceilings (gputui.ceilings.datasheet): what a kernel
    #: could reach on it, for costs against a faster kernel (attention against
    #: flash); None for a GPU the table does not know
    datasheet: Roof | None = None

    @property
    def one_off_share(self) -> float:
        """A trace's share of the window in one-off work (compiling, cold launches,
        CUDA graph captures, long set-up calls, ops' warm-up calls) and in waits
        on work it did not record."""
        return min(
            1.0,
            self.compile_share
            + self.cold_launch_share
            + self.blind_wait_share
            + self.capture_share
            + self.setup_share
            + self.warmup_share,
        )

    @property
    def enough_steps(self) -> bool:
        return self.stats.count >= (1 if self.from_trace else MIN_STEPS)

    @property
    def step_s(self) -> float | None:
        """The typical (median) ordinary step time, seconds."""
        return self.stats.wall.p50 if self.stats.wall is not None else None

    @cached_property
    def context(self) -> JobContext:
        """Compiled or eager, training or inference, collectives, attention
        backends, architecture: what the advice follows."""
        return job_context(
            None if self.capture is None else self.capture.markers,
            self.compile_report,
            self.stats,
            self.phases_coarse,
            self.compute_capability,
            framework_of(
                self.frameworks,
                self.python_profile,
                None
                if self.capture is None or self.capture.markers is None
                else self.capture.markers.framework,
            ),
        )

    @property
    def mean_step_s(self) -> float | None:
        """The mean step of the analyzer's window (the ledger's), seconds: what a
        share of the step is in milliseconds."""
        step = self.ledger.step_s
        if step:
            return step
        return self.stats.wall.mean if self.stats.wall is not None else None

    @cached_property
    def ledger(self) -> Ledger:
        """The window and time account every cost is settled against: a trace's
        (or a capture-only evidence's) measured account, else the live job's
        ordinary steps with the newest capture's split of the rest (before any,
        the Python sampler's Python outside torch told apart from the rest)."""
        cap = self.capture
        acct = None if cap is None else cap.account
        work = 0.0 if cap is None else cap.cpu_work_share
        if self.from_trace:
            if acct is None or acct.step_us <= 0:
                return Ledger(ledger.Window("profiled steps", self.stats.count), None)
            kind = "profiled steps" if self.stats.count else "GPU activity"
            return ledger.from_account(
                acct,
                ledger.Window(kind, acct.steps),
                gpu_idle=self._unprofiled_idle(),
                slowdown=PROFILER_SLOWDOWN,
                cpu_work=work,
            )
        note = "warm-up, profiled and compiling steps left out"
        usual = ordinary(self.steps)
        if not usual and acct is not None and acct.step_us > 0:
            return ledger.from_account(
                acct,
                ledger.Window("profiled steps", acct.steps),
                gpu_idle=self._unprofiled_idle(),
                source="the capture",
                slowdown=PROFILER_SLOWDOWN,
                cpu_work=work,
            )
        return ledger.from_steps(
            usual,
            acct,
            self.capture_step,
            gpu_idle=self._unprofiled_idle(),
            note=note,
            slowdown=PROFILER_SLOWDOWN,
            python_share=sampled_python(self.python_profile),
            cpu_work=work,
        )

    def _unprofiled_idle(self) -> float | None:
        """The GPU's idle share at the job's own speed: NVML's utilization over
        the attached window, else the capture's account with the profiler's own
        CPU cost taken out; None without either (or without a GPU)."""
        gpu = self.gpu
        if gpu is not None and gpu.util_pct is not None and gpu.samples >= MIN_GPU_SAMPLES:
            return max(0.0, 1.0 - gpu.util_pct / 100.0)
        cap = self.capture
        return None if cap is None else cap.unprofiled_idle()

    def phase_share(self, name: str, gpu: bool = False) -> float:
        dists = self.stats.gpu_phases if gpu else self.stats.phases
        return next((d.share for d in dists if d.name == name), 0.0)

    def phase_p50(self, name: str) -> float | None:
        return next((d.p50 for d in self.stats.phases if d.name == name), None)

    def phase_mean(self, name: str, gpu: bool = False) -> float | None:
        dists = self.stats.gpu_phases if gpu else self.stats.phases
        return next((d.mean for d in dists if d.name == name), None)


#: flags of steps that do not say how the job normally runs (a plain int: the
#: test runs once per step of every window, and IntFlag's & is a Python call)
_NOT_ORDINARY = int(StepFlag.PROFILED | StepFlag.GRAPH_CAPTURE | StepFlag.COMPILE)


def ordinary(steps: Sequence[StepRecord]) -> list[StepRecord]:
    """Steps that say how the job normally runs: not warm-up, not profiled,
    not captured into a CUDA graph, not compiling (torch.compile)."""
    skip, warmup = _NOT_ORDINARY, WARMUP_STEPS  # is_warmup(), inline
    return [s for s in steps if not (s.flags & skip) and s.index >= warmup]


def roofline_of(rows: Sequence[OpRow], roof: Roof | None) -> RooflineReport | None:
    """The top op rows (of a capture with FLOPs, or a trace with shapes) on the
    GPU's roofline; None without rows or roof."""
    if not rows or roof is None:
        return None
    return place_on_roof(rows, roof, top=ROOFLINE_TOP)


#: of a live job's ordinary steps that fetched batches, the share that must
#: fetch the same number for the job to accumulate over that many
MICRO_BATCH_AGREE = 0.9
#: ...and at least this many of them
MICRO_BATCH_STEPS = 5


def live_micro_batches(steps: Sequence[StepRecord]) -> int:
    """The micro-batches a live job's steps accumulate gradients over: the
    DataLoader batches its ordinary steps fetched (the hook's step ends at the
    optimizer's step), where nearly all fetched the same number, two or more;
    0 otherwise (one a step, a loop without a DataLoader, steps that differ)."""
    counts = [s.batches for s in steps if s.batches > 0]
    if len(counts) < MICRO_BATCH_STEPS or len(counts) < MICRO_BATCH_AGREE * len(steps):
        return 0
    n, same = Counter(counts).most_common(1)[0]
    return n if n >= 2 and same >= MICRO_BATCH_AGREE * len(counts) else 0


def job_evidence(
    steps: Sequence[StepRecord],
    memory: Sequence[tuple[MemorySample, int | None]] = (),
    capture: CaptureResult | None = None,
    gpu: Sequence[DeviceSnapshot] = (),
    *,
    cuda: bool = False,
    phases_coarse: bool = False,
    batch_size: int | None = None,
    device_total_bytes: int | None = None,
    window: int = 1000,
    loader: LoaderInfo | None = None,
    frameworks: tuple[str, ...] = (),
    cpus: int | None = None,
    memory_snapshot: MemorySnapshotResult | None = None,
    roof: Roof | None = None,
    compute_capability: str | None = None,
    python_profile: PythonProfile | None = None,
    compile_report: CompileReport | None = None,
    datasheet: Roof | None = None,
) -> JobEvidence:
    """The evidence over the newest ``window`` steps.  Memory samples taken during
    the latest capture (a step before it to a step after it) are left out of the
    growth estimate: the profiler's allocations are not the job's."""
    recent = tuple(steps[-window:])
    unprofiled = memory
    if capture is not None and capture.first_step is not None and memory:
        lo, hi = capture.first_step - 1, (capture.last_step or capture.first_step) + 1
        unprofiled = [(s, at) for s, at in memory if at is None or not lo <= at <= hi]
    usual = ordinary(recent)
    stats = step_stats(usual, exclude_profiled=False)
    return JobEvidence(
        stats=stats,
        steps=recent,
        micro_batches=live_micro_batches(usual),
        cuda=cuda,
        phases_coarse=phases_coarse,
        batch_size=batch_size,
        memory=memory[-1][0] if memory else None,
        growth=memory_growth(unprofiled, stats.steps_per_s),
        device_total_bytes=device_total_bytes,
        capture=None if capture is None else CaptureView.of(capture),
        gpu=GpuWindow.of(gpu),
        loader=loader,
        frameworks=frameworks,
        cpus=cpus,
        memory_snapshot=memory_snapshot,
        roofline=roofline_of(capture.op_rows if capture is not None else (), roof),
        compute_capability=compute_capability,
        python_profile=python_profile,
        compile_report=compile_report,
        capture_step=None if capture is None else capture.last_step,
        datasheet=datasheet,
    )


# -- the ranks of a multi-rank job --------------------------------------------------------------
@value_class
class RankEvidence(ValueBase):
    """One local rank of a multi-rank job: its own evidence, and where it is."""

    pid: int
    job: JobEvidence
    rank: int | None = None
    local_rank: int | None = None
    #: index of its newest finished step (None before the first)
    last_step: int | None = None
    #: False once it exited or its hook stopped answering
    connected: bool = True
    #: the phase it is in now and for how long (from its hook's status)
    phase_now: str | None = None
    phase_now_s: float | None = None

    @property
    def label(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}"

    @property
    def step_mean_s(self) -> float | None:
        wall = self.job.stats.wall
        return wall.mean if wall is not None else None

    @property
    def comm_mean_s(self) -> float:
        """Mean seconds per step in collectives (0 when none was timed)."""
        return self.job.phase_mean(COMM) or 0.0

    @property
    def compute_mean_s(self) -> float | None:
        """Mean step time less the time spent waiting in collectives: what
        this rank itself needs per step."""
        step = self.step_mean_s
        return None if step is None else max(0.0, step - self.comm_mean_s)


@value_class
class RanksEvidence(ValueBase):
    """The local ranks of one multi-rank job (ordered by rank)."""

    ranks: tuple[RankEvidence, ...]
    world_size: int | None = None

    @property
    def missing(self) -> int:
        """Ranks of the job not seen here (other nodes)."""
        world = self.world_size
        return 0 if world is None else max(0, world - len(self.ranks))

    @property
    def ready(self) -> tuple[RankEvidence, ...]:
        """Ranks with enough ordinary steps for rules about steps."""
        return tuple(r for r in self.ranks if r.job.enough_steps)

    @property
    def mean_step_s(self) -> float | None:
        """The job's mean step: the median over ranks of their mean step."""
        steps = [r.job.mean_step_s for r in self.ready if r.job.mean_step_s]
        return median(steps) if steps else None

    @property
    def step_s(self) -> float | None:
        """The job's typical step: the median over ranks of their median step."""
        steps = [r.job.step_s for r in self.ready if r.job.step_s]
        return median(steps) if steps else None


def findings_waiting(seen: int, needed: int = MIN_STEPS) -> str:
    """Why the analyzer is silent before it has enough steps."""
    return (
        f"the analyzer waits for {needed} ordinary steps ({seen} so far; warm-up "
        "and profiled steps do not count)"
    )
