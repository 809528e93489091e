"""FLOP and byte estimates from op shapes (gputui.trace.op_costs).

The FLOP formulas are checked against torch's own counts: a real CPU capture
with ``with_flops=True`` records ``flops()`` on the raw events for the ops torch
knows, and the estimate from the same event's shapes must equal it.
"""

from __future__ import annotations

import warnings

import pytest

from gputui.trace import op_costs
from gputui.trace.op_costs import estimate_bytes, estimate_flops

F32 = "float"
BF16 = "c10::BFloat16"


def _capture() -> list[object]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torch
    a, b = torch.randn(64, 32), torch.randn(32, 48)
    x = torch.randn(2, 3, 17, 15)
    w = torch.randn(8, 3, 3, 5)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True, with_flops=True
    ) as prof:
        torch.mm(a, b)
        torch.addmm(torch.randn(48), a, b)
        torch.bmm(torch.randn(4, 8, 16), torch.randn(4, 16, 2))
        torch.baddbmm(torch.randn(4, 8, 2), torch.randn(4, 8, 16), torch.randn(4, 16, 2))
        torch.nn.functional.conv2d(x, w, stride=(2, 1), padding=(1, 2), dilation=(1, 2))
        torch.nn.functional.conv2d(x, w, padding=1)
        torch.add(a, a)
        torch.mul(a, 3.0)
    return list(prof.profiler.kineto_results.events())


def test_flop_formulas_equal_torchs_own_counts() -> None:
    checked = {}
    for ev in _capture():
        torch_flops = ev.flops()
        if not torch_flops:
            continue
        name = ev.name()
        concrete = ["" if c is None else str(c) for c in ev.concrete_inputs()]
        mine = estimate_flops(name, [tuple(s) for s in ev.shapes()], ev.dtypes(), concrete)
        assert mine == torch_flops, (name, ev.shapes(), mine, torch_flops)
        checked[name] = checked.get(name, 0) + 1
    assert set(checked) == {
        "aten::mm",
        "aten::addmm",
        "aten::bmm",
        "aten::baddbmm",
        "aten::conv2d",
        "aten::add",
        "aten::mul",
    }
    assert checked["aten::conv2d"] == 2  # strided/dilated and padded


def test_matmul_flops_and_bytes() -> None:
    dims = [(8192, 1024), (1024, 4096)]
    assert estimate_flops("aten::mm", dims, [BF16, BF16]) == 2 * 8192 * 1024 * 4096
    moved, rule = estimate_bytes("aten::mm", dims, [BF16, BF16])
    assert rule == op_costs.MATMUL
    assert moved == 2 * (8192 * 1024 + 1024 * 4096 + 8192 * 4096)
    # addmm: the bias is read too, the product is what counts as FLOPs
    add_dims = [(4096,), (8192, 1024), (1024, 4096), (), ()]
    add_types = [BF16, BF16, BF16, "Scalar", "Scalar"]
    assert estimate_flops("aten::addmm", add_dims, add_types) == 2 * 8192 * 1024 * 4096
    moved_add, _ = estimate_bytes("aten::addmm", add_dims, add_types)
    assert moved_add == moved + 2 * 4096


def test_scaled_mm_output_dtype_from_its_argument() -> None:
    dims = [(256, 512), (512, 128), (), ()]
    types = ["c10::Float8_e4m3fn", "c10::Float8_e4m3fn", F32, F32]
    concrete = ["", "", "", "", "", "", "15", "True"]  # out_dtype 15 = bfloat16
    assert estimate_flops("aten::_scaled_mm", dims, types, concrete) == 2 * 256 * 512 * 128
    moved, _ = estimate_bytes("aten::_scaled_mm", dims, types, concrete)
    assert moved == 256 * 512 + 512 * 128 + 4 + 4 + 256 * 128 * 2
    assert op_costs.dtype_family(types) == "fp8"


def test_grouped_convolution_counts_channels_per_group() -> None:
    # depthwise: 32 groups of 1 channel; torch's own count would use all 32 inputs
    dims = [(1, 32, 8, 8), (32, 1, 3, 3), (), (), (), (), ()]
    types = [F32, F32, "", "ScalarList", "ScalarList", "ScalarList", "Scalar"]
    concrete = ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "32"]
    assert estimate_flops("aten::conv2d", dims, types, concrete) == 2 * 32 * 8 * 8 * 9


def test_attention_flops_forward_backward_and_causal() -> None:
    q = (16, 16, 512, 64)
    fwd = estimate_flops(
        "aten::_scaled_dot_product_cudnn_attention",
        [q, q, q, (1, 1, 512, 512)],
        [BF16] * 4,
        ["", "", "", "", "True", "0.", "False", "False", ""],
    )
    assert fwd == 4 * 16 * 16 * 512 * 512 * 64
    causal = estimate_flops(
        "aten::scaled_dot_product_attention",
        [q, q, q, None],
        [BF16, BF16, BF16, ""],
        ["", "", "", "", "0.", "True", "", "False"],
    )
    assert causal == fwd / 2
    bwd = estimate_flops(
        "aten::_scaled_dot_product_cudnn_attention_backward",
        [q, q, q, q, q],
        [BF16] * 5,
        [""] * 14 + ["False"],
    )
    assert bwd == pytest.approx(2.5 * fwd)


@pytest.mark.parametrize(
    ("name", "dims", "types", "expected", "rule"),
    [
        ("aten::copy_", [(10, 10), (10, 10), ()], [BF16, F32, "Scalar"], 200 + 400, "copy"),
        ("aten::fill_", [(10, 10), ()], [F32, "Scalar"], 400, "write"),
        (
            "aten::sum",
            [(100, 10), (), (), ()],
            [F32, "ScalarList", "Scalar", ""],
            4000,
            "reduction",
        ),
        ("aten::gelu", [(100,), ()], [BF16, ""], 400, "generic"),
        ("aten::add_", [(100,), (100,), ()], [F32, F32, "Scalar"], 1200, "generic"),
        ("aten::add_", [(), (), ()], [F32, F32, "Scalar"], 12, "generic"),  # 0-d tensors
    ],
)
def test_byte_rules(
    name: str, dims: list[tuple[int, ...]], types: list[str], expected: int, rule: str
) -> None:
    assert estimate_bytes(name, dims, types) == (expected, rule)


def test_no_shapes_no_estimates() -> None:
    # a fused optimizer over tensor lists records no shapes
    dims: list[tuple[int, ...] | None] = [None, None, ()]
    types = ["TensorList", "TensorList", "Scalar"]
    assert estimate_bytes("aten::_fused_adamw_", dims, types) == (None, "generic")
    assert estimate_flops("aten::_fused_adamw_", dims, types) is None
    assert estimate_flops("aten::mm", [(3, 4)], [F32]) is None  # a malformed record
    assert estimate_flops("aten::mm", [(3, 4), (5, 6, 7)], [F32, F32]) is None


def test_convolution_without_its_stride_and_padding_has_no_estimate() -> None:
    # older torch writes shapes but no "Concrete Inputs": a ResNet's 7x7
    # stride-2 stem read as stride 1 without padding would count 4x its FLOPs
    dims = [(5, 3, 224, 224), (64, 3, 7, 7), (), (), (), (), ()]
    types = [F32, F32, "", "ScalarList", "ScalarList", "ScalarList", "Scalar"]
    assert estimate_flops("aten::conv2d", dims, types, ()) is None
    assert estimate_flops("aten::conv2d", dims, types, [""] * 7) is None
    concrete = ["", "", "", "[2, 2]", "[3, 3]", "[1, 1]", "1"]
    assert estimate_flops("aten::conv2d", dims, types, concrete) == 2 * 5 * 64 * 112 * 112 * 147
