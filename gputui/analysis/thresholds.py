"""Every threshold the analyzer's rules compare with, in one table.

A rule reads its numbers here (:func:`value`), and its trigger -- the words
``docs/analyzer.md`` prints and each finding carries -- is written with
``{key}`` placeholders that :func:`fill` replaces with the same table's
values (:func:`text`), so the words and the code cannot drift apart.  The page
lists the table itself (``bench/analyzer_doc.py``), and the rule tests put
every entry at its boundary: just past it the rule speaks, just short of it
the rule stays quiet.

Standard library and the snapshot's value base only: the monitor's device
rules read it without loading the job's evidence.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from gputui.protocol.value import ValueBase, value_class

#: how each unit prints; the value is kept in the unit the code compares in
#: (``share`` is 0..1 and prints as a percentage; ``pct`` is already one)
_FORMATS: dict[str, Callable[[float], str]] = {
    "pct": lambda v: f"{v:g}%",
    "share": lambda v: f"{round(v * 100, 6):g}%",
    "us": lambda v: f"{v:g} us",
    "x": lambda v: f"{v:g}x",
    "count": lambda v: f"{v:g}",
    "celsius": lambda v: f"{v:g}C",
    "bytes": lambda v: f"{v / 2**30:g} GiB",
    "seconds": lambda v: f"{v / 60:g} minutes" if v >= 60 else f"{v:g} s",
}
UNITS = tuple(_FORMATS)


@value_class
class Threshold(ValueBase):
    """One number a rule compares with: ``value`` in ``unit``, and what it is."""

    key: str
    value: float
    unit: str
    what: str

    @property
    def text(self) -> str:
        """The value as printed: ``50%``, ``20 us``, ``1.5x``."""
        return _FORMATS[self.unit](self.value)


def _table(rows: str) -> dict[str, Threshold]:
    """The table from its rows: ``key value unit what``, one a line (an indented
    line goes on with the previous one's ``what``); lines that start with ``--``
    head a group."""
    out: dict[str, Threshold] = {}
    last = ""
    for line in rows.strip().splitlines():
        if line.startswith("--"):
            continue
        if line.startswith(" "):
            t = out[last]
            out[last] = Threshold(t.key, t.value, t.unit, f"{t.what} {line.strip()}")
            continue
        key, v, unit, what = line.split(maxsplit=3)
        if key in out or unit not in UNITS:
            raise ValueError(f"threshold {key}: duplicate or unknown unit {unit}")
        out[key] = Threshold(key, float(v), unit, what)
        last = key
    return out


TABLE: dict[str, Threshold] = _table(
    """
-- how much evidence a rule needs before it may warn
min.steps                   20          count    ordinary steps a live job's step rules wait for
min.gpu_samples             3           count    samples of the job's GPU the GPU rules wait for
min.spiky_samples           10          count    NVML samples before utilization can be called spiky
min.profile_samples         100         count    Python sampler samples before its shares count
-- steps
data.share                  0.05        share    data loading's share of the step (TensorBoard)
data.hot_share              0.5         share    a function's share of the loading's sampled
                                                 time from which the data finding names it
data.workers_idle           0.5         share    the workers' time waiting for work from
                                                 which they keep up: no more are advised
steps.forward_over_backward 1.5         x        forward over backward: a sync in forward
steps.backward_over_forward 3           x        backward over forward: checkpointing
steps.optimizer_share       0.15        share    the optimizer's share of the step
steps.other_share           0.25        share    time outside every phase
steps.slow_factor           3           x        a step this many times the median is slow
steps.outlier_share         0.02        share    the time slow steps add, of all steps
steps.warmup_factor         5           x        a first step this many times the median
-- the account and the capture
cpu.python_share            0.25        share    Python outside torch's share of the step
cpu.gpu_idle_share          0.15        share    the GPU's idle share while Python holds the step
cpu.logging_share           0.10        share    a framework's logging's share of the training
                                                 thread's time
cpu.creation_share          0.10        share    CPU-side random tensor creation's share of the step
cpu.creation_call_us        50          us       a random op this slow per call runs on the CPU
cpu.host_ops_share          0.10        share    torch ops on the CPU's share of a GPU job's step
cpu.no_gpu_share            0.50        share    torch ops' share of a step no GPU ran
launch.issue_share          0.4         share    kernel launch + torch dispatch's share of the step
launch.cpu_op_us            1000        us       a torch op this slow a call computes on the CPU
launch.optimizer_share      0.05        share    a foreach optimizer's share of the launches (live:
                                                 of the step) below which fusing it is not advised
launch.short_kernel_us      20          us       a mean kernel this short is launch-bound
launch.tiny_kernel_us       10          us       a kernel this short is tiny
launch.tiny_share           0.5         share    tiny kernels' share of the launches
launch.compiled_share       0.25        share    torch.compile's regions' share of the launches
                                                 from which the job counts as compiled
idle.share                  0.15        share    the GPU's idle share worth a finding
idle.share_profiled         0.35        share    ... when only a profiled capture without a step
                                                 account saw it
idle.profiler_slowdown      1.75        x        a profiled step's kernel launch + torch dispatch
                                                 over the job's own (CPU+CUDA profiling slowed a
                                                 launch-bound step 1.75-1.95x on an H100)
sync.per_step               2           count    CUDA synchronizations per step
copy.pageable_share         0.03        share    pageable copies' share of the GPU timeline
copy.memcpy_share           0.1         share    host-device copies' share of the GPU timeline
copy.copy_cpu_share         0.15        share    aten::copy_'s share of CPU op time
copy.casts_per_step         50          count    aten::to/_to_copy calls per step
copy.cast_cpu_share         0.1         share    casts' share of CPU op time
copy.sync_memcpy_per_step   1           count    synchronous cudaMemcpy/cudaMemset per step
steps.zero_per_step         20          count    zero-fill calls per step
comm.share                  0.1         share    NCCL's share of the GPU timeline (TensorBoard)
comm.overlap                0.5         share    comm/compute overlap under which it is poor (HTA)
comm.poor_overlap_share     0.05        share    NCCL's share from which overlap matters
memory.malloc_per_step      1           count    cudaMalloc/cudaFree per step
-- kernel efficiency
precision.fp32_gemm_share   0.2         share    FP32 GEMMs' share of kernel time
kernels.elementwise_share   0.75        share    elementwise + reduction share of kernel time
kernels.busy_share          0.5         share    the GPU's busy share for kernel-efficiency rules
kernels.top_kernel_share    0.25        share    one kernel's share of kernel time
kernels.layout_share        0.03        share    cuDNN's NCHW/NHWC conversion kernels' share of
                                                 kernel time
attention.softmax_share     0.1         share    softmax kernels' share of kernel time
attention.min_t             256         count    sequence length from which T x T scores cost
attention.flash_sm80        0.5         share    the share of the datasheet's dense bf16 peak flash
                                                 attention reaches on sm 8.x (FlashAttention-2:
                                                 50-73% on an A100): SDPA calls slower than their
                                                 FLOPs at that rate lose time to flash
attention.flash_sm90        0.3         share    ... on sm 9.0 and newer, and where the GPU's
                                                 architecture is unknown (FlashAttention-2, which
                                                 torch's flash backend is, reaches 35% of an H100's;
                                                 PyTorch's own benchmark measured its forward at
                                                 29-31%)
-- memory
memory.near_full            0.9         share    peak memory's share of the device (TensorBoard)
memory.oom_soon_s           600         seconds  a growing job this close to full is critical
memory.fragment_factor      1.5         x        reserved over allocated
memory.fragment_bytes       2147483648  bytes    reserved beyond allocated
-- the GPU as NVML and GPM see it (the monitor's device rules and the job's GPU)
gpu.low_util_pct            50          pct      GPU utilization under which it is low (TensorBoard)
gpu.busy_util_pct           80          pct      GPU utilization from which it is busy
gpu.no_tensor_pct           5           pct      tensor activity under which the tensor cores idle
gpu.fp32_pipe_pct           10          pct      FP32 pipe activity: matrix work on the CUDA cores
gpu.low_sm_pct              50          pct      SM activity under which SMs idle (DCGM: 0.5)
gpu.low_occupancy_pct       25          pct      achieved occupancy under which it is low
gpu.tensor_busy_pct         30          pct      tensor activity of a GEMM-bound GPU
gpu.dram_bound_pct          75          pct      DRAM activity of a bandwidth-bound GPU (~80% is
                                                 the practical maximum)
gpu.spiky_stdev_pct         25          pct      utilization swings (standard deviation, points)
gpu.hot_c                   83          celsius  GPU temperature from which clocks come down
gpu.throttle_share          0.3         share    share of samples a clock-event reason is active
gpu.mem_full_pct            90          pct      device memory used (TensorBoard: 90%)
"""
)


def value(key: str) -> float:
    """The threshold ``key``'s value, in the unit the code compares in."""
    return TABLE[key].value


def text(key: str) -> str:
    """The threshold ``key`` as printed: ``50%``, ``20 us``, ``1.5x``."""
    return TABLE[key].text


_PLACEHOLDER = re.compile(r"\{([a-z0-9_]+\.[a-z0-9_]+)\}")


def keys_in(words: str) -> tuple[str, ...]:
    """The thresholds named in a trigger, in order, each once."""
    seen: list[str] = []
    for key in _PLACEHOLDER.findall(words):
        if key not in seen:
            seen.append(key)
    return tuple(seen)


def fill(words: str) -> str:
    """``words`` with each ``{key}`` replaced by that threshold as printed (an
    unknown key raises: a trigger cannot name a threshold the table lacks)."""
    return _PLACEHOLDER.sub(lambda m: TABLE[m.group(1)].text, words)
