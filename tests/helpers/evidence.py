"""Builders of analyzer evidence for rule tests: steps with chosen phase times,
captures with chosen kernels and CPU ops, GPU windows with chosen GPM values."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from gputui.analysis.evidence import JobEvidence, job_evidence
from gputui.protocol.capture import CaptureOptions, CaptureResult, CpuOpRow, GpuTime, KernelRow
from gputui.protocol.op_rows import OpRow
from gputui.protocol.profile import PathFrame, ProfileFunction, PythonProfile
from gputui.protocol.schema import MemorySample, StepRecord
from gputui.protocol.trace_metrics import JobMarkers, StepAccount, TraceMetrics
from gputui.snapshot.model import DeviceSnapshot, GpmMetrics
from gputui.trace import op_costs

GIB = 2**30


def steps(
    n: int = 60,
    phases: Mapping[str, float] | None = None,
    gpu: Mapping[str, float] | None = None,
    start: int = 0,
    walls: Sequence[float] | None = None,
) -> list[StepRecord]:
    """``n`` steps with these wall phase times (seconds); ``walls`` overrides the
    wall time of each step (the phases are scaled to it)."""
    base = dict(phases or {"forward": 0.01, "backward": 0.02, "optimizer": 0.004, "other": 0.002})
    out = []
    for k in range(n):
        wall = sum(base.values())
        ph = dict(base)
        if walls is not None:
            scale = walls[k] / wall
            ph = {name: t * scale for name, t in base.items()}
            wall = walls[k]
        g = dict(gpu) if gpu is not None else None
        out.append(
            StepRecord(
                index=start + k,
                t=1_700_000_000.0 + k * wall,
                wall=wall,
                phases=ph,
                gpu=g,
                gpu_total=None if g is None else sum(g.values()),
            )
        )
    return out


def kernel(name: str, cls: str, calls: int, total_us: float, share: float = 0.0) -> KernelRow:
    return KernelRow(name, cls, calls, total_us, total_us / calls, share=share)


def op(name: str, calls: int, self_us: float) -> CpuOpRow:
    return CpuOpRow(name, calls, self_us, self_us)


def capture(
    kernels: Sequence[KernelRow] = (),
    ops: Sequence[CpuOpRow] = (),
    span_us: float = 100_000.0,
    busy_us: float | None = None,
    n_steps: int = 5,
    overlap: float | None = None,
    op_rows: Sequence[OpRow] = (),
    account: StepAccount | None = None,
    markers: JobMarkers | None = None,
    **by_class: float,
) -> CaptureResult:
    total = sum(k.total_us for k in kernels)
    classes: dict[str, float] = {}
    for k in kernels:
        classes[k.kernel_class] = classes.get(k.kernel_class, 0.0) + k.total_us
    classes.update(by_class)
    rows = tuple(
        dataclasses.replace(k, share=k.total_us / total if total else 0.0)
        for k in sorted(kernels, key=lambda k: -k.total_us)
    )
    busy = total if busy_us is None else busy_us
    comm = classes.get("communication", 0.0)
    return CaptureResult(
        id="c",
        first_step=100,
        last_step=100 + n_steps - 1,
        kernels=rows,
        kernel_calls=sum(k.calls for k in kernels),
        kernel_total_us=total,
        by_class=classes,
        gpu_time=GpuTime(
            0, span_us, busy, span_us - busy, communication_us=comm, comm_compute_overlap=overlap
        ),
        cpu_ops=tuple(ops),
        op_rows=tuple(op_rows),
        options=CaptureOptions(shapes=bool(op_rows), flops=bool(op_rows)),
        trace_metrics=(
            None
            if account is None and markers is None
            else TraceMetrics(account=account, markers=markers)
        ),
    )


def account(
    step_us: float = 10_000.0, gpu_busy: float | None = 0.2, **shares: float
) -> StepAccount:
    """A step account from bucket shares (0..1); Python outside torch is the rest."""
    buckets = ("data", "phase", "comm", "sync", "launch", "dispatch")
    us = {f"{b}_us": shares.get(b, 0.0) * step_us for b in buckets}
    return StepAccount(
        steps=5,
        step_us=step_us,
        python_us=step_us - sum(us.values()),
        gpu_busy_us=None if gpu_busy is None else gpu_busy * step_us,
        **us,
    )


def op_row(
    name: str, dims: Sequence[Sequence[int]], dtype: str, calls: int, device_us: float
) -> OpRow:
    """An op row as a capture with FLOPs gives it: FLOPs and bytes from the shapes
    with gputui's own estimates, over ``calls`` calls."""
    shapes = tuple(tuple(d) for d in dims)
    types = (dtype,) * len(shapes)
    flops = op_costs.estimate_flops(name, shapes, types, ())
    moved, rule = op_costs.estimate_bytes(name, shapes, types, ())
    return OpRow(
        name=name,
        input_dims=shapes,
        input_types=types,
        calls=calls,
        device_us=device_us,
        kernels=calls,
        flops=None if flops is None else flops * calls,
        flops_source=None if flops is None else "estimated",
        bytes_moved=None if moved is None else moved * calls,
        bytes_rule=rule,
    )


def gpu_samples(n: int = 10, **kw: Any) -> list[DeviceSnapshot]:
    """``n`` identical snapshots of one H100 with these fields; GPM fields given
    as ``sm``, ``occ``, ``tensor``, ``dram``, ``fp32``."""
    gpm = GpmMetrics(
        sm_activity_pct=kw.pop("sm", 90.0),
        sm_occupancy_pct=kw.pop("occ", 40.0),
        tensor_activity_pct=kw.pop("tensor", 60.0),
        dram_bw_util_pct=kw.pop("dram", 30.0),
        fp32_activity_pct=kw.pop("fp32", 5.0),
    )
    base: dict[str, Any] = dict(
        index=0,
        name="NVIDIA H100 80GB HBM3",
        uuid="GPU-0",
        util_gpu_pct=95.0,
        mem_used_bytes=20 * GIB,
        mem_total_bytes=80 * GIB,
        power_w=500.0,
        power_limit_w=700.0,
        temp_gpu_c=60.0,
        clock_sm_mhz=1980,
        clock_sm_max_mhz=1980,
        throttle_reasons=(),
        gpm_supported=True,
        gpm=gpm,
    )
    base.update(kw)
    return [DeviceSnapshot(**base) for _ in range(n)]


def memory(points: Sequence[tuple[int, int]], reserved: int | None = None, **kw: int) -> list:
    """(allocated bytes, step index) pairs as memory samples."""
    return [
        (
            MemorySample(
                t=float(i),
                device=0,
                allocated=a,
                reserved=reserved or a,
                peak_allocated=kw.get("peak", a),
                peak_reserved=kw.get("peak_reserved", reserved or a),
                alloc_retries=kw.get("retries", 0),
                ooms=kw.get("ooms", 0),
            ),
            at,
        )
        for i, (a, at) in enumerate(points)
    ]


NUMPY_SORT = "/venv/lib/python3.11/site-packages/numpy/_core/fromnumeric.py"
TORCH_GRAPH = "/venv/lib/python3.11/site-packages/torch/autograd/graph.py"


def python_profile(
    outside: Mapping[str, float],
    samples: int = 1000,
    sampled_s: float = 10.0,
    exact: bool = True,
    workers: PythonProfile | None = None,
) -> PythonProfile:
    """A sampler's profile over ``sampled_s`` seconds: numpy's ``sort``, called
    from the job's ``augment`` (data.py:12), holds share ``outside[phase]`` of it
    in each phase, and torch's autograd engine the rest (in backward).  ``exact``:
    the hook's own split of the time outside torch (else an older hook's
    profile, estimated from the functions)."""
    sort_s = {p: share * sampled_s for p, share in outside.items() if share > 0}
    total = sum(sort_s.values())
    sort = ProfileFunction(
        NUMPY_SORT,
        "sort",
        "lib",
        1092,
        1000,
        total,
        total,
        sort_s,
        path=(0,),
        outside_s=total if exact else 0.0,
    )
    augment = ProfileFunction(
        "/job/data.py", "augment", "user", 12, 10, 0.0, total, {}, total, dict(sort_s)
    )
    engine = ProfileFunction(
        TORCH_GRAPH,
        "_engine_run_backward",
        "torch",
        979,
        900,
        sampled_s - total,
        sampled_s - total,
        {"backward": sampled_s - total},
    )
    return PythonProfile(
        window_s=sampled_s,
        sampled_s=sampled_s,
        samples=samples,
        functions=(augment, sort, engine),
        frames=(PathFrame("/job/data.py", "augment", 12),),
        outside_s=total if exact else None,
        outside_phases_s=sort_s if exact else None,
        workers=workers,
        worker_processes=0 if workers is None else 2,
    )


def evidence(
    step_list: Sequence[StepRecord] | None = None,
    mem: Sequence[Any] = (),
    cap: CaptureResult | None = None,
    gpu: Sequence[DeviceSnapshot] = (),
    **kw: Any,
) -> JobEvidence:
    return job_evidence(
        steps() if step_list is None else step_list,
        mem,
        cap,
        gpu,
        cuda=True,
        device_total_bytes=kw.pop("total", 80 * GIB),
        **kw,
    )


#: the SDPA ops' input lists as the profiler records them: (name, where q is,
#: where the mask is, where is_causal is, how many inputs)
_SDPA_SIGNATURES = {
    "aten::scaled_dot_product_attention": (0, 3, 5, 8),
    "aten::_scaled_dot_product_efficient_attention_backward": (1, 4, 11, 13),
    "aten::_scaled_dot_product_cudnn_attention_backward": (1, 8, 14, 16),
    "aten::_scaled_dot_product_flash_attention_backward": (1, None, 11, 13),
}


def sdpa_row(
    q: Sequence[int],
    dtype: str = "c10::BFloat16",
    *,
    name: str = "aten::scaled_dot_product_attention",
    kv: Sequence[int] | None = None,
    v: Sequence[int] | None = None,
    mask: Sequence[int] | None = None,
    causal: bool = False,
    calls: int = 3,
    device_us: float = 1000.0,
) -> OpRow:
    """An SDPA op row (the public forward op, or a backend's backward op) with
    its inputs where the profiler puts them, FLOPs and bytes from the shapes
    (is_causal halves the FLOPs, as gputui counts them from the concrete input)."""
    first, at_mask, at_causal, n = _SDPA_SIGNATURES[name]
    k = tuple(kv or q)
    dims: list[tuple[int, ...] | None] = [()] * n
    types = [""] * n
    concrete = [""] * n
    for i, shape in enumerate((q, k, tuple(v or k))):
        dims[first + i], types[first + i] = tuple(shape), dtype
    if first:  # the backward's grad_out
        dims[0], types[0] = tuple(q), dtype
    if mask is not None and at_mask is not None:
        dims[at_mask], types[at_mask] = tuple(mask), dtype
    concrete[at_causal] = "True" if causal else "False"
    types[at_causal] = "Scalar"
    shapes, kinds = tuple(dims), tuple(types)
    flops = op_costs.estimate_flops(name, shapes, kinds, concrete)
    moved, rule = op_costs.estimate_bytes(name, shapes, kinds, concrete)
    return OpRow(
        name=name,
        input_dims=shapes,
        input_types=kinds,
        calls=calls,
        device_us=device_us,
        kernels=calls,
        flops=None if flops is None else flops * calls,
        flops_source=None if flops is None else "estimated",
        bytes_moved=None if moved is None else moved * calls,
        bytes_rule=rule,
    )


#: Lightning's logging, as the sampler names it in a job that calls self.log with
#: prog_bar=True at every step (an H100 session of bench/jobs/lightning_log.py)
LIGHTNING = "/venv/lib/python3.11/site-packages/lightning"


def lightning_logging_profile(share: float, sampled_s: float = 10.0) -> PythonProfile:
    """A sampler's profile where Lightning's logging holds ``share`` of the
    training thread's time: half in ``_ResultMetric.update`` (self.log), half in
    the progress bar's ``.item()``; torch's autograd engine holds the rest."""
    update = ProfileFunction(
        f"{LIGHTNING}/pytorch/trainer/connectors/logger_connector/result.py",
        "_ResultMetric.update",
        "lib",
        225,
        200,
        share * sampled_s / 2,
        share * sampled_s / 2,
        {"optimizer": share * sampled_s / 2},
        outside_s=share * sampled_s / 2,
    )
    item = ProfileFunction(
        f"{LIGHTNING}/fabric/utilities/apply_func.py",
        "convert_tensors_to_scalars.<locals>.to_item",
        "lib",
        134,
        129,
        share * sampled_s / 2,
        share * sampled_s / 2,
        {"other": share * sampled_s / 2},
        outside_s=share * sampled_s / 2,
    )
    engine = ProfileFunction(
        TORCH_GRAPH,
        "_engine_run_backward",
        "torch",
        869,
        840,
        (1 - share) * sampled_s,
        (1 - share) * sampled_s,
        {"backward": (1 - share) * sampled_s},
    )
    return PythonProfile(
        window_s=sampled_s,
        sampled_s=sampled_s,
        samples=1000,
        functions=(update, item, engine),
        phases_s={"optimizer": share * sampled_s / 2, "other": share * sampled_s / 2},
        outside_phases_s={"optimizer": share * sampled_s / 2, "other": share * sampled_s / 2},
        outside_s=share * sampled_s,
    )
