"""Each analyzer rule fires on evidence that should fire it and stays quiet on
evidence that should not; the engine ranks findings and survives a broken rule."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import pytest

from gputui.analysis import engine
from gputui.analysis.evidence import CaptureView, JobEvidence
from gputui.analysis.finding import Finding
from gputui.analysis.registry import REGISTRY
from gputui.ceilings.datasheet import H100_SXM
from gputui.protocol.capture import CaptureResult, CpuOpRow
from gputui.protocol.compile import CompileReason, CompileReport
from gputui.protocol.hello import LoaderInfo
from gputui.protocol.messages import StepFlag
from gputui.protocol.op_rows import OpRow
from gputui.protocol.profile import KIND_TORCH, KIND_USER, ProfileFunction, PythonProfile
from tests.helpers import memsnap
from tests.helpers.evidence import (
    GIB,
    account,
    capture,
    evidence,
    gpu_samples,
    kernel,
    lightning_logging_profile,
    memory,
    op,
    op_row,
    python_profile,
    steps,
)


def attention_capture(softmax_us: float, *ops: CpuOpRow) -> CaptureResult:
    """100 ms of kernels: softmax forward and backward, GEMMs for the rest."""
    return capture(
        [
            kernel("cunn_SoftMaxForward<SoftMaxForwardEpilogue>", "reduction", 10, softmax_us),
            kernel(GEMM_BF16, "gemm", 100, 100_000.0 - softmax_us),
        ],
        list(ops),
        busy_us=100_000.0,
    )


#: a step account whose Python share is the rest: 26% or 24% with sync 0.14 or 0.16
AROUND_PYTHON = {"dispatch": 0.16, "launch": 0.04, "data": 0.2, "comm": 0.2}
DEFAULT = {"forward": 0.01, "backward": 0.02, "optimizer": 0.004, "other": 0.002}
GEMM_BF16 = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"


def with_phases(**changes: float) -> list:
    return steps(phases={**DEFAULT, **changes})


def leak(per_step: int) -> list:
    return memory([(4 * GIB + per_step * 10 * i, 10 * i + 10) for i in range(60)])


def ramp_then_flat() -> list:
    return memory([(min(4 * GIB + 200 * 2**20 * i, 5 * GIB), 10 * i + 10) for i in range(60)])


def slow_every_tenth() -> list:
    return steps(walls=[0.18 if k % 10 == 5 else 0.036 for k in range(60)])


def epochs(slow: float = 5.0, at: int = 5, every: int = 10, n: int = 60) -> list:
    """Epochs of ``every`` steps, the first of each flagged by the hook (a new
    DataLoader iterator) and ``slow`` times the others; ``at`` places the
    epoch starts."""
    walls = [0.036 * (slow if k % every == at % every else 1.0) for k in range(n)]
    flag = int(StepFlag.LOADER_START)
    return [
        dataclasses.replace(s, flags=flag) if s.index % every == at % every else s
        for s in steps(n=n, walls=walls)
    ]


#: a DataLoader with 2 workers, started anew each epoch
RESTARTING = LoaderInfo(num_workers=2, pin_memory=True, persistent_workers=False)


def gemm_capture(**kw: object) -> object:
    return capture([kernel(GEMM_BF16, "gemm", 100, 80_000.0)], busy_us=95_000, **kw)  # type: ignore[arg-type]


def spiky_gpu() -> list:
    return [s for k in range(10) for s in gpu_samples(1, util_gpu_pct=10.0 if k % 2 else 90.0)]


ROOF = H100_SXM.roof()
SQUARE = [[4096, 4096], [4096, 4096]]


def roofline_case(*rows: OpRow, roof: bool = True) -> JobEvidence:
    """A capture with FLOPs of these op rows, on the H100 datasheet roof."""
    total = sum(r.device_us for r in rows)
    cap = capture(
        [kernel(GEMM_BF16, "gemm", 100, total)],
        span_us=total * 1.1,
        op_rows=rows,
    )
    return evidence(cap=cap, roof=ROOF if roof else None)


def test_an_fp32_gemm_below_its_roof_is_told_the_tensor_cores_its_gpu_has() -> None:
    """An fp32 GEMM at a third of its roof: TF32 or bf16 where the GPU has them
    (sm 8.0 on), fp16 autocast on a T4 or V100, which have fp16 tensor cores only."""
    from gputui.analysis.roof import Roof
    from gputui.ceilings.datasheet import T4

    # 2*4096^3 FLOPs per call, 10 calls: in 200 ms 6.9 TFLOP/s, 10% of the H100's fp32
    # roof (67); in 600 ms 2.3 TFLOP/s, 28% of the T4's (8.1)
    def fp32_case(roof: Roof, cc: str, device_us: float) -> Finding:
        row = op_row("aten::mm", SQUARE, "float", 10, device_us)
        cap = capture([kernel("sgemm_128x64", "gemm", 10, device_us)], span_us=device_us * 1.1,
                      op_rows=(row,))  # fmt: skip
        (f,) = fired("roofline.below_roof", evidence(cap=cap, roof=roof, compute_capability=cc))
        return f

    h100 = fp32_case(ROOF, "9.0", 200_000.0)
    assert "set_float32_matmul_precision('high')" in h100.fix
    assert "bfloat16" in h100.fix and "torch.float16" not in h100.fix
    t4 = fp32_case(T4.roof(), "7.5", 600_000.0)
    assert "torch.float16" in t4.fix and "GradScaler" in t4.fix
    assert "float32_matmul_precision" not in t4.fix and "bfloat16" not in t4.fix


def compiled_steps() -> list:
    """60 steps, the first and the 30th compiling (a recompile)."""
    out = steps(walls=[2.0 if k in (0, 30) else 0.036 for k in range(60)])
    flag = int(StepFlag.COMPILE)
    return [dataclasses.replace(s, flags=flag) if k in (0, 30) else s for k, s in enumerate(out)]


def compile_report(breaks: int = 3) -> CompileReport:
    """A job's torch.compile: a print in its forward (a break) and a batch-size
    change (a recompile), or none of either."""
    here = "/home/user/project/train.py"
    reasons = (
        (
            CompileReason(
                "Failed to trace builtin operator (Avoid calling builtin `print`)",
                breaks,
                here,
                12,
                "forward",
            ),
        )
        if breaks
        else ()
    )
    recompiles = (
        (CompileReason("tensor 'x' size mismatch at index 0. expected 8, actual 9", 1, here, 10),)
        if breaks
        else ()
    )
    return CompileReport(
        frames=3,
        graphs=2,
        graph_breaks=breaks,
        recompiles=len(recompiles) + 2,
        compile_s=3.2,
        breaks=reasons,
        recompile_reasons=recompiles,
        hook_recompiles=2,
    )


Factory = Callable[[], JobEvidence]
CASES: dict[str, tuple[Factory, Factory]] = {
    # 2*1000*4095*1000 FLOPs per call, 100 calls in 4.095 ms: 200 TFLOP/s, 20% of the
    # 989.5 bf16 roof at an intensity of ~446 FLOP/B (compute-bound); 4095 misaligned
    "roofline.below_roof": (
        lambda: roofline_case(
            op_row("aten::mm", [[1000, 4095], [4095, 1000]], "c10::BFloat16", 100, 4_095.0)
        ),
        lambda: roofline_case(op_row("aten::mm", SQUARE, "c10::BFloat16", 100, 19_000.0)),
    ),
    # an add over 4096^2 bf16 tensors moves 3 x 32 MiB per call: 100 calls in 4 ms are
    # 2.5 TB/s, 75% of the bandwidth roof (so below_roof is quiet), and 68% of the
    # ops' time: the step is memory-bound (one with a larger GEMM is not)
    "roofline.memory_bound": (
        lambda: roofline_case(
            op_row("aten::add", SQUARE, "c10::BFloat16", 100, 4_000.0),
            op_row("aten::mm", SQUARE, "c10::BFloat16", 10, 1_900.0),
        ),
        lambda: roofline_case(
            op_row("aten::add", SQUARE, "c10::BFloat16", 100, 4_000.0),
            op_row("aten::mm", SQUARE, "c10::BFloat16", 100, 19_000.0),
        ),
    ),
    "data.loader_wait": (
        lambda: evidence(with_phases(data=0.02)),
        lambda: evidence(with_phases(data=0.001)),
    ),
    "steps.forward_slower_than_backward": (
        lambda: evidence(with_phases(forward=0.03, backward=0.01)),
        lambda: evidence(
            steps(
                phases={**DEFAULT, "forward": 0.03, "backward": 0.01},
                gpu={"forward": 0.03, "backward": 0.01},
            )
        ),
    ),
    "steps.backward_heavy": (
        lambda: evidence(with_phases(forward=0.005, backward=0.02)),
        lambda: evidence(with_phases()),
    ),
    "steps.optimizer_heavy": (
        lambda: evidence(with_phases(optimizer=0.012)),
        lambda: evidence(
            steps(phases={**DEFAULT, "optimizer": 0.012}, gpu={"forward": 0.01, "optimizer": 0.001})
        ),
    ),
    "steps.outside_phases": (
        lambda: evidence(with_phases(other=0.03)),
        lambda: evidence(with_phases()),
    ),
    "data.epoch_start": (
        lambda: evidence(epochs(), loader=RESTARTING),
        lambda: evidence(epochs(slow=1.0), loader=RESTARTING),
    ),
    "steps.slow_outliers": (
        lambda: evidence(slow_every_tenth()),
        lambda: evidence(with_phases()),
    ),
    "steps.warmup": (
        lambda: evidence(steps(walls=[0.9, 0.5, 0.4] + [0.036] * 57)),
        lambda: evidence(steps(start=10)),
    ),
    "compile.breaks_recompiles": (
        lambda: evidence(compiled_steps(), compile_report=compile_report()),
        lambda: evidence(compiled_steps(), compile_report=compile_report(breaks=0)),
    ),
    "steps.coarse_phases": (
        lambda: evidence(phases_coarse=True),
        lambda: evidence(phases_coarse=False),
    ),
    "memory.leak_site": (
        lambda: evidence(memory_snapshot=memsnap.result(memsnap.planted_leak())),
        lambda: evidence(memory_snapshot=memsnap.result(memsnap.planted_leak(leak=False))),
    ),
    "memory.growth": (
        lambda: evidence(mem=leak(8 * 2**20)),
        lambda: evidence(mem=ramp_then_flat()),
    ),
    "memory.near_full": (
        lambda: evidence(mem=memory([(40 * GIB, 10)], reserved=60 * GIB, peak_reserved=75 * GIB)),
        lambda: evidence(mem=memory([(40 * GIB, 10)], reserved=41 * GIB)),
    ),
    "memory.alloc_retries": (
        lambda: evidence(mem=memory([(GIB, 10)], retries=3)),
        lambda: evidence(mem=memory([(GIB, 10)])),
    ),
    "memory.fragmentation": (
        lambda: evidence(mem=memory([(4 * GIB, 10)], reserved=10 * GIB)),
        lambda: evidence(mem=memory([(4 * GIB, 10)], reserved=int(4.5 * GIB))),
    ),
    "memory.malloc_in_loop": (
        lambda: evidence(cap=capture(ops=[op("cudaMalloc", 20, 2000.0)])),
        lambda: evidence(cap=capture(ops=[op("cudaMalloc", 2, 200.0)])),
    ),
    "gpu.throttled": (
        lambda: evidence(gpu=gpu_samples(throttle_reasons=("sw_power_cap",), clock_sm_mhz=1500)),
        lambda: evidence(gpu=gpu_samples()),
    ),
    "gpu.spiky": (lambda: evidence(gpu=spiky_gpu()), lambda: evidence(gpu=gpu_samples())),
    "gpu.no_tensor_work": (
        lambda: evidence(gpu=gpu_samples(tensor=0.0, fp32=70.0)),
        lambda: evidence(gpu=gpu_samples(tensor=60.0)),
    ),
    "gpu.sm_underused": (
        lambda: evidence(gpu=gpu_samples(sm=30.0)),
        lambda: evidence(gpu=gpu_samples(sm=90.0)),
    ),
    "gpu.low_occupancy": (
        lambda: evidence(gpu=gpu_samples(occ=15.0, tensor=0.0)),
        lambda: evidence(gpu=gpu_samples(occ=40.0)),
    ),
    "gpu.memory_bound": (
        lambda: evidence(gpu=gpu_samples(dram=85.0, tensor=0.0)),
        lambda: evidence(gpu=gpu_samples(dram=30.0)),
    ),
    "gpu.low_util": (
        lambda: evidence(gpu=gpu_samples(util_gpu_pct=30.0)),
        lambda: evidence(gpu=gpu_samples(util_gpu_pct=90.0)),
    ),
    "sync.host_sync": (
        lambda: evidence(
            cap=capture(
                [kernel(GEMM_BF16, "gemm", 50, 50_000.0)],
                [op("cudaStreamSynchronize", 50, 30_000.0), op("aten::item", 50, 500.0)],
            )
        ),
        lambda: evidence(
            cap=capture(
                [kernel(GEMM_BF16, "gemm", 50, 50_000.0)], [op("cudaDeviceSynchronize", 1, 900.0)]
            )
        ),
    ),
    "launch.overhead": (
        lambda: evidence(
            cap=capture([kernel("elementwise_kernel<add>", "elementwise", 5000, 15_000.0)])
        ),
        lambda: evidence(cap=gemm_capture()),
    ),
    # the step's account: Python outside torch holds 30% of the step (the largest
    # CPU-side share) while the GPU idles; quiet at 24%
    # softmax kernels 11% (or 9%) of kernel time beside GEMMs, nothing fused
    "attention.hand_written": (
        lambda: evidence(cap=attention_capture(11_000.0)),
        lambda: evidence(cap=attention_capture(9_000.0)),
    ),
    # SDPA's math backend ran (or its flash kernel)
    "attention.sdpa_math": (
        lambda: evidence(
            cap=attention_capture(20_000.0, op("aten::_scaled_dot_product_attention_math", 3, 50.0))
        ),
        lambda: evidence(
            cap=attention_capture(
                20_000.0, op("aten::_scaled_dot_product_flash_attention", 3, 50.0)
            )
        ),
    ),
    # SDPA's memory-efficient kernels ran in fp32 (or cuDNN's in bf16)
    "attention.sdpa_efficient": (
        lambda: evidence(
            cap=capture(
                [
                    kernel(
                        "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::"
                        "AttentionKernel<float, cutlass::arch::Sm80, true, 64, 64, 64>::Params)",
                        "attention",
                        30,
                        40_000.0,
                    ),
                    kernel(GEMM_BF16, "gemm", 100, 60_000.0),
                ],
                busy_us=100_000.0,
            )
        ),
        lambda: evidence(
            cap=capture(
                [
                    kernel(
                        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7",
                        "attention",
                        30,
                        40_000.0,
                    ),
                    kernel(GEMM_BF16, "gemm", 100, 60_000.0),
                ],
                busy_us=100_000.0,
            )
        ),
    ),
    "cpu.python": (
        lambda: evidence(cap=capture(account=account(**AROUND_PYTHON, sync=0.14))),  # 26%
        lambda: evidence(cap=capture(account=account(**AROUND_PYTHON, sync=0.16))),  # 24%
    ),
    "cpu.logging": (
        # Lightning's self.log and progress bar: 20% of the training thread's time
        lambda: dataclasses.replace(
            evidence(python_profile=lightning_logging_profile(0.2)), cuda=False
        ),
        lambda: dataclasses.replace(
            evidence(python_profile=lightning_logging_profile(0.05)), cuda=False
        ),
    ),
    "cpu.tensor_creation": (
        # 5 calls of 2 ms on the CPU: 20% of five 10 ms steps
        lambda: evidence(cap=capture(ops=[op("aten::normal_", 5, 10_000.0)], account=account())),
        # 500 GPU launches of 10 us: random tensors made where they are used
        lambda: evidence(cap=capture(ops=[op("aten::normal_", 500, 5_000.0)], account=account())),
    ),
    "cpu.host_ops": (
        # 5 sorts of 3 ms on host tensors: 30% of five 10 ms steps
        lambda: evidence(cap=capture(ops=[op("aten::sort", 5, 15_000.0)], account=account())),
        # the same share in 500 sorts of 30 us: GPU launches, not CPU work
        lambda: evidence(cap=capture(ops=[op("aten::sort", 500, 15_000.0)], account=account())),
    ),
    "cpu.no_gpu": (
        # a trace without GPU work whose torch ops take 60% of the step
        lambda: cpu_trace(0.6),
        lambda: cpu_trace(0.3),
    ),
    "launch.idle_gaps": (
        lambda: evidence(cap=capture([kernel(GEMM_BF16, "gemm", 100, 50_000.0)])),
        lambda: evidence(cap=gemm_capture()),
    ),
    "copy.pageable": (
        lambda: evidence(
            cap=capture([kernel("Memcpy HtoD (Pageable -> Device)", "memcpy", 5, 30_000.0)])
        ),
        lambda: evidence(
            cap=capture([kernel("Memcpy HtoD (Pinned -> Device)", "memcpy", 5, 30_000.0)])
        ),
    ),
    "copy.transfers": (
        lambda: evidence(
            cap=capture([kernel("Memcpy HtoD (Pinned -> Device)", "memcpy", 5, 20_000.0)])
        ),
        lambda: evidence(
            cap=capture([kernel("Memcpy HtoD (Pinned -> Device)", "memcpy", 5, 2_000.0)])
        ),
    ),
    "copy.frequent_casts": (
        lambda: evidence(
            cap=capture(ops=[op("aten::to", 600, 3000.0), op("aten::mm", 50, 5000.0)])
        ),
        lambda: evidence(cap=capture(ops=[op("aten::to", 20, 100.0), op("aten::mm", 50, 5000.0)])),
    ),
    "copy.sync_memcpy": (
        lambda: evidence(cap=capture(ops=[op("cudaMemcpy", 10, 500.0)])),
        lambda: evidence(cap=capture(ops=[op("cudaMemcpyAsync", 10, 500.0)])),
    ),
    "precision.fp32_matmul": (
        lambda: evidence(cap=capture([kernel("ampere_sgemm_128x64_nn", "gemm", 100, 80_000.0)])),
        lambda: evidence(cap=gemm_capture()),
    ),
    "kernels.elementwise_bound": (
        lambda: evidence(
            cap=capture(
                [kernel("vectorized_elementwise_kernel<mul>", "elementwise", 100, 80_000.0)],
                busy_us=90_000,
            )
        ),
        lambda: evidence(cap=gemm_capture()),
    ),
    # cuDNN's NCHW/NHWC conversions 6% of kernel time (or none)
    "kernels.layout_conversion": (
        lambda: evidence(
            cap=capture(
                [
                    kernel("void cudnn::ops::nchwToNhwcKernel<float, float>", "other", 90, 5_000.0),
                    kernel(GEMM_BF16, "gemm", 100, 75_000.0),
                ],
                busy_us=85_000,
            )
        ),
        lambda: evidence(cap=gemm_capture()),
    ),
    "kernels.top_kernel": (
        lambda: evidence(cap=gemm_capture()),
        lambda: evidence(
            cap=capture([kernel(f"{GEMM_BF16}_{k}", "gemm", 10, 8_000.0) for k in range(10)])
        ),
    ),
    "steps.zero_grad_zeros": (
        lambda: evidence(cap=capture(ops=[op("aten::zero_", 200, 1000.0)])),
        lambda: evidence(cap=capture(ops=[op("aten::zero_", 5, 20.0)])),
    ),
    "comm.share": (
        lambda: evidence(
            cap=capture(
                [kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "communication", 10, 30_000.0)],
                overlap=0.2,
            )
        ),
        lambda: evidence(
            cap=capture(
                [kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "communication", 10, 2_000.0)],
                overlap=0.2,
            )
        ),
    ),
    "comm.poor_overlap": (
        lambda: evidence(
            cap=capture(
                [kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "communication", 10, 7_000.0)],
                overlap=0.2,
            )
        ),
        lambda: evidence(
            cap=capture(
                [kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "communication", 10, 7_000.0)],
                overlap=0.9,
            )
        ),
    ),
}


def cpu_trace(
    dispatch: float, ops: Sequence[CpuOpRow] = (), device: str | None = None
) -> JobEvidence:
    """A trace of a job no GPU ran: torch's ops ``dispatch`` of the step."""
    cap = capture(ops=list(ops) or [op("aten::addmm", 10, 30_000.0)],
                  account=account(gpu_busy=None, dispatch=dispatch))  # fmt: skip
    return dataclasses.replace(evidence(cap=cap), cuda=False, from_trace=True, device_name=device)


def fired(rule_id: str, ev: JobEvidence) -> list[Finding]:
    return [f for f in engine.analyze(ev) if f.rule == rule_id]


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_fires(rule_id: str) -> None:
    found = fired(rule_id, CASES[rule_id][0]())
    assert len(found) == 1, found
    f = found[0]
    assert f.title and f.evidence and f.fix and f.confirm and f.source


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_stays_quiet(rule_id: str) -> None:
    assert fired(rule_id, CASES[rule_id][1]()) == []


def test_every_job_rule_has_cases() -> None:
    assert set(engine.job_rules()) == set(CASES)


def test_rules_are_silent_until_enough_steps() -> None:
    ev = evidence(steps(n=10, phases={**DEFAULT, "data": 0.05}))
    assert fired("data.loader_wait", ev) == []


def test_warmup_and_profiled_steps_are_left_out() -> None:
    profiled = steps(n=30, phases={**DEFAULT, "data": 0.5})
    profiled = [type(s)(**{**s.__dict__, "flags": 1}) for s in profiled]
    ev = evidence([*profiled, *steps(n=30, start=30)])
    assert ev.stats.count == 30 and fired("data.loader_wait", ev) == []


def test_impact_sets_severity_and_ranks() -> None:
    ev = evidence(
        with_phases(data=0.04),
        cap=capture([kernel("ampere_sgemm_64x64", "gemm", 10, 30_000.0)], busy_us=95_000),
    )
    found = engine.analyze(ev)
    impacts = [f.impact_pct for f in found if f.impact_pct is not None]
    assert impacts == sorted(impacts, reverse=True)
    data = next(f for f in found if f.rule == "data.loader_wait")
    assert data.severity == "crit" and data.impact_pct == pytest.approx(52.6, abs=0.1)
    assert data.impact_ms == pytest.approx(0.526 * ev.step_s * 1000, rel=1e-3)  # type: ignore[operator]


def test_memory_growth_is_critical_when_the_device_fills_soon() -> None:
    ev = evidence(mem=leak(512 * 2**20), total=10 * GIB)
    (f,) = fired("memory.growth", ev)
    assert f.severity == "crit" and "full in about" in f.evidence


def test_idle_time_is_bounded_by_what_nvml_saw_unprofiled() -> None:
    cap = capture([kernel("elementwise_kernel<add>", "elementwise", 5000, 15_000.0)])
    profiled_only = fired("launch.overhead", evidence(cap=cap))[0]
    busy_gpu = fired("launch.overhead", evidence(cap=cap, gpu=gpu_samples(util_gpu_pct=70.0)))[0]
    assert profiled_only.impact_pct == pytest.approx(85.0)
    assert busy_gpu.impact_pct == pytest.approx(30.0)


def test_a_broken_rule_does_not_hide_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(_ev: JobEvidence) -> list[Finding]:
        raise RuntimeError("bug")

    entry = REGISTRY["data.loader_wait"]
    monkeypatch.setitem(
        REGISTRY, "data.loader_wait", type(entry)(**{**entry.__dict__, "check": boom})
    )
    found = engine.analyze(evidence(with_phases(data=0.02, other=0.03)))
    assert any(f.rule == "analyzer.rule_failed" and "bug" in f.evidence for f in found)
    assert any(f.rule == "steps.outside_phases" for f in found)


def test_finding_json_shape() -> None:
    (f,) = fired("data.loader_wait", CASES["data.loader_wait"][0]())
    doc = f.to_json()
    assert set(doc) == {
        "rule",
        "severity",
        "scope",
        "title",
        "evidence",
        "impact_pct",
        "impact_ms",
        "fix",
        "confirm",
        "source",
        "gpu",
        "failure_in_s",
        "bucket",
        "overlap_pct",
        "related",
    }


def test_the_data_fixes_name_the_loaders_own_settings() -> None:
    """The hook reports the DataLoader's settings: the fix says which to change."""
    import dataclasses

    from gputui.protocol.schema import LoaderInfo

    waiting = evidence(with_phases(data=0.02))
    (generic,) = fired("data.loader_wait", waiting)
    (no_workers,) = fired(
        "data.loader_wait", dataclasses.replace(waiting, loader=LoaderInfo(num_workers=0))
    )
    assert "num_workers=0" in no_workers.fix and "num_workers=0" in no_workers.evidence
    (some,) = fired(
        "data.loader_wait",
        dataclasses.replace(waiting, loader=LoaderInfo(num_workers=4, pin_memory=True)),
    )
    # nothing sampled the workers: both ways out, and pin_memory is not asked
    # of a loader that pins already
    assert "if they fall behind, raise num_workers" in some.fix and some.fix != generic.fix
    assert "if they keep up" in some.fix and "pin_memory" not in some.fix
    (unpinned_loader,) = fired(
        "data.loader_wait",
        dataclasses.replace(waiting, loader=LoaderInfo(num_workers=4, pin_memory=False)),
    )
    assert unpinned_loader.fix.endswith("index whole batches at once, pin_memory=True")
    pageable = evidence(
        cap=capture([kernel("Memcpy HtoD (Pageable -> Device)", "memcpy", 5, 30_000.0)])
    )
    (unpinned,) = fired(
        "copy.pageable", dataclasses.replace(pageable, loader=LoaderInfo(num_workers=2))
    )
    assert unpinned.fix.startswith("the DataLoader runs with pin_memory=False")


def test_a_traces_pinned_copies_keep_pin_memory_out_of_the_data_fix() -> None:
    """A trace names no DataLoader settings, but its copies to the GPU say
    whether the batches come from pinned memory: pin_memory=True is asked
    only where none does, or some come from pageable memory."""
    from gputui.protocol.trace_metrics import JobMarkers

    def fix(markers: JobMarkers, *copies: str) -> str:
        cap = capture(
            [kernel("volta_sgemm_128x64_tn", "gemm", 6, 4_000.0)]
            + [kernel(c, "memcpy", 6, 400.0) for c in copies],
            markers=markers,
        )
        (f,) = fired("data.loader_wait", evidence(with_phases(data=0.02), cap=cap))
        return f.fix

    workers, main = JobMarkers(loader="workers"), JobMarkers(loader="main")
    pinned = "Memcpy HtoD (Pinned -> Device)"
    pageable = "Memcpy HtoD (Pageable -> Device)"
    assert fix(workers, pinned).endswith("index whole batches at once")
    assert fix(workers, pageable).endswith("index whole batches at once, pin_memory=True")
    assert fix(workers, pinned, pageable).endswith("pin_memory=True")
    assert fix(workers).endswith("pin_memory=True")  # no copy: not known
    assert "pin_memory" not in fix(main, pinned)
    assert "pin_memory=True" in fix(main, pageable)


def _optimizer_profile(function: str, file: str = "/venv/torch/optim/adam.py") -> PythonProfile:
    """A sampler profile whose optimizer phase runs torch.optim's ``function``."""
    return PythonProfile(
        sampled_s=10.0,
        samples=1000,
        functions=(
            ProfileFunction("/job/train.py", "main", KIND_USER, 20, 1, 0.5, 10.0),
            ProfileFunction(file, function, KIND_TORCH, 683, 600, 1.9, 1.9),
        ),
    )


def test_optimizer_heavy_fits_its_fix_to_the_implementation_the_sampler_saw() -> None:
    """The multi-tensor optimizer (AdamW's default on CUDA) is told to go fused,
    not to use the multi-tensor one it runs; a fused one gets no finding (its
    fix does not apply); a single-tensor one and an unknown one the general
    fix.  Measured on a compiled GPT-2 with AdamW's default on an H200: the
    finding told the job to use foreach=True, which it already did."""
    heavy = with_phases(optimizer=0.012)

    def run(profile: PythonProfile | None) -> list[Finding]:
        return fired("steps.optimizer_heavy", evidence(heavy, python_profile=profile))

    [multi] = run(_optimizer_profile("_multi_tensor_adam"))
    assert "multi-tensor implementation" in multi.evidence
    assert "_multi_tensor_adam" in multi.evidence
    assert multi.fix.startswith("switch to the fused implementation")
    [single] = run(_optimizer_profile("_single_tensor_adamw", "torch/optim/adamw.py"))
    assert "single-tensor implementation" in single.evidence
    assert single.fix.startswith("use the multi-tensor or fused")
    assert single.impact_pct is not None and multi.impact_pct is not None
    assert single.impact_pct > multi.impact_pct  # 66% of the phase against 40%
    assert run(_optimizer_profile("_fused_adamw")) == []
    [unknown] = run(None)
    assert "implementation" not in unknown.evidence
    assert unknown.impact_pct == pytest.approx(single.impact_pct)
    # a user's function of the same name is not torch.optim's
    [mine] = run(_optimizer_profile("_fused_adamw", "/job/my_optim.py"))
    assert "implementation" not in mine.evidence


def test_optimizer_heavy_reads_a_fused_optimizer_from_the_capture() -> None:
    heavy = with_phases(optimizer=0.012)
    fused = CaptureResult(cpu_ops=(CpuOpRow("aten::_fused_adamw_", 1, 1500.0, 1500.0),))
    assert fired("steps.optimizer_heavy", evidence(heavy, cap=fused)) == []
    foreach = CaptureResult(cpu_ops=(CpuOpRow("aten::_foreach_mul_", 1, 1500.0, 1500.0),))
    [multi] = fired("steps.optimizer_heavy", evidence(heavy, cap=foreach))
    assert "multi-tensor implementation" in multi.evidence


def test_slow_steps_that_wait_for_data_go_under_the_data_finding_named_by_their_period() -> None:
    """Every 10th step waits 0.3 s for data (a loader's slow shard): the slow-step
    finding names the period and goes under data.loader_wait, which ranks; its
    cost is the data bucket's, not a second claim on the same time."""
    records = steps(n=100)
    for s in records:
        if s.index % 10 == 9:
            s.phases["data"] = 0.3
            object.__setattr__(s, "wall", s.wall + 0.3)
    found = engine.analyze(evidence(records))
    top = found[0]
    assert top.rule == "data.loader_wait", [(f.rule, f.impact_pct) for f in found]
    (slow,) = [r for r in top.related if r.rule == "steps.slow_outliers"]
    assert "every 10th step" in slow.evidence and "waiting for data" in slow.evidence
    assert "steps.slow_outliers" not in [f.rule for f in found]
    # claims on the data bucket never add up past it
    assert top.impact_pct <= 100 * evidence(records).ledger.shares["data"] + 0.1


def test_slow_steps_outside_every_cause_stand_alone() -> None:
    """Slow steps whose extra time is in the model's phases (no cause claims it)
    stay a finding of their own, by their period."""
    walls = [0.036 * (5 if k % 10 == 9 else 1) for k in range(100)]
    found = engine.analyze(evidence(steps(n=100, walls=walls)))
    (slow,) = [f for f in found if f.rule == "steps.slow_outliers"]
    assert "every 10th step" in slow.evidence and slow.related == ()


def test_a_cpu_job_is_not_told_of_a_sync_in_its_forward() -> None:
    """A forward slower than backward points at a synchronisation with the GPU:
    a CPU job has none (its forward may simply hold more Python)."""
    import dataclasses

    from gputui.analysis.registry import REGISTRY

    rule = REGISTRY["steps.forward_slower_than_backward"]
    gpu_job = evidence(with_phases(forward=0.03, backward=0.01))
    assert list(rule.check(gpu_job))
    assert list(rule.check(dataclasses.replace(gpu_job, cuda=False))) == []


def test_the_job_diagnosis_is_the_cause_most_ranks_share() -> None:
    from gputui.analysis.diagnosis import job_diagnosis

    def f(rule: str, pct: float, severity: str = "warn") -> Finding:
        return Finding(rule, severity, "job", rule, "", "", impact_pct=pct)  # type: ignore[arg-type]

    per_rank = [
        (0, [f("launch.overhead", 40.0)]),
        (1, [f("launch.overhead", 50.0)]),
        (2, [f("data.loader_wait", 70.0)]),
        (3, [f("launch.overhead", 45.0), f("data.loader_wait", 20.0)]),
    ]
    d = job_diagnosis(per_rank)
    assert d is not None and d.cause == "launch.overhead" and d.ranks == (0, 1, 3)
    assert d.impact_pct == 45.0 and d.outliers == ((2, "data.loader_wait"),)
    assert "on 3 of 4 ranks" in d.sentence() and "rank 2: data.loader_wait" in d.sentence()
    # traces that are not one job's ranks: by their files' order, each its own step
    files = d.sentence(one_job=False)
    assert "on 3 of 4 traces, 45% of the step (median); trace 2: data.loader_wait" in files
    assert "rank" not in files
    # a straggler found by the rank rules is the diagnosis, with its own cause
    straggler = Finding("ranks.straggler", "crit", "rank 2", "rank 2 is the straggler", "", "")
    d = job_diagnosis(per_rank, [straggler])
    assert d is not None and d.straggler == 2 and d.cause == "data.loader_wait"
    assert job_diagnosis(per_rank[:1]) is None


def test_an_older_captures_launch_cost_is_held_to_its_cpu_ops_time() -> None:
    """A capture without a step account (an older gputui's) of a numpy-bound step:
    28 launches of 5 us in a 67 ms step.  Launch cost is at most the capture's
    CPU ops and launch calls, not the GPU's whole idle time."""
    walls = [0.067] * 60
    cap = capture(
        [kernel("elementwise_kernel<add>", "elementwise", 28 * 5, 28 * 5 * 5.0)],
        [op("cudaLaunchKernel", 28 * 5, 28 * 5 * 5.0), op("aten::add", 28 * 5, 28 * 5 * 10.0)],
        n_steps=5,
    )
    (f,) = fired("launch.overhead", evidence(steps(n=60, walls=walls), cap=cap))
    assert f.impact_pct is not None and f.impact_pct < 1.0
    assert "no step account" in f.evidence


def test_an_eager_launch_bound_step_that_synchronizes_is_told_what_blocks_graphs() -> None:
    """CUDA graphs cannot hold a read-back: a step with .item() calls hears that
    those go first, not "capture the step in a CUDA graph"."""
    kernels = [kernel("elementwise_kernel<add>", "elementwise", 5000, 15_000.0)]
    (quiet,) = fired("launch.overhead", evidence(cap=capture(kernels)))
    assert "capture the step in a CUDA graph" in quiet.fix
    syncing = capture(kernels, [op("cudaStreamSynchronize", 80, 400.0), op("aten::item", 80, 90.0)])
    (told,) = fired("launch.overhead", evidence(cap=syncing))
    assert "capture the step in a CUDA graph" not in told.fix
    assert "synchronizations per step" in told.fix and "keep those values on the GPU" in told.fix


def test_allocations_in_an_inference_loop_are_not_called_training() -> None:
    from gputui.protocol.trace_metrics import JobMarkers

    ops = [op("cudaMalloc", 20, 2000.0)]
    (train,) = fired("memory.malloc_in_loop", evidence(cap=capture(ops=ops)))
    assert train.title.endswith("inside the training loop")
    serving = capture(ops=ops, markers=JobMarkers(backward=False))
    forward_only = steps(phases={"forward": 0.01, "other": 0.002})
    (infer,) = fired("memory.malloc_in_loop", evidence(forward_only, cap=serving))
    assert infer.title.endswith("inside the inference loop")


def test_a_profile_without_a_compiled_region_tells_a_wrapped_model_why_it_ran_eager() -> None:
    """torch.compile skips a frame with a graph break inside a loop: the profile
    then shows no compiled region, and the advice says so; with no markers (an
    older capture) it stays silent, and a compiled profile gets the compiled advice."""
    from gputui.protocol.trace_metrics import JobMarkers

    kernels = [kernel("elementwise_kernel<add>", "elementwise", 5000, 15_000.0)]
    eager = capture(kernels, markers=JobMarkers(backward=True))
    (told,) = fired("launch.overhead", evidence(cap=eager))
    assert "no compiled region ran here" in told.fix and "TORCH_LOGS=graph_breaks" in told.fix
    (unknown,) = fired("launch.overhead", evidence(cap=capture(kernels)))
    assert "no compiled region" not in unknown.fix
    compiled = capture(kernels, markers=JobMarkers(backward=True, compiled=True))
    (done,) = fired("launch.overhead", evidence(cap=compiled))
    assert "already compiled" in done.fix and "no compiled region" not in done.fix


def test_a_cpu_jobs_torch_ops_are_its_compute_not_host_ops() -> None:
    """On a job without a GPU, torch's ops computing on the CPU are the work
    itself: cpu.host_ops speaks only of a GPU job's."""
    cap = capture(ops=[op("aten::sort", 5, 15_000.0)], account=account(gpu_busy=None))
    gpu_job = evidence(cap=cap)
    cpu_job = dataclasses.replace(gpu_job, cuda=False)
    assert "cpu.host_ops" in {f.rule for f in engine.analyze(gpu_job)}
    assert "cpu.host_ops" not in {f.rule for f in engine.analyze(cpu_job)}


def test_pinning_on_the_loaders_thread_is_not_cpu_work_of_the_step() -> None:
    """The DataLoader's pin-memory thread pins each batch beside the training
    thread: long aten::_pin_memory calls are neither torch ops holding the step
    (cpu.host_ops) nor taken out of launch.overhead's issuing time."""
    pinned = [op("aten::_pin_memory", 5, 15_000.0)]
    ev = evidence(cap=capture(ops=pinned, account=account()))
    assert "cpu.host_ops" not in {f.rule for f in engine.analyze(ev)}
    cap = ev.capture
    assert cap is not None and cap.cpu_work_us(1000.0) == 0.0
    sort = evidence(cap=capture(ops=[op("aten::sort", 5, 15_000.0)], account=account()))
    assert sort.capture is not None and sort.capture.cpu_work_us(1000.0) == 15_000.0


def test_slow_epoch_starts_with_restarting_workers_are_the_cause() -> None:
    """Every epoch's first step five times the others, a DataLoader whose 2
    workers are not persistent: the cause is the workers' restart, its fix
    persistent_workers, and the slow steps go under it."""
    found = engine.analyze(evidence(epochs(), loader=RESTARTING))
    top = found[0]
    assert top.rule == "data.epoch_start", [(f.rule, f.impact_pct) for f in found]
    assert top.title == "each epoch starts the DataLoader's workers anew"
    assert "6 of the 6 epoch starts" in top.evidence and "every 10 steps" in top.evidence
    assert "persistent_workers=False" in top.evidence
    assert "DataLoader(..., persistent_workers=True)" in top.fix
    assert [r.rule for r in top.related] == ["steps.slow_outliers"]
    assert "steps.slow_outliers" not in [f.rule for f in found]
    # the time: 6 steps of 4 extra step times, of the 57 ordinary steps' 81
    # step times (the first 3 are warm-up)
    assert top.impact_pct == pytest.approx(100 * 6 * 4 / 81, abs=0.1)


def test_under_the_hf_trainer_the_fix_names_its_argument() -> None:
    ev = evidence(epochs(), loader=RESTARTING, frameworks=("transformers",))
    (f,) = fired("data.epoch_start", ev)
    assert "TrainingArguments(dataloader_persistent_workers=True)" in f.fix


def test_slow_epoch_starts_with_persistent_workers_look_for_the_epochs_own_work() -> None:
    kept = dataclasses.replace(RESTARTING, persistent_workers=True)
    (f,) = fired("data.epoch_start", evidence(epochs(), loader=kept))
    assert f.title == "the first step of each epoch is slow"
    assert "evaluation or a checkpoint" in f.fix and "persistent_workers=True)" not in f.fix


def test_slow_steps_that_are_not_epoch_starts_are_not_blamed_on_the_loader() -> None:
    """The same slow steps, but the epochs start on other steps: no epoch finding,
    and the slow steps stand alone."""
    walls = [0.036 * (5 if k % 10 == 5 else 1) for k in range(60)]
    flag = int(StepFlag.LOADER_START)
    records = [
        dataclasses.replace(s, flags=flag) if s.index % 10 == 0 else s for s in steps(walls=walls)
    ]
    found = engine.analyze(evidence(records, loader=RESTARTING))
    assert "data.epoch_start" not in [f.rule for f in found]
    (slow,) = [f for f in found if f.rule == "steps.slow_outliers"]
    assert "begins an epoch" not in slow.fix  # the hook said where epochs begin


def test_periodic_slow_steps_of_an_older_hook_ask_about_the_workers_first() -> None:
    """Steps that do not flag epochs (a hook before LOADER_START), slow every
    10th step, with workers that stop at each epoch: the restart comes first."""
    (f,) = fired("steps.slow_outliers", evidence(slow_every_tenth(), loader=RESTARTING))
    assert f.fix.startswith(
        "if every 10th step begins an epoch, the DataLoader starts its 2 worker(s) anew there: "
        "DataLoader(..., persistent_workers=True) keeps them; else find what runs"
    )
    kept = dataclasses.replace(RESTARTING, persistent_workers=True)
    (f,) = fired("steps.slow_outliers", evidence(slow_every_tenth(), loader=kept))
    assert f.fix.startswith("find what runs on those steps")


def test_periodic_slow_steps_keep_their_period_past_a_stray_one() -> None:
    """Slow every 10th step, and one more slow step between two of them: still
    'every 10th step' (it read as a count before)."""
    walls = [0.036 * (5 if k % 10 == 5 or k == 32 else 1) for k in range(100)]
    (f,) = fired("steps.slow_outliers", evidence(steps(n=100, walls=walls)))
    assert "every 10th step" in f.evidence


def test_zeros_made_by_batch_norm_are_not_zero_grads() -> None:
    """A ResNet's batch norm makes zero tensors (aten::zeros, each with its
    aten::zero_) in forward and backward: those zero_ calls are not the
    gradients' (an H100 trace of a torchvision ResNet-50 with zero_grad
    (set_to_none=True) had 109 a step); the gradients' own still count."""
    norm = [op("aten::zero_", 327, 900.0), op("aten::zeros", 318, 2000.0)]
    assert fired("steps.zero_grad_zeros", evidence(cap=capture(ops=norm))) == []
    grads = [op("aten::zero_", 327 + 200, 1500.0), op("aten::zeros", 318, 2000.0)]
    (f,) = fired("steps.zero_grad_zeros", evidence(cap=capture(ops=grads)))
    assert f.evidence.startswith("42 aten::zero_ calls per step")  # 209 in 5 steps


def test_slow_epoch_starts_are_not_capped_by_the_samplers_python() -> None:
    """No capture: the live account's Python is what the sampler found in code
    outside torch (1% here), while stopping and starting workers is torch's
    DataLoader code outside the phases.  The epochs' extra time, measured on
    every step, is the cost (it was capped at the sampler's 1%)."""
    flag = int(StepFlag.LOADER_START)
    records = []
    for s in steps(phases=DEFAULT):
        if s.index % 10 == 5:
            phases = {**s.phases, "other": s.phases["other"] + 0.144}
            s = dataclasses.replace(s, phases=phases, wall=s.wall + 0.144, flags=flag)
        records.append(s)
    profile = python_profile({"other": 0.01})
    ev = evidence(records, loader=RESTARTING, python_profile=profile)
    (f,) = fired("data.epoch_start", ev)
    # 6 epoch starts of 0.144 s extra, of 57 ordinary steps of 0.036 s and the extra
    assert f.impact_pct == pytest.approx(100 * 6 * 0.144 / (57 * 0.036 + 6 * 0.144), abs=0.2)


def test_a_cpu_jobs_capture_is_not_called_an_older_hooks() -> None:
    """A capture of a job without a GPU has no GPU time to split: the note about
    an older hook's account is for captures with GPU time only (an HF Trainer
    job on the CPU drew it)."""
    from gputui.session.oneshot import older_capture_notes

    older = [n for n in older_capture_notes(capture(account=account())) if "idle time" in n]
    assert len(older) == 1  # GPU time, not split: an older hook's
    cpu = capture(account=account(gpu_busy=None))
    assert [n for n in older_capture_notes(cpu) if "idle time" in n] == []


def test_logging_behind_a_busy_gpu_is_not_what_holds_the_step() -> None:
    """Lightning's logging on the host while the GPU is busy 95% of the time is
    hidden behind the GPU's work; with the GPU's idle time unknown, nothing is
    claimed either."""
    profile = lightning_logging_profile(0.3)
    busy = evidence(gpu=gpu_samples(util_gpu_pct=95.0), python_profile=profile)
    assert fired("cpu.logging", busy) == []
    idle = evidence(gpu=gpu_samples(util_gpu_pct=40.0), python_profile=profile)
    assert [f.rule for f in fired("cpu.logging", idle)] == ["cpu.logging"]
    assert fired("cpu.logging", evidence(python_profile=profile)) == []


def test_pageable_copies_count_both_ways() -> None:
    """A copy to pageable host memory (.cpu() of a GPU tensor: "Memcpy DtoH
    (Device -> Pageable)") blocks as a copy from it does; pinned ones do not
    count."""
    copies = [
        kernel("Memcpy HtoD (Pageable -> Device)", "memcpy", 200, 16_000.0),
        kernel("Memcpy DtoH (Device -> Pageable)", "memcpy", 100, 8_000.0),
        kernel("Memcpy HtoD (Pinned -> Device)", "memcpy", 50, 4_000.0),
        kernel("Memcpy DtoH (Device -> Pinned)", "memcpy", 50, 4_000.0),
    ]
    (f,) = fired("copy.pageable", evidence(cap=capture(copies)))
    assert f.evidence.startswith("300 copies from or to pageable host memory take 24.0ms")
    only_down = capture([copies[1], *copies[2:]])
    assert CaptureView.of(only_down).pageable_copies() == (8_000.0, 100)


def test_a_conversion_is_one_call_though_two_ops_record_it() -> None:
    """aten::to runs aten::_to_copy inside it: 600 conversions over 5 steps are
    120 a step, not 240; their self times add up."""
    ops = [
        op("aten::to", 600, 1500.0),
        op("aten::_to_copy", 600, 1500.0),
        op("aten::mm", 50, 5000.0),
    ]
    (f,) = fired("copy.frequent_casts", evidence(cap=capture(ops=ops)))
    assert f.evidence.startswith("120 conversions per step (aten::to: a dtype or a device), 38%")


def test_other_copies_say_the_pageable_ones_are_left_to_their_own_finding() -> None:
    pinned = kernel("Memcpy HtoD (Pinned -> Device)", "memcpy", 100, 20_000.0)
    pageable = kernel("Memcpy DtoH (Device -> Pageable)", "memcpy", 100, 15_000.0)
    (f,) = fired("copy.transfers", evidence(cap=capture([pinned, pageable])))
    assert f.evidence.startswith(
        "copies take 20% of the GPU timeline (those not from or to pageable memory"
    )
    (g,) = fired("copy.transfers", evidence(cap=capture([pinned])))
    assert g.evidence == "copies take 20% of the GPU timeline"


@pytest.mark.parametrize(
    "name", ["Memcpy DtoD (Device -> Device)", "CopyDeviceToDevice"], ids=["cuda", "hip"]
)
def test_copies_within_the_gpus_memory_are_no_transfer(name: str) -> None:
    """HTA's trace_diff fixture: 12% of its GPU timeline in device-to-device
    copies, 9% in host-device ones, pinned.  A copy within the GPU's memory
    crosses no link: only the host-device copies count (the control: the same
    time in copies to the GPU)."""
    on_device = kernel(name, "memcpy", 4645, 12_000.0)
    pinned = kernel("Memcpy HtoD (Pinned -> Device)", "memcpy", 100, 9_000.0)
    assert not fired("copy.transfers", evidence(cap=capture([on_device, pinned])))
    to_gpu = kernel("Memcpy HtoD (Pinned -> Device)", "memcpy", 4645, 12_000.0)
    (f,) = fired("copy.transfers", evidence(cap=capture([to_gpu, pinned])))
    assert f.evidence == "copies take 21% of the GPU timeline"


def test_an_older_hooks_blocking_copies_are_told_from_its_copy_rows() -> None:
    """A capture whose account does not count the blocking copies (an older
    hook's): its copy rows do, by direction, and the stream synchronizations
    that follow them are theirs; what is left goes to the read-backs."""
    cap = capture(
        [
            kernel(GEMM_BF16, "gemm", 50, 50_000.0),
            kernel("Memcpy HtoD (Pageable -> Device)", "memcpy", 40, 4_000.0),
            kernel("Memcpy DtoH (Device -> Pageable)", "memcpy", 5, 500.0),
            kernel("Memcpy DtoH (Device -> Pinned)", "memcpy", 5, 50.0),
        ],
        [
            op("cudaStreamSynchronize", 50, 30_000.0),
            op("aten::_local_scalar_dense", 5, 500.0),
        ],
    )
    (f,) = fired("sync.host_sync", evidence(cap=cap))
    assert "from 8 copies to the GPU from pageable memory, 1 copy to pageable host memory, " in (
        f.evidence
    )
    assert "1 read-back of a GPU value (.item())" in f.evidence
    assert f.fix.startswith("pin the host side")


@pytest.mark.parametrize(
    ("truths", "told"),
    [
        (50, True),  # each read-back a loop's condition (`while t > 0:` on the GPU)
        (30, True),
        (250, False),  # many more: `if` on CPU tensors, which read nothing back
        (10, False),  # a few: the read-backs are mostly .item()
    ],
)
def test_read_backs_that_are_a_tensors_truth_are_named_so(truths: int, told: bool) -> None:
    """10 read-backs a step (5 steps); where about as many aten::is_nonzero
    calls ran, they are `if`/`while` on a tensor and the fix is the loop's
    condition as a Python number; where they are a few, or far more (on CPU
    tensors they wait for nothing), the read-backs stay .item()'s."""
    cap = capture(
        [kernel(GEMM_BF16, "gemm", 50, 50_000.0)],
        [
            op("cudaStreamSynchronize", 50, 30_000.0),
            op("aten::_local_scalar_dense", 50, 500.0),
            op("aten::is_nonzero", truths, 100.0),
        ],
    )
    (f,) = fired("sync.host_sync", evidence(cap=cap))
    named = "10 read-backs of a GPU value, 10 of them `if`/`while` on a tensor (aten::is_nonzero)"
    if truths < 50:
        named = named.replace("10 of them", f"{truths // 5} of them")
    assert (named in f.evidence) is told
    assert ("10 read-backs of a GPU value (.item())" in f.evidence) is not told
    assert f.fix.startswith("a Python `if` or `while` on a GPU tensor") is told


@pytest.mark.parametrize("training", [True, False], ids=["training", "inference"])
def test_an_inference_jobs_data_wait_is_its_loops_not_a_training_one(training: bool) -> None:
    """An HF inference pipeline (TraceLens' OWLv2 trace) waited for its batches
    in "the training loop" and "the training process"; a job with no backward
    or optimizer is told of its inference loop and its main process."""
    from gputui.protocol.trace_metrics import JobMarkers

    phases = dict(DEFAULT, data=0.02)
    if not training:
        phases = {k: v for k, v in phases.items() if k not in ("backward", "optimizer")}
    cap = capture(
        [kernel("volta_sgemm_128x64_tn", "gemm", 6, 4_000.0)],
        markers=JobMarkers(loader="main", backward=training, optimizer=training),
    )
    (f,) = fired("data.loader_wait", evidence(steps(phases=phases), cap=cap))
    loop, process = ("training", "training") if training else ("inference", "main")
    assert f.evidence.startswith(f"the {loop} loop waits")
    assert f"the DataLoader makes them in the {process} process" in f.evidence
    assert f.fix.startswith(f"the DataLoader loads every batch in the {process} process")


def test_casts_made_inside_torch_ops_are_told_to_be_autocasts() -> None:
    """A trace whose casts run inside torch ops (autocast's) is not told to cast
    once by hand; one whose casts the program makes is."""
    import dataclasses

    ops = [
        op("aten::to", 600, 1500.0),
        op("aten::_to_copy", 600, 1500.0),
        op("aten::mm", 50, 5000.0),
    ]
    ev = evidence(cap=capture(ops=ops))
    assert ev.capture is not None

    def told(parents: tuple[tuple[str, int], ...]) -> Finding:
        cap = dataclasses.replace(ev.capture, cast_parents=parents)
        (f,) = fired("copy.frequent_casts", dataclasses.replace(ev, capture=cap))
        return f

    auto = told((("ToCopyBackward0", 300), ("aten::linear", 200), ("aten::conv2d", 90), ("", 10)))
    assert auto.evidence.endswith(
        "; 48% of them inside other torch ops (aten::linear, aten::conv2d) and 50% inside "
        "autograd's backward, 2% called by the program: autocast casting each op's fp32 "
        "weights and inputs, and the gradients back"
    )
    assert auto.fix.startswith("nothing to cast by hand: these are autocast's own")
    assert "torch.compile(model) folds them" in auto.fix
    # the program's own casts, and their backward: cast once
    own = told((("", 300), ("ToCopyBackward0", 300)))
    assert own.fix.startswith("cast once")
    assert "inside other torch ops" not in own.evidence
    # as many inside ops as the program's own: not told apart
    assert told((("", 200), ("aten::linear", 300))).fix.startswith("cast once")
    # a capture (no parents): as before
    assert told(()).fix.startswith("cast once")


def test_a_trace_without_gpu_work_says_where_its_ops_ran() -> None:
    """Ops only a GPU runs: the profiler left CUDA out; ops of microseconds a
    call, as launches are: it may have.  Otherwise (ops of a millisecond and
    more a call) the job ran on the CPU, said against the GPU its header lists.
    Not for a live job, nor for one a GPU ran."""
    ops = [
        op("aten::mkldnn_convolution", 20, 40_000.0),
        op("aten::native_batch_norm", 50, 10_000.0),
    ]
    (cpu,) = fired("cpu.no_gpu", cpu_trace(0.9, ops, device="Tesla T4"))
    assert cpu.evidence == (
        "no kernel, copy or launch in the trace; torch's ops take 90% of "
        "the step (of their self time: aten::mkldnn_convolution 80%, aten::native_batch_norm "
        "20%): the job ran on the CPU, though the trace's header lists the GPU Tesla T4"
    )
    assert cpu.fix.startswith("if it should run on the GPU: move the model")
    gpu_ops = [op("aten::cudnn_convolution", 50, 40_000.0)]
    (left_out,) = fired("cpu.no_gpu", cpu_trace(0.9, gpu_ops))
    assert "aten::cudnn_convolution runs only on a GPU" in left_out.evidence
    assert "ProfilerActivity.CUDA" in left_out.fix
    # short ops (20 us a call): a GPU job's launches, profiled without CUDA?
    (short,) = fired("cpu.no_gpu", cpu_trace(0.9, [op("aten::mm", 500, 10_000.0)]))
    assert short.evidence.endswith(
        "; the largest, aten::mm, takes 20.0us a call, as an op that launches GPU work does: "
        "the profiler may have recorded the host alone"
    )
    assert "ran on the CPU" not in short.evidence
    assert short.fix.startswith("if the job runs on a GPU, profile with it")
    live = dataclasses.replace(cpu_trace(0.9, ops), from_trace=False)
    assert fired("cpu.no_gpu", live) == []
    assert fired("cpu.no_gpu", dataclasses.replace(cpu_trace(0.9, ops), cuda=True)) == []


def test_a_live_captures_casts_inside_torch_ops_are_told_to_be_autocasts() -> None:
    """The hook sends where its capture's casts ran (CaptureResult.cast_parents):
    the live finding reads them as a trace's."""
    ops = [
        op("aten::to", 600, 1500.0),
        op("aten::_to_copy", 600, 1500.0),
        op("aten::mm", 50, 5000.0),
    ]
    cap = dataclasses.replace(
        capture(ops=ops), cast_parents=(("ToCopyBackward0", 300), ("aten::linear", 300))
    )
    (f,) = fired("copy.frequent_casts", evidence(cap=cap))
    assert "50% of them inside other torch ops (aten::linear)" in f.evidence
    assert f.fix.startswith("nothing to cast by hand")
