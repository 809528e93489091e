"""Every threshold of the analyzer's table at its boundary: the rule that reads
it speaks just past it and stays quiet just short of it (19 against 21 us, not
only far from it).  The cases are parametrized over the table, and a threshold
added to the table without a case fails :func:`test_every_threshold_has_a_boundary_case`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest

from gputui.analysis import engine
from gputui.analysis.monitor_findings import findings as device_findings
from gputui.analysis.steps import WARMUP_STEPS
from gputui.analysis.thresholds import TABLE, value
from gputui.snapshot.model import GpmMetrics, Snapshot
from tests.helpers import evidence as h
from tests.helpers.evidence import (
    GIB,
    account,
    capture,
    evidence,
    gpu_samples,
    kernel,
    lightning_logging_profile,
    python_profile,
)
from tests.unit.test_monitor_findings import device, snap

memory, op, op_row, steps = h.memory, h.op, h.op_row, h.steps

DEFAULT = {"forward": 0.01, "backward": 0.02, "optimizer": 0.004, "other": 0.002}
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
SGEMM = "ampere_sgemm_128x64_nn"
ELEMENTWISE = "vectorized_elementwise_kernel<mul>"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
SPAN = 100_000.0  # the test captures' span (us)
N_STEPS = 5  # the test captures' steps


class Case(NamedTuple):
    """``rule`` speaks on ``build(threshold + fires)`` and not on
    ``build(threshold + quiet)``: the offsets put it just past and just short."""

    rule: str
    build: Callable[[float], Any]
    fires: float
    quiet: float

    def at(self, key: str) -> tuple[Any, Any]:
        """The evidence just past threshold ``key`` and just short of it."""
        return self.build(value(key) + self.fires), self.build(value(key) + self.quiet)


def share_of(rest: float, s: float) -> float:
    """The time that is share ``s`` of a step whose other parts take ``rest``."""
    return s * rest / (1.0 - s)


def phases(**changes: float) -> Any:
    return evidence(steps(phases={**DEFAULT, **changes}))


def walls(slow_at: int, factor: float, n: int = 60) -> Any:
    return evidence(steps(n=n, walls=[0.036 * factor if k == slow_at else 0.036 for k in range(n)]))


def tiny_mix(tiny_us: float, tiny_calls: int, big_calls: int) -> Any:
    """Tiny kernels of ``tiny_us`` among 100 us ones (their mean stays over 20 us)."""
    ks = [
        kernel("elementwise_kernel<add>", "elementwise", tiny_calls, tiny_us * tiny_calls),
        kernel(GEMM, "gemm", big_calls, 100.0 * big_calls),
    ]
    return evidence(cap=capture(ks))


def launch_bound(**kw: Any) -> Any:
    """5000 launches of 3 us: 85% of the span idle."""
    return capture([kernel("elementwise_kernel<add>", "elementwise", 5000, 15_000.0)], **kw)


def gpm_job(**kw: Any) -> Any:
    return evidence(gpu=gpu_samples(**kw))


def spiky(n: int, swing: float = 40.0) -> Any:
    return evidence(
        gpu=[
            s
            for k in range(n)
            for s in gpu_samples(1, util_gpu_pct=50.0 + (swing if k % 2 else -swing))
        ]
    )


def throttled_in(share: float) -> Any:
    hot = round(share * 10)
    return evidence(
        gpu=[
            s
            for k in range(10)
            for s in gpu_samples(
                1, throttle_reasons=("sw_power_cap",) if k < hot else (), clock_sm_mhz=1500
            )
        ]
    )


def ops_share(name: str, calls: int, s: float, total: float = 10_000.0, **kw: Any) -> Any:
    """CPU ops where ``name`` takes share ``s`` of the CPU op time."""
    ops = [op(name, calls, s * total), op("aten::mm", 50, (1.0 - s) * total)]
    return evidence(cap=capture(ops=ops, **kw))


def kernel_share(name: str, cls: str, s: float, **kw: Any) -> Any:
    """A capture whose kernel ``name`` is share ``s`` of the span."""
    return evidence(cap=capture([kernel(name, cls, 10, s * SPAN)], **kw))


def of_kernels(name: str, cls: str, s: float, busy: float = 90_000.0) -> Any:
    """``name`` takes share ``s`` of 80 ms of kernels, bf16 GEMMs the rest."""
    total = 80_000.0
    ks = [kernel(name, cls, 100, s * total), kernel(GEMM, "gemm", 100, (1 - s) * total)]
    return evidence(cap=capture(ks, busy_us=busy))


def attention(t: float) -> Any:
    row = op_row("aten::bmm", [[8, int(t), 64], [8, 64, int(t)]], "c10::BFloat16", 3, 500.0)
    ks = [
        kernel("cunn_SoftMaxForward<SoftMaxForwardEpilogue>", "reduction", 10, 20_000.0),
        kernel(GEMM, "gemm", 100, 80_000.0),
    ]
    return evidence(cap=capture(ks, busy_us=100_000.0, op_rows=[row]))


def flash_rate(eff: float, cc: str) -> Any:
    """3 calls of fp32 SDPA (q 4x8x2048x64) forward and backward whose kernels run
    at share ``eff`` of the GPU's datasheet bf16 peak: slower than flash's rate
    there (the threshold), they lose time to it."""
    from gputui.ceilings.datasheet import A100_SXM_80, H100_SXM

    sheet = (A100_SXM_80 if cc.startswith("8") else H100_SXM).roof()
    q = [4, 8, 2048, 64]
    fwd_flops = 3 * 4 * 32 * 2048**2 * 64
    us = fwd_flops / (eff * sheet.tflops("bf16") * 1e6)  # type: ignore[operator]
    backward = "aten::_scaled_dot_product_efficient_attention_backward"
    rows = [
        h.sdpa_row(q, "float", device_us=us),
        h.sdpa_row(q, "float", name=backward, device_us=2.5 * us),
    ]
    ks = [
        kernel("fmha_cutlassF_f32_aligned_64x64_rf_sm80", "attention", 3, us),
        kernel("fmha_cutlassB_f32_aligned_64x64_k64_sm80", "attention", 3, 2.5 * us),
    ]
    return evidence(
        cap=capture(ks, busy_us=3.5 * us, op_rows=rows), compute_capability=cc, datasheet=sheet
    )


def top_kernel(s: float) -> Any:
    others = [kernel(f"{GEMM}_{k}", "gemm", 10, (1 - s) / 5 * SPAN) for k in range(5)]
    return evidence(cap=capture([kernel(GEMM, "gemm", 10, s * SPAN), *others]))


def comm(s: float, overlap: float) -> Any:
    return evidence(cap=capture([kernel(NCCL, "communication", 10, s * SPAN)], overlap=overlap))


def growing_for(seconds: float) -> Any:
    """A leak that fills the device in ``seconds`` at the job's rate."""
    leak = memory([(4 * GIB + 8 * 2**20 * 10 * i, 10 * i + 10) for i in range(60)])
    probe = evidence(mem=leak)
    g, m = probe.growth, probe.memory
    assert g is not None and m is not None and probe.stats.steps_per_s
    rate = (g.recent_per_step_bytes or g.per_step_bytes) * probe.stats.steps_per_s
    return evidence(mem=leak, total=int(m.reserved + seconds * rate))


def profiled_at(x: float) -> Any:
    """Launch + dispatch 80% of a profiled step, the rest Python; the GPU's busy
    share is set so that, at a profiler slowdown of ``x``, the GPU idles exactly
    ``idle.share`` of the job's own step."""
    busy = (1 - t("idle.share")) * (1 - 0.8 * (1 - 1 / x))
    acct = account(gpu_busy=busy, launch=0.1, dispatch=0.7)
    return evidence(cap=capture([kernel(GEMM, "gemm", 100, 10_000.0)], account=acct))


def sampled(share: float, samples: int = 1000, util: float | None = None) -> Any:
    """No capture: the Python sampler finds ``share`` of the training thread's
    time in numpy outside every phase; a CPU job, or (``util``) a GPU job whose
    GPU NVML saw that busy."""
    profile = python_profile({"other": share}, samples=samples)
    if util is not None:
        return evidence(gpu=gpu_samples(util_gpu_pct=util), python_profile=profile)
    return dataclasses.replace(evidence(python_profile=profile), cuda=False)


def loading_in(share: float) -> Any:
    """A job that waits for data, its two workers spending ``share`` of their
    time in the job's ``decode``."""
    from gputui.protocol.profile import ProfileFunction, PythonProfile
    from gputui.protocol.schema import LoaderInfo

    decode = ProfileFunction(
        "/job/data.py", "decode", "user", 12, 10, 0.0, 10.0 * share, {}, 10.0 * share
    )
    workers = PythonProfile(sampled_s=10.0, samples=1000, functions=(decode,))
    profile = dataclasses.replace(python_profile({}), workers=workers, worker_processes=2)
    ev = evidence(steps(phases={**DEFAULT, "data": 0.02}), python_profile=profile)
    return dataclasses.replace(ev, loader=LoaderInfo(num_workers=2))


def waiting_workers(idle: float) -> Any:
    """A job that waits for data, its two workers waiting for work ``idle`` of
    their time (the worker loop's ``Queue.get``) and collating the rest."""
    from gputui.protocol.profile import ProfileFunction, PythonProfile
    from gputui.protocol.schema import LoaderInfo

    get = ProfileFunction(
        "/usr/lib/python3.12/multiprocessing/queues.py",
        "Queue.get",
        "lib",
        113,
        98,
        0.0,
        10.0 * idle,
    )
    collate = ProfileFunction(
        "/venv/torch/utils/data/_utils/collate.py",
        "collate_tensor_fn",
        "torch",
        275,
        246,
        10.0 * (1 - idle),
        10.0 * (1 - idle),
    )
    workers = PythonProfile(sampled_s=10.0, samples=1000, functions=(get, collate))
    profile = dataclasses.replace(python_profile({}), workers=workers, worker_processes=2)
    ev = evidence(steps(phases={**DEFAULT, "data": 0.02}), python_profile=profile)
    return dataclasses.replace(ev, loader=LoaderInfo(num_workers=2))


def device_gpm(util: float = 95.0, **gpm: float) -> Snapshot:
    base = {"sm_activity_pct": 90.0, "tensor_activity_pct": 0.0, "dram_bw_util_pct": 30.0}
    return snap(device(util_gpu_pct=util, gpm=GpmMetrics(**{**base, **gpm})))


def past_share(rule: str, build: Callable[[float], Any]) -> Case:
    """A share's boundary: a tenth of a point past it and short of it."""
    return Case(rule, build, +0.001, -0.001)


def t(key: str) -> float:
    return value(key)


#: threshold -> the rule that reads it, built just past and just short of it
CASES: dict[str, Case] = {
    # -- minimum evidence (ordinary steps after the warm-up; GPU samples)
    "min.steps": Case(
        "data.loader_wait",
        lambda n: evidence(steps(n=WARMUP_STEPS + int(n), phases={**DEFAULT, "data": 0.02})),
        0,
        -1,
    ),
    "min.gpu_samples": Case(
        "gpu.memory_bound",
        lambda n: evidence(gpu=gpu_samples(int(n), dram=85.0, tensor=0.0)),
        0,
        -1,
    ),
    "min.spiky_samples": Case("gpu.spiky", lambda n: spiky(int(n)), 0, -1),
    "min.profile_samples": Case("cpu.python", lambda n: sampled(0.6, int(n)), 0, -1),
    "cpu.logging_share": past_share(
        "cpu.logging",
        lambda s: dataclasses.replace(
            evidence(python_profile=lightning_logging_profile(s)), cuda=False
        ),
    ),
    # -- steps (phase shares of a 36 ms step)
    "data.share": Case(
        "data.loader_wait", lambda s: phases(data=share_of(0.036, s)), +0.001, -0.001
    ),
    "steps.forward_over_backward": Case(
        "steps.forward_slower_than_backward",
        lambda r: phases(forward=0.02 * r, backward=0.02),
        +0.01,
        -0.01,
    ),
    "steps.backward_over_forward": Case(
        "steps.backward_heavy", lambda r: phases(forward=0.005, backward=0.005 * r), +0.01, -0.01
    ),
    "steps.optimizer_share": Case(
        "steps.optimizer_heavy", lambda s: phases(optimizer=share_of(0.032, s)), +0.001, -0.001
    ),
    "steps.other_share": Case(
        "steps.outside_phases", lambda s: phases(other=share_of(0.034, s)), +0.001, -0.001
    ),
    "steps.slow_factor": Case(
        "steps.slow_outliers",
        lambda f: evidence(steps(walls=[0.036 * f if k % 10 == 5 else 0.036 for k in range(60)])),
        +0.01,
        -0.01,
    ),
    # one slow step among 150: the time it adds is its excess over the median
    "steps.outlier_share": past_share(
        "steps.slow_outliers", lambda s: walls(50, (1 + s * (150 - 4)) / (1 - s), n=150)
    ),
    "steps.warmup_factor": Case("steps.warmup", lambda f: walls(0, f), +0.01, -0.01),
    # -- the step account (Python is the rest of the step)
    "cpu.python_share": past_share(
        "cpu.python",
        lambda s: evidence(
            cap=capture(
                account=account(dispatch=0.16, launch=0.04, data=0.2, comm=0.2, sync=0.4 - s)
            )
        ),
    ),
    # CPU-side random tensors: 5 steps of 10 ms (50 ms), the ops' share of it and
    # their time per call
    "cpu.creation_share": past_share(
        "cpu.tensor_creation",
        lambda s: evidence(
            cap=capture(ops=[op("aten::normal_", 5, s * 50_000.0)], account=account(gpu_busy=None))
        ),
    ),
    "cpu.creation_call_us": Case(
        "cpu.tensor_creation",
        lambda us: evidence(
            cap=capture(ops=[op("aten::normal_", 100, us * 100)], account=account(gpu_busy=None))
        ),
        +0.1,
        -0.1,
    ),
    # torch ops on host tensors: 2 calls (a call far over launch.cpu_op_us) of
    # the share of 5 steps of 10 ms
    "cpu.host_ops_share": past_share(
        "cpu.host_ops",
        lambda s: evidence(cap=capture(ops=[op("aten::sort", 2, s * 50_000.0)], account=account())),
    ),
    # a trace no GPU ran: torch's ops' share of the step
    "cpu.no_gpu_share": past_share(
        "cpu.no_gpu",
        lambda s: dataclasses.replace(
            evidence(
                cap=capture(
                    ops=[op("aten::mm", 5, 100.0)], account=account(gpu_busy=None, dispatch=s)
                )
            ),
            cuda=False,
            from_trace=True,
        ),
    ),
    "cpu.gpu_idle_share": past_share(
        "cpu.python",
        lambda i: evidence(cap=capture(account=account(gpu_busy=1.0 - i, dispatch=0.1))),
    ),
    "launch.issue_share": past_share(
        "launch.overhead",
        lambda s: evidence(
            cap=launch_bound(
                account=account(gpu_busy=0.1, dispatch=s - 0.05, launch=0.05, data=0.2, comm=0.2)
            )
        ),
    ),
    # a torch op from this time a call computes on the CPU: its time is no cost of
    # issuing (5 steps of 10 ms; 25 calls of it take half the step, which leaves
    # launch + dispatch short of launch.issue_share)
    "launch.cpu_op_us": Case(
        "launch.overhead",
        lambda us: evidence(
            cap=launch_bound(
                ops=[op("aten::sort", 25, us * 25)],
                account=account(gpu_busy=0.1, dispatch=0.6, launch=0.05),
            )
        ),
        -0.1,
        +0.1,
    ),
    # -- kernel sizes: the mean, tiny kernels, their share of the launches
    "launch.short_kernel_us": Case(
        "launch.overhead",
        lambda m: evidence(
            cap=capture([kernel("elementwise_kernel<add>", "elementwise", 1000, m * 1000)])
        ),
        -0.1,
        +0.1,
    ),
    "launch.tiny_kernel_us": Case("launch.overhead", lambda us: tiny_mix(us, 600, 400), -0.1, +0.1),
    "launch.tiny_share": Case(
        "launch.overhead",
        lambda s: tiny_mix(5.0, round(s * 1000), 1000 - round(s * 1000)),
        +0.01,
        -0.01,
    ),
    # -- the GPU's idle share: bounded by unprofiled NVML, or the profiled capture's
    "idle.share": past_share(
        "launch.overhead",
        lambda i: evidence(cap=launch_bound(), gpu=gpu_samples(util_gpu_pct=100.0 * (1 - i))),
    ),
    "idle.share_profiled": past_share(
        "launch.overhead", lambda i: evidence(cap=launch_bound(busy_us=(1 - i) * SPAN))
    ),
    "idle.profiler_slowdown": Case("launch.idle_gaps", profiled_at, +0.01, -0.01),
    "sync.per_step": Case(
        "sync.host_sync",
        lambda p: evidence(
            cap=capture(
                [kernel(GEMM, "gemm", 50, 50_000.0)],
                [op("cudaStreamSynchronize", round(p * N_STEPS), 30_000.0)],
            )
        ),
        0,
        -1 / N_STEPS,
    ),
    # -- copies
    "copy.pageable_share": past_share(
        "copy.pageable", lambda s: kernel_share("Memcpy HtoD (Pageable -> Device)", "memcpy", s)
    ),
    "copy.memcpy_share": past_share(
        "copy.transfers", lambda s: kernel_share("Memcpy HtoD (Pinned -> Device)", "memcpy", s)
    ),
    "copy.copy_cpu_share": past_share(
        "copy.transfers",
        lambda s: evidence(
            cap=capture(
                [kernel("Memcpy HtoD (Pinned -> Device)", "memcpy", 5, 0.03 * SPAN)],
                [op("aten::copy_", 50, s * 10_000.0), op("aten::mm", 50, (1 - s) * 10_000.0)],
            )
        ),
    ),
    "copy.casts_per_step": Case(
        "copy.frequent_casts",
        lambda p: ops_share("aten::to", round(p * N_STEPS), 0.3),
        0,
        -1 / N_STEPS,
    ),
    "copy.cast_cpu_share": Case(
        "copy.frequent_casts", lambda s: ops_share("aten::to", 600, s), +0.001, -0.001
    ),
    "copy.sync_memcpy_per_step": Case(
        "copy.sync_memcpy",
        lambda p: evidence(cap=capture(ops=[op("cudaMemcpy", round(p * N_STEPS), 500.0)])),
        0,
        -1 / N_STEPS,
    ),
    "steps.zero_per_step": Case(
        "steps.zero_grad_zeros",
        lambda p: evidence(cap=capture(ops=[op("aten::zero_", round(p * N_STEPS), 1000.0)])),
        0,
        -1 / N_STEPS,
    ),
    "memory.malloc_per_step": Case(
        "memory.malloc_in_loop",
        lambda p: evidence(cap=capture(ops=[op("cudaMalloc", round(p * N_STEPS), 200.0)])),
        0,
        -1 / N_STEPS,
    ),
    # -- communication
    "comm.share": Case("comm.share", lambda s: comm(s, 0.2), +0.001, -0.001),
    "comm.overlap": Case("comm.poor_overlap", lambda o: comm(0.07, o), -0.01, +0.01),
    "comm.poor_overlap_share": Case("comm.poor_overlap", lambda s: comm(s, 0.2), +0.001, -0.001),
    # -- kernel efficiency and attention
    "precision.fp32_gemm_share": Case(
        "precision.fp32_matmul",
        lambda s: of_kernels(SGEMM, "gemm", s),
        +0.001,
        -0.001,
    ),
    "kernels.elementwise_share": past_share(
        "kernels.elementwise_bound", lambda s: of_kernels(ELEMENTWISE, "elementwise", s)
    ),
    "kernels.busy_share": past_share(
        "kernels.elementwise_bound",
        lambda b: of_kernels(ELEMENTWISE, "elementwise", 1.0, busy=b * SPAN),
    ),
    "kernels.top_kernel_share": Case("kernels.top_kernel", top_kernel, +0.001, -0.001),
    "kernels.layout_share": past_share(
        "kernels.layout_conversion", lambda s: of_kernels("nhwcToNchwKernel", "other", s)
    ),
    "attention.softmax_share": past_share(
        "attention.hand_written",
        lambda s: evidence(
            cap=capture(
                [
                    kernel(
                        "cunn_SoftMaxForward<SoftMaxForwardEpilogue>", "reduction", 10, s * SPAN
                    ),
                    kernel(GEMM, "gemm", 100, (1 - s) * SPAN),
                ],
                busy_us=SPAN,
            )
        ),
    ),
    "attention.min_t": Case("attention.hand_written", attention, 0, -1),
    "attention.flash_sm80": Case(
        "attention.sdpa_efficient", lambda e: flash_rate(e, "8.0"), -0.001, +0.001
    ),
    "attention.flash_sm90": Case(
        "attention.sdpa_efficient", lambda e: flash_rate(e, "9.0"), -0.001, +0.001
    ),
    # -- memory (an 80 GiB device)
    "memory.near_full": past_share(
        "memory.near_full",
        lambda s: evidence(
            mem=memory([(40 * GIB, 10)], reserved=41 * GIB, peak_reserved=int(s * 80 * GIB))
        ),
    ),
    "memory.fragment_factor": Case(
        "memory.fragmentation",
        lambda f: evidence(mem=memory([(8 * GIB, 10)], reserved=int(f * 8 * GIB))),
        +0.01,
        -0.01,
    ),
    "memory.fragment_bytes": Case(
        "memory.fragmentation",
        lambda b: evidence(mem=memory([(GIB, 10)], reserved=int(GIB + b))),
        0,
        -(2**20),
    ),
    # -- the job's GPU (GPM means over its samples)
    "gpu.low_util_pct": Case("gpu.low_util", lambda u: gpm_job(util_gpu_pct=u), -0.1, 0),
    "gpu.busy_util_pct": Case(
        "gpu.sm_underused", lambda u: gpm_job(util_gpu_pct=u, sm=30.0), 0, -0.1
    ),
    "gpu.no_tensor_pct": Case(
        "gpu.no_tensor_work", lambda x: gpm_job(tensor=x, fp32=70.0), -0.1, 0
    ),
    "gpu.fp32_pipe_pct": Case(
        "gpu.no_tensor_work",
        lambda x: gpm_job(tensor=0.0, fp32=x),
        0,
        -0.1,
    ),
    "gpu.low_sm_pct": Case("gpu.sm_underused", lambda x: gpm_job(sm=x), -0.1, 0),
    "gpu.low_occupancy_pct": Case(
        "gpu.low_occupancy", lambda x: gpm_job(occ=x, tensor=0.0), -0.1, 0
    ),
    "gpu.tensor_busy_pct": Case(
        "gpu.memory_bound", lambda x: gpm_job(dram=85.0, tensor=x), -0.1, 0
    ),
    "gpu.dram_bound_pct": Case("gpu.memory_bound", lambda x: gpm_job(dram=x, tensor=0.0), 0, -0.1),
    "gpu.spiky_stdev_pct": Case("gpu.spiky", lambda d: spiky(10, swing=d), 0, -0.1),
    "gpu.hot_c": Case("gpu.throttled", lambda c: gpm_job(temp_gpu_c=c), 0, -0.1),
    "gpu.throttle_share": Case("gpu.throttled", throttled_in, 0, -0.1),
    "gpu.mem_full_pct": Case(
        "device.memory_full",
        lambda p: snap(device(mem_used_bytes=int(p / 100 * 80 * GIB) + 1)),
        0,
        -0.1,
    ),
}

#: the Python finding without a capture reads the same shares from the sampler
SAMPLER_CASES: dict[str, Case] = {
    "cpu.python_share": past_share("cpu.python", sampled),
    "cpu.gpu_idle_share": past_share("cpu.python", lambda i: sampled(0.6, util=100.0 * (1 - i))),
}

#: the monitor's device rules read the same GPU thresholds: their boundaries too
DEVICE_CASES: dict[str, Case] = {
    "gpu.low_util_pct": Case("device.low_util", lambda u: snap(device(util_gpu_pct=u)), -0.1, 0),
    "gpu.dram_bound_pct": Case(
        "device.memory_bound", lambda x: device_gpm(dram_bw_util_pct=x), 0, -0.1
    ),
    "gpu.tensor_busy_pct": Case(
        "device.memory_bound",
        lambda x: device_gpm(dram_bw_util_pct=85.0, tensor_activity_pct=x),
        -0.1,
        0,
    ),
    "gpu.fp32_pipe_pct": Case(
        "device.no_tensor_work",
        lambda x: device_gpm(fp32_activity_pct=x),
        0,
        -0.1,
    ),
}


def said(rule_id: str, ev: Any) -> list[str]:
    """The severities of ``rule_id``'s findings, those under a cause that names
    the same time (a symptom's ``related`` place) included."""
    found = device_findings(ev) if isinstance(ev, Snapshot) else engine.analyze(ev)
    every = [*found, *(r for f in found for r in f.related)]
    return [f.severity for f in every if f.rule == rule_id]


@pytest.mark.parametrize("key", sorted(CASES))
def test_the_rule_speaks_just_past_its_threshold(key: str) -> None:
    case = CASES[key]
    assert said(case.rule, case.at(key)[0]), f"{case.rule} quiet past {key}"


@pytest.mark.parametrize("key", sorted(CASES))
def test_the_rule_stays_quiet_just_short_of_it(key: str) -> None:
    case = CASES[key]
    assert said(case.rule, case.at(key)[1]) == [], f"{case.rule} spoke short of {key}"


@pytest.mark.parametrize("key", sorted(SAMPLER_CASES))
def test_the_samplers_python_finding_reads_the_same_thresholds(key: str) -> None:
    case = SAMPLER_CASES[key]
    past, short = case.at(key)
    assert said(case.rule, past) and said(case.rule, short) == []


@pytest.mark.parametrize("offset", [0.001, -0.001])
def test_the_loadings_hot_function_is_named_from_its_share(offset: float) -> None:
    """``data.hot_share`` decides whether the data finding names the function,
    not whether it speaks."""
    (f,) = [
        f
        for f in engine.analyze(loading_in(t("data.hot_share") + offset))
        if f.rule == "data.loader_wait"
    ]
    named = "spend" in f.evidence and "decode (data.py:12)" in f.fix
    assert named is (offset > 0)


@pytest.mark.parametrize("key", sorted(DEVICE_CASES))
def test_the_monitor_reads_the_same_thresholds(key: str) -> None:
    case = DEVICE_CASES[key]
    past, short = case.at(key)
    assert said(case.rule, past) and said(case.rule, short) == []


@pytest.mark.parametrize("seconds", [0.9, 1.1])
def test_a_leak_is_critical_within_the_oom_horizon(seconds: float) -> None:
    """``memory.oom_soon_s`` sets the severity, not whether the rule speaks."""
    soon = t("memory.oom_soon_s")
    expected = ["crit"] if seconds < 1 else ["warn"]
    assert said("memory.growth", growing_for(soon * seconds)) == expected


@pytest.mark.parametrize("offset", [0.001, -0.001])
def test_a_foreach_optimizer_is_told_to_fuse_from_its_share_of_the_launches(
    offset: float,
) -> None:
    """``launch.optimizer_share`` decides whether the launch fix advises a fused
    optimizer to a job whose optimizer is foreach already, not whether it speaks."""
    cap = launch_bound(ops=[op("aten::_foreach_addcdiv_", 5, 100.0)])
    ev = dataclasses.replace(
        evidence(cap=cap), optimizer_launch_share=t("launch.optimizer_share") + offset
    )
    (f,) = [f for f in engine.analyze(ev) if f.rule == "launch.overhead"]
    assert ("a fused optimizer" in f.fix) is (offset > 0)


@pytest.mark.parametrize("offset", [0.001, -0.001])
def test_workers_that_wait_for_work_are_not_told_to_multiply(offset: float) -> None:
    """``data.workers_idle`` decides whether the data finding blames the
    batches' hand-off instead of the workers' speed, not whether it speaks."""
    (f,) = [
        f
        for f in engine.analyze(waiting_workers(t("data.workers_idle") + offset))
        if f.rule == "data.loader_wait"
    ]
    handoff = "wait for work" in f.evidence and f.fix.startswith("the workers keep up")
    assert handoff is (offset > 0)
    assert ("raise num_workers" in f.fix) is (offset < 0)


@pytest.mark.parametrize("offset", [0.01, -0.01])
def test_a_job_whose_compiled_regions_issue_little_is_told_it_runs_eager(offset: float) -> None:
    """``launch.compiled_share`` decides whether the launch finding speaks to a
    compiled job (its compiled graphs' overhead) or to an eager one with a
    compiled region (compile what issues the rest), not whether it speaks."""
    from gputui.protocol.trace_metrics import JobMarkers

    share = t("launch.compiled_share") + offset
    marks = JobMarkers(compiled=True, compiled_launch_share=share)
    (f,) = [
        f
        for f in engine.analyze(evidence(cap=launch_bound(markers=marks)))
        if f.rule == "launch.overhead"
    ]
    assert f.fix.startswith("the model is already compiled") is (offset > 0)
    eager = f"its regions made {share * 100:.0f}% of the kernel launches"
    assert (eager in f.fix) is (offset < 0)


def test_every_threshold_has_a_boundary_case() -> None:
    assert set(CASES) | {
        "memory.oom_soon_s",
        "data.hot_share",
        "data.workers_idle",
        "launch.compiled_share",
        "launch.optimizer_share",
    } == set(TABLE)


def test_the_printed_trigger_is_the_tables() -> None:
    """A trigger prints the table's value, so the docs follow the code."""
    from gputui.analysis.registry import REGISTRY

    r = REGISTRY["launch.overhead"]
    assert "launch.short_kernel_us" in r.thresholds
    assert f"< {TABLE['launch.short_kernel_us'].text}" in r.trigger
    assert "{" not in "".join(rr.trigger for rr in REGISTRY.values())


@pytest.mark.parametrize(
    ("cc", "says", "never"),
    [
        (None, "bf16/fp16 or TF32", None),
        ("8.0", "bf16/fp16 or TF32", None),
        ("7.9", "fp16 tensor cores, no TF32 or bf16", "bf16/fp16 or TF32"),
        ("7.0", "fp16 tensor cores, no TF32 or bf16", "bf16/fp16 or TF32"),
        ("6.9", "no tensor cores", "fp16 inputs"),
    ],
)
def test_a_dominant_gemms_advice_names_the_tensor_cores_the_gpu_has(
    cc: str | None, says: str, never: str | None
) -> None:
    """TF32 and bf16 tensor cores came with sm 8.0, fp16 ones with sm 7.0."""
    ev = top_kernel(0.9)
    ev = dataclasses.replace(ev, compute_capability=cc)
    (f,) = [f for f in engine.analyze(ev) if f.rule == "kernels.top_kernel"]
    assert says in f.fix
    assert never is None or never not in f.fix


@pytest.mark.parametrize(
    ("name", "base"),
    [
        # vLLM's FP4 GEMM on a GB10, as its trace names it: not demangled
        ("_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalIN4cute5tupleIJiiiiEEE", True),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", False),
    ],
)
def test_the_deep_dive_of_a_mangled_kernel_matches_its_mangled_name(name: str, base: bool) -> None:
    """ncu matches --kernel-name against a kernel's demangled function name
    unless --kernel-name-base says otherwise: a trace's mangled name needs it."""
    others = [kernel(f"{GEMM}_{k}", "gemm", 10, 0.02 * SPAN) for k in range(5)]
    ev = evidence(cap=capture([kernel(name, "gemm", 10, 0.9 * SPAN), *others]))
    (f,) = [f for f in engine.analyze(ev) if f.rule == "kernels.top_kernel"]
    assert f"--kernel-name regex:{name[:40]}" in f.confirm
    assert ("--kernel-name-base mangled --kernel-name" in f.confirm) is base


#: the slow-step thresholds as the epoch-start rule reads them: slow epoch starts
#: (every 10th step), and two slow ones among 400 ordinary steps adding share s
#: (each over 3x the median there)
EPOCH_CASES = {
    "steps.slow_factor": Case(
        "data.epoch_start", lambda f: epoch_evidence(f, every=10, n=60), +0.01, -0.01
    ),
    "steps.outlier_share": past_share(
        "data.epoch_start", lambda s: epoch_evidence((1 + 199 * s) / (1 - s), every=200, n=403)
    ),
}


def epoch_evidence(slow: float, every: int, n: int) -> Any:
    from tests.unit.test_rules import RESTARTING, epochs

    return evidence(epochs(slow=slow, at=50 % every, every=every, n=n), loader=RESTARTING)


@pytest.mark.parametrize("key", sorted(EPOCH_CASES))
def test_slow_epoch_starts_read_the_slow_step_thresholds(key: str) -> None:
    case = EPOCH_CASES[key]
    past, short = case.at(key)
    assert said(case.rule, past) and said(case.rule, short) == []


@pytest.mark.parametrize(("mean_us", "word"), [(3.0, "tiny"), (15.0, "short")])
def test_short_kernels_that_are_not_tiny_are_called_short(mean_us: float, word: str) -> None:
    """The launch finding's title says "tiny" where the kernels under
    ``launch.tiny_kernel_us`` are ``launch.tiny_share`` of them or more, and
    "short" where only their mean is under ``launch.short_kernel_us`` (an A100
    trace of five 17 us GEMMs was "many tiny kernels", "0% of them under 10us")."""
    calls = 2000
    cap = capture([kernel("elementwise_kernel<add>", "elementwise", calls, calls * mean_us)])
    (f,) = [f for f in engine.analyze(evidence(cap=cap)) if f.rule == "launch.overhead"]
    assert f.title == f"the step is launch-bound: many {word} kernels"
