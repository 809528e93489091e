from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from gputui.hook._reduce import reduce_events
from gputui.trace.kernels import coarse_class, kernel_class

GELU = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl("
    "at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}>(int, float)"
)
SUM = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::"
    "func_wrapper_t<float, at::native::sum_functor<float, float, float>>>>(float)"
)


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        (GELU, "elementwise"),
        (SUM, "reduction"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas", "gemm"),
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "gemm"),
        ("ampere_sgemm_128x64_tn", "gemm"),
        (
            "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel"
            "<float, cutlass::arch::Sm80>::Params)",
            "attention",
        ),
        (
            "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, cutlass::bfloat16_t>>"
            "(pytorch_flash::Flash_fwd_params)",
            "attention",
        ),
        (
            "fmha_cutlassB_bf16_aligned_64x64_k64_dropout_sm80(PyTorchMemEffAttention::"
            "AttentionBackwardKernel<cutlass::arch::Sm80, cutlass::bfloat16_t, true>::Params)",
            "attention",
        ),
        (
            "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64",
            "attention",
        ),
        (
            "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64",
            "attention",
        ),
        (
            "void cudnn::fusion::compute_dot_do_o_specialized<true, 64>(void const*, void const*, "
            "void*, void*, unsigned int)",
            "attention",
        ),
        (
            "void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*, unsigned int)",
            "attention",
        ),
        ("at::cuda::philox::unpack_cudnn(at::PhiloxCudaState, long*, long*)", "attention"),
        (
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "communication",
        ),
        # DeepEP's expert-parallel exchange (the DeepSeek-V3 trace's names) and
        # NVSHMEM's: communication beside NCCL; DeepEP's layout kernel computes
        (
            "void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*)",
            "communication",
        ),
        ("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*)", "communication"),
        ("void deep_ep::internode_ll::dispatch<false, 3, 7168>(void*)", "communication"),
        ("void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*)", "other"),
        ("nvshmemi_transfer_rma_nbi_kernel<1>(void*)", "communication"),
        ("Memcpy HtoD (Pageable -> Device)", "memcpy"),
        ("Memset (Device)", "memset"),
        (
            "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10>(float*)",
            "reduction",
        ),
        ("triton_poi_fused_add_mul_0", "elementwise"),
        ("triton_red_fused_sum_1", "reduction"),
        # Inductor's kind comes first; the fused ops' names after it do not
        # decide (names from a public torch.compile inference trace on an H200)
        ("triton_poi_fused_bmm_clone_transpose_view_17", "elementwise"),
        ("triton_red_fused_add_addmm_native_layer_norm_view_8", "reduction"),
        ("triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_4", "reduction"),
        (
            "triton_poi_fused__scaled_dot_product_efficient_attention_add_clone_2",
            "elementwise",
        ),
        ("triton_for_fused_0", "elementwise"),
        ("triton_tem_fused_addmm_gelu_3", "gemm"),
        ("triton_tem_fused_flex_attention_0", "attention"),
        # ROCm: hipBLASLt's and Tensile's GEMMs, composable kernel's attention
        ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x144x64_MI16x16x1_SN", "gemm"),
        ("Cijk_Ailk_Bljk_SB_MT128x32x32_MI16x16x4x1_SN_1LDSB1_APM1_ABV", "gemm"),
        ("_ZN7ck_tile6kentryINS_8gfx950_tELi1ENS_13FmhaFwdKernelINS_23", "attention"),
        ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>(int)", "gemm"),
        # cuDNN's older convolutions, named for their precision or algorithm, with
        # a fused ReLU (a T4's ResNet traces): GEMMs, not elementwise ops
        ("_5x_cudnn_volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", "gemm"),
        ("volta_scudnn_128x64_relu_interior_nn_v1", "gemm"),
        ("turing_hcudnn_128x128_relu_small_nn_v1", "gemm"),
        ("some_custom_kernel", "other"),
    ],
)
def test_kernel_class(name: str, cls: str) -> None:
    assert kernel_class(name) == cls


def test_coarse() -> None:
    assert coarse_class(GELU) == "compute"
    assert coarse_class("ncclKernel_AllGather_RING") == "communication"
    assert coarse_class("Memcpy DtoD (Device -> Device)") == "memcpy"


def ev(
    name: str,
    device: str,
    start: int,
    dur: int,
    activity: str = "",
    tid: int = 1,
    annotation: bool = False,
) -> Any:
    return SimpleNamespace(
        name=lambda: name,
        device_type=lambda: SimpleNamespace(name=device),
        start_ns=lambda: start,
        duration_ns=lambda: dur,
        activity_type=lambda: activity,
        is_user_annotation=lambda: annotation,
        is_python_function=lambda: False,
        start_thread_id=lambda: tid,
        device_index=lambda: 0,
    )


def test_reduce_events_tables_and_gpu_split() -> None:
    events = [
        # CPU: a step range (annotation) holding an op with a child
        ev("ProfilerStep#3", "CPU", 0, 1000_000, "user_annotation", annotation=True),
        ev("aten::linear", "CPU", 100_000, 400_000, "cpu_op"),
        ev("aten::addmm", "CPU", 150_000, 300_000, "cpu_op"),
        ev("cudaLaunchKernel", "CPU", 200_000, 10_000, "cuda_runtime"),
        # GPU: annotation range spanning everything must not count
        ev("ProfilerStep#3", "CUDA", 0, 2000_000, "gpu_user_annotation"),
        ev("ampere_sgemm_128x64_tn", "CUDA", 1000_000, 100_000, "kernel"),
        ev("ampere_sgemm_128x64_tn", "CUDA", 1200_000, 300_000, "kernel"),
        ev("ncclDevKernel_AllReduce", "CUDA", 1400_000, 200_000, "kernel"),
        ev("Memset (Device)", "CUDA", 1700_000, 100_000, "gpu_memset"),
    ]
    out = reduce_events(events)
    assert out["events"] == 9
    kernels = {k.name: k for k in out["kernels"]}
    assert "ProfilerStep#3" not in kernels
    gemm = kernels["ampere_sgemm_128x64_tn"]
    assert (gemm.calls, gemm.total_us, gemm.min_us, gemm.max_us) == (2, 400, 100, 300)
    assert gemm.share == pytest.approx(400 / 700)
    assert out["by_class"] == {"gemm": 400.0, "communication": 200.0, "memset": 100.0}
    g = out["gpu_time"]
    assert g.span_us == 800 and g.busy_us == 600 and g.idle_us == 200
    assert g.compute_us == 400 and g.communication_us == 200
    assert g.comm_compute_overlap == pytest.approx(0.5)  # 1.4-1.5 ms of 0.2 ms comm
    ops = {o.name: o for o in out["cpu_ops"]}
    assert "ProfilerStep#3" not in ops
    assert ops["aten::linear"].self_us == 100 and ops["aten::linear"].total_us == 400
    assert ops["aten::addmm"].self_us == 290
    assert ops["cudaLaunchKernel"].self_us == 10


def test_a_captures_casts_are_told_by_the_op_they_run_in() -> None:
    """A live capture says where its conversions ran, as a trace's summary does:
    autocast's inside the linear op, the program's own under the step mark; a
    capture whose top ops hold no conversion says nothing."""
    events = [
        ev("ProfilerStep#3", "CPU", 0, 1000_000, "user_annotation", annotation=True),
        ev("aten::linear", "CPU", 100_000, 400_000, "cpu_op"),
        ev("aten::to", "CPU", 110_000, 20_000, "cpu_op"),
        ev("aten::to", "CPU", 140_000, 20_000, "cpu_op"),
        ev("aten::to", "CPU", 600_000, 20_000, "cpu_op"),
    ]
    out = reduce_events(events)
    assert out["cast_parents"] == (("aten::linear", 2), ("", 1))
    assert "cast_parents" not in reduce_events(events[:2])
