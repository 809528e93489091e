"""Kernel efficiency: where the GPU is busy, whether its kernels use it well --
FP32 matrix products off the tensor cores, memory-bound elementwise chains, one
kernel that dominates.  Each claims only the GPU's busy share of the step."""

from __future__ import annotations

from collections.abc import Iterable

from gputui import fmt
from gputui.analysis import thresholds
from gputui.analysis.evidence import MIN_GPU_SAMPLES, JobEvidence, is_fp32_conv, is_fp32_gemm
from gputui.analysis.finding import Finding
from gputui.analysis.frameworks import FP16, LOWER_PRECISION, TF32, spell
from gputui.analysis.ledger import GPU_BUSY
from gputui.analysis.registry import finding, rule
from gputui.analysis.rules.capture import capture_of
from gputui.analysis.severity import INFO
from gputui.trace import kernels
from gputui.trace.markers import kernel_backend

#: FP32 (CUDA-core) GEMMs' share of kernel time that is worth TF32 or bf16
FP32_GEMM_SHARE = thresholds.value("precision.fp32_gemm_share")
#: elementwise + reduction share of kernel time of a memory-bound job (a healthy bf16
#: transformer's is 57-62%), with the GPU busy at least BUSY_SHARE of the step
ELEMENTWISE_SHARE = thresholds.value("kernels.elementwise_share")
BUSY_SHARE = thresholds.value("kernels.busy_share")
#: the top kernel's share of kernel time that deserves a deep dive
TOP_KERNEL_SHARE = thresholds.value("kernels.top_kernel_share")


def _major(ev: JobEvidence) -> int | None:
    """The major version of the GPU's compute capability (None: not known)."""
    cc = ev.compute_capability
    try:
        return int(float(cc)) if cc else None
    except ValueError:
        return None


def fp16_tensor_cores_only(ev: JobEvidence) -> bool:
    """Volta and Turing (compute capability 7.x): FP16 tensor cores, no TF32 or bf16."""
    return _major(ev) == 7


def tensor_core_precisions(ev: JobEvidence) -> str:
    """How fp32 matrix products get onto this GPU's tensor cores, in the job's
    framework's words: fp16 autocast on 7.x, else TF32 or bf16."""
    framework = ev.context.framework
    if fp16_tensor_cores_only(ev):
        return spell(FP16, framework)
    return f"{spell(TF32, framework)} or {spell(LOWER_PRECISION, framework)}"


def tensor_core_fp32(ev: JobEvidence) -> bool:
    """TF32 and bf16 tensor cores exist (compute capability 8.0 or newer, or
    not known: a live job's GPU is told by the GPM tensor activity instead)."""
    major = _major(ev)
    return major is None or major >= 8


@rule(
    "precision.fp32_matmul",
    "precision",
    "TorchTidy: FP32 matmul on Ampere or newer without TF32; TensorBoard profiler: "
    "tensor-core-eligible ops without tensor cores",
    ("capture",),
    trigger=(
        "capture: FP32 GEMMs on the CUDA cores >= {precision.fp32_gemm_share} of kernel time, "
        "on compute capability 8.0 or newer; on 7.x (FP16 tensor cores only), FP32 GEMMs "
        "and cuDNN convolutions; cost: 75% of their busy time"
        " (silent when SDPA's math backend made them: attention.sdpa_math speaks)"
    ),
    symptom_of=("attention.sdpa_math",),
    bucket=GPU_BUSY,
)
def fp32_matmul(ev: JobEvidence) -> Iterable[Finding]:
    cap = capture_of(ev)
    if cap is None:
        return []
    fp16_only = fp16_tensor_cores_only(ev)
    share = cap.fp32_gemm_share(convolutions=fp16_only)
    if share < FP32_GEMM_SHARE or not (fp16_only or tensor_core_fp32(ev)):
        return []
    top = max(
        (k for k in cap.kernels if is_fp32_gemm(k.name) or (fp16_only and is_fp32_conv(k.name))),
        key=lambda k: k.total_us,
    )
    busy = cap.busy_share or 0.0
    what = "FP32 GEMMs and convolutions" if fp16_only else "FP32 GEMMs"
    evidence = f"{what} on the CUDA cores take {share * 100:.0f}% of kernel time"
    if ev.gpu is not None and ev.gpu.tensor_pct is not None:
        evidence += f"; tensor cores {ev.gpu.tensor_pct:.0f}% active"
    evidence += f" (top kernel: {kernels.short_kernel_name(top.name)})"
    fix = f"let them use the tensor cores: {tensor_core_precisions(ev)}"
    if fp16_only:
        evidence += (
            f"; this GPU (compute capability {ev.compute_capability}) has FP16 tensor "
            "cores, and no TF32 or bf16"
        )
        confirm = "kernel names change (h884, s884, hmma, fp16); GPM tensor activity rises"
    else:
        confirm = "GEMM kernel names change (tf32, bf16, nvjet); GPM tensor activity rises"
    # TF32 or bf16 tensor-core GEMMs run several times faster than FP32 on the
    # CUDA cores (H100: ~7x dense), as FP16 ones do on a V100 or T4 (~8x, the
    # datasheets); three quarters of that time is a safe claim.
    return [
        finding(
            ev,
            "precision.fp32_matmul",
            "matrix products and convolutions run in full FP32"
            if fp16_only
            else "matrix products run in full FP32",
            evidence,
            fix,
            confirm,
            share=share * busy * 0.75,
        )
    ]


@rule(
    "kernels.elementwise_bound",
    "kernels",
    "bottleneck tables: high memory use but low compute (memory-bound kernels); roofline: "
    "elementwise and reduction ops sit far under the balance point",
    ("capture",),
    trigger=(
        "capture: elementwise + reduction kernels >= {kernels.elementwise_share} of kernel "
        "time with the GPU busy >= {kernels.busy_share} of the step (and no GPM DRAM "
        "numbers: then gpu.memory_bound speaks; no roofline: then roofline.memory_bound "
        "speaks)"
    ),
    bucket=GPU_BUSY,
)
def elementwise_bound(ev: JobEvidence) -> Iterable[Finding]:
    cap = capture_of(ev)
    if cap is None:
        return []
    gpu = ev.gpu
    if gpu is not None and gpu.dram_pct is not None and gpu.samples >= MIN_GPU_SAMPLES:
        return []  # gpu.memory_bound speaks, with the DRAM numbers
    if ev.roofline is not None:
        return []  # the roofline rules speak, with each op's bytes and FLOPs
    share = cap.class_share(kernels.ELEMENTWISE, kernels.REDUCTION)
    busy = cap.busy_share or 0.0
    if share < ELEMENTWISE_SHARE or busy < BUSY_SHARE:
        return []
    return [
        finding(
            ev,
            "kernels.elementwise_bound",
            "elementwise and reduction kernels dominate",
            f"elementwise and reduction kernels take {share * 100:.0f}% of kernel time; "
            "each reads and writes its tensors from memory",
            "fuse them: torch.compile(model) (Inductor fuses pointwise chains), fused "
            "LayerNorm/softmax/attention kernels (F.scaled_dot_product_attention), fused "
            "optimizers",
            "the capture's elementwise share and the step time fall",
            share=0.5 * share * busy,
        )
    ]


#: cuDNN's kernels that convert a tensor between NCHW and NHWC (lower-cased)
_LAYOUT_KERNELS = ("nchwtonhwc", "nhwctonchw")
LAYOUT_SHARE = thresholds.value("kernels.layout_share")


def is_layout_conversion(name: str) -> bool:
    """A cuDNN kernel that converts a tensor between NCHW and NHWC."""
    low = name.lower()
    return any(k in low for k in _LAYOUT_KERNELS)


@rule(
    "kernels.layout_conversion",
    "kernels",
    "PyTorch's channels_last guide: tensor-core convolutions take NHWC; cuDNN converts NCHW "
    "tensors around each (nchwToNhwcKernel, nhwcToNchwKernel)",
    ("capture",),
    trigger=(
        "capture: cuDNN's NCHW/NHWC conversion kernels >= {kernels.layout_share} of kernel "
        "time; cost: their share of the GPU's busy time (what channels_last saves beyond, in "
        "the batch norms and pointwise ops it speeds up, is not counted)"
    ),
    bucket=GPU_BUSY,
)
def layout_conversion(ev: JobEvidence) -> Iterable[Finding]:
    cap = capture_of(ev)
    if cap is None or not cap.kernel_total_us:
        return []
    share = cap.name_share(is_layout_conversion)
    if share < LAYOUT_SHARE:
        return []
    calls = sum(k.calls for k in cap.kernels if is_layout_conversion(k.name))
    busy = cap.busy_share or 0.0
    return [
        finding(
            ev,
            "kernels.layout_conversion",
            "convolutions convert their tensors between NCHW and NHWC",
            f"cuDNN's layout conversion kernels (nchwToNhwc, nhwcToNchw) take {share * 100:.0f}% "
            f"of kernel time in {calls:,} calls: the convolutions run on the tensor cores in "
            "NHWC, and the model's tensors are NCHW (PyTorch's default)",
            "keep the model and its inputs in channels_last: model = "
            "model.to(memory_format=torch.channels_last), and each batch "
            "x.to(memory_format=torch.channels_last) before the forward; the batch norms and "
            "pointwise ops then run in NHWC too; if it trains in fp32, more again with "
            f"{spell(LOWER_PRECISION, ev.context.framework)}",
            "the conversion kernels leave the capture; the convolutions and batch norms run "
            "NHWC kernels",
            share=share * busy,
        )
    ]


@rule(
    "kernels.top_kernel",
    "kernels",
    "workflow: focus on the top kernels by GPU time; Nsight Compute for a deep dive",
    ("capture",),
    trigger=(
        "capture: one compute kernel >= {kernels.top_kernel_share} of kernel time (info: the "
        "deep dive and the ncu command)"
    ),
    bucket=GPU_BUSY,
    symptom=True,
)
def top_kernel(ev: JobEvidence) -> Iterable[Finding]:
    cap = capture_of(ev)
    if cap is None or not cap.kernels:
        return []
    top = cap.kernels[0]
    if top.share < TOP_KERNEL_SHARE or top.kernel_class in (kernels.MEMCPY, kernels.MEMSET):
        return []
    short = kernels.short_kernel_name(top.name)
    # a name can be hundreds of characters (Tensile's GEMMs spell out every
    # tuning parameter): shown cut in the middle, and its head filters the profile
    stem = short.split("<", 1)[0][:STEM_CHARS]
    if len(short) > SHOWN_CHARS:  # its head and its tail, which tell variants apart
        short = short[: SHOWN_CHARS - 60] + "..." + short[-57:]
    fix, confirm = _kernel_advice(top.kernel_class, top.name, stem, _major(ev), ev.rocm)
    return [
        finding(
            ev,
            "kernels.top_kernel",
            "one kernel dominates the GPU time",
            f"{short} ({top.kernel_class}) takes {top.share * 100:.0f}% of kernel time, "
            f"{top.calls} launches of {fmt.us(top.mean_us)}",
            fix,
            confirm,
            severity=INFO,
        )
    ]


#: the most of a kernel's name the finding shows, and passes to the profiler (a
#: head of the name still selects it): room for any of NVIDIA's library names
SHOWN_CHARS = STEM_CHARS = 160

#: how a kernel's deep dive starts (its class's advice ends with it)
_NCU = (
    "ncu --set full --kernel-name regex:{stem} --launch-count 5 --target-processes all "
    "python train.py: its SM and memory throughput, occupancy and stall reasons"
)
#: the same on an AMD GPU (ROCm Compute Profiler: Nsight Compute does not run there)
_ROCPROF = (
    "rocprof-compute profile -n top_kernel -k {stem} -- python train.py, then "
    "rocprof-compute analyze on the workload it writes: its compute and memory "
    "throughput, occupancy and wavefront stalls"
)


def _kernel_advice(
    kernel_class: str, name: str, stem: str, major: int | None = None, rocm: bool = False
) -> tuple[str, str]:
    """(fix, confirm) for a dominant kernel, by its class: a GEMM's shapes and
    the tensor cores the GPU has (``major``: its compute capability's, None
    where not known), an attention kernel's backend, a communication kernel's
    collective (no tile advice, no ncu: its time is the network's and the
    peers'), a generated or hand-written kernel's own profile."""
    ncu = (_ROCPROF if rocm else _NCU).format(stem=stem)
    if stem.startswith("_Z") and not rocm:
        # a mangled name (the trace did not demangle it): ncu matches
        # --kernel-name against the demangled function name unless told
        ncu = ncu.replace(" --kernel-name ", " --kernel-name-base mangled --kernel-name ", 1)
    if kernel_class == kernels.COMMUNICATION:
        return (
            "a communication kernel: its time is the transfer and the wait for the other "
            "ranks, not this GPU's arithmetic; see the communication findings and the rank "
            "view (gputui attach LAUNCHER_PID) for the rank the others wait for",
            "the communication kernel's share falls once the slowest rank or the transfer is fixed",
        )
    if kernel_class == kernels.ATTENTION:
        backend = kernel_backend(name)
        if backend in ("flash", "cudnn"):
            label = "flash" if backend == "flash" else "cuDNN"
            return (
                f"an attention kernel of SDPA's {label} backend, its fastest: its time "
                "grows with batch x heads x sequence length squared x head dim, so less "
                "work (no padding tokens, packed sequences) is what shortens it",
                ncu,
            )
        return (
            "an attention kernel: see the attention findings for the "
            "scaled_dot_product_attention backend it is and why flash did not run (flash "
            "takes fp16/bf16 inputs, no attn_mask, head dim <= 256)",
            ncu,
        )
    if kernel_class == kernels.GEMM:
        if rocm:
            return (
                "make sure it is the GEMM you expect at this size: dimensions that are "
                "multiples of 16 keep the matrix cores' fast paths, and bf16/fp16 inputs "
                "use them at all",
                ncu,
            )
        if major is not None and major < 7:
            return (
                f"make sure it is the GEMM you expect at this size: this GPU (sm {major}.x) "
                "has no tensor cores, so its GEMMs run on the CUDA cores whatever the dtype",
                ncu,
            )
        if major is not None and major < 8:
            return (
                "make sure it is the GEMM you expect at this size: dimensions that are "
                "multiples of 8 keep the tensor cores' fast paths, and fp16 inputs use them "
                f"at all (sm {major}.x has fp16 tensor cores, no TF32 or bf16 ones): "
                "torch.autocast('cuda', dtype=torch.float16)",
                ncu,
            )
        return (
            "make sure it is the GEMM you expect at this size: dimensions that are multiples "
            "of 8 (16 for fp8) keep the tensor cores' fast paths, and bf16/fp16 or TF32 "
            "inputs use them at all",
            ncu,
        )
    if name.startswith("triton_"):
        return (
            "a kernel torch.compile generated: TORCH_LOGS=output_code shows its source; "
            "a different fusion (torch.compile(mode='max-autotune')) may do better",
            ncu,
        )
    return ("profile this kernel on its own to see what limits it", ncu)
