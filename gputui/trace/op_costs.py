"""FLOPs and bytes moved by one PyTorch op, estimated from its input shapes and
dtypes (pure stdlib; the hook may import it).

torch.profiler records shapes (``record_shapes``) and, with ``with_flops``, FLOP
counts for a few ops (``aten::mm``, ``addmm``, ``bmm``, ``baddbmm``, ``conv2d``,
``add``, ``mul``) -- in its raw events only: the Chrome trace it exports carries
shapes but no FLOP count (torch 2.11 and 2.13).  So FLOPs are estimated here
from the shapes, with the same formulas torch uses where it has one (the tests
check that they agree), and for attention, ``_scaled_mm`` and a few more.

Bytes moved are never recorded; they are estimated as the *compulsory* traffic:
every tensor input read once from memory and every output written once.  Real
kernels move more (a tiled matrix product re-reads tiles that do not fit in L2)
or less (inputs that are still in L2), so this is the roofline's usual
algorithmic minimum, and the intensity it gives is an upper bound.  Per op:

- matrix products (mm, addmm, bmm, baddbmm, _scaled_mm): inputs + the M×N output;
- convolution (conv2d): input + weight (+ bias) + the N×Cout×Hout×Wout output;
- attention (scaled_dot_product_*): q, k, v (+ mask) + an output shaped like q
  (backward: its tensor inputs + gradients shaped like q, k and v);
- ``copy_``: the source read + the destination written (not read);
- ``fill_``, ``zero_`` and random fills: the tensor written once;
- reductions (sum, mean, amax, ...): the input read once; the output is small;
- everything else ("generic": elementwise, normalization, softmax, in-place ops):
  the tensor inputs + one output the size of the largest input.  Ops whose
  inputs are tensor lists (``_foreach_*``, fused optimizers) record no shapes:
  no estimate.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: bytes per element of the dtype names torch.profiler records ("Input type")
DTYPE_BYTES = {
    "float": 4,
    "double": 8,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "long int": 8,
    "int": 4,
    "short int": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1,
    "c10::Float8_e8m0fnu": 1,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
    "c10::complex<c10::Half>": 4,
}

FP32 = "fp32"
TF32 = "tf32"
BF16 = "bf16"
FP16 = "fp16"
FP8 = "fp8"
FP64 = "fp64"

#: the ceiling family of each floating dtype name
DTYPE_FAMILY = {
    "float": FP32,
    "double": FP64,
    "c10::Half": FP16,
    "c10::BFloat16": BF16,
    "c10::Float8_e4m3fn": FP8,
    "c10::Float8_e5m2": FP8,
    "c10::Float8_e4m3fnuz": FP8,
    "c10::Float8_e5m2fnuz": FP8,
}

#: torch ScalarType numbers (``out_dtype`` in concrete inputs) -> bytes per element
_SCALAR_TYPE_BYTES = {0: 1, 1: 1, 2: 2, 3: 4, 4: 8, 5: 2, 6: 4, 7: 8, 11: 1, 15: 2, 23: 1, 24: 1}

_MATMUL = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm"})
#: convolutions (input, weight, bias, stride, padding, dilation, ...): conv1d-3d,
#: and ``aten::convolution`` under them (``transposed`` is its argument 6)
_CONV = frozenset({"aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution"})
_CONV_BWD = "aten::convolution_backward"
_ELEMENTWISE_FLOP = frozenset(
    {"aten::add", "aten::mul", "aten::sub", "aten::div"}
    | {"aten::add_", "aten::mul_", "aten::sub_", "aten::div_"}
)
#: attention forward ops -> index of ``is_causal`` in their arguments
ATTENTION_FWD = {
    "aten::scaled_dot_product_attention": 5,
    "aten::_scaled_dot_product_flash_attention": 4,
    "aten::_scaled_dot_product_efficient_attention": 6,
    "aten::_scaled_dot_product_cudnn_attention": 6,
    "aten::_scaled_dot_product_flash_attention_for_cpu": 3,
}
#: attention backward ops (grad_out, q, k, v first) -> index of ``is_causal``
ATTENTION_BWD = {
    "aten::_scaled_dot_product_flash_attention_backward": 11,
    "aten::_scaled_dot_product_efficient_attention_backward": 11,
    "aten::_scaled_dot_product_cudnn_attention_backward": 14,
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": 7,
}
#: attention ops -> index of their ``attn_mask`` (``attn_bias``) argument; the
#: flash ops take none
ATTENTION_MASK = {
    "aten::scaled_dot_product_attention": 3,
    "aten::_scaled_dot_product_efficient_attention": 3,
    "aten::_scaled_dot_product_cudnn_attention": 3,
    "aten::_scaled_dot_product_attention_math": 3,
    "aten::_scaled_dot_product_efficient_attention_backward": 4,
    "aten::_scaled_dot_product_cudnn_attention_backward": 8,
}
_WRITE_ONLY = frozenset(
    {"aten::fill_", "aten::zero_", "aten::normal_", "aten::uniform_", "aten::random_"}
)
_REDUCTIONS = frozenset(
    {"aten::sum", "aten::mean", "aten::amax", "aten::amin", "aten::max", "aten::min"}
    | {"aten::norm", "aten::linalg_vector_norm", "aten::prod", "aten::all", "aten::any"}
)

#: ops with a FLOP formula.  When ops nest, the outermost of these owns the GPU
#: time of everything under it (``aten::conv2d`` over ``cudnn_convolution``).
FLOP_OPS = frozenset(
    _MATMUL | _CONV | {_CONV_BWD} | _ELEMENTWISE_FLOP | set(ATTENTION_FWD) | set(ATTENTION_BWD)
)
#: ops that count toward a model's FLOPs (MFU): the matrix products, convolutions
#: and attention; elementwise ops are left out, as in the usual MFU convention
MODEL_FLOP_OPS = FLOP_OPS - _ELEMENTWISE_FLOP
#: ops that only a forward pass runs (the module-level calls above the matrix
#: products, and the forward kernels): one of them inside autograd's backward is
#: a recomputation (activation checkpointing), not a gradient
FORWARD_OPS = frozenset(
    {"aten::linear", "aten::matmul", "aten::einsum", "aten::addmm", "aten::baddbmm"}
    | {"aten::_scaled_mm", "aten::_convolution"}
    | _CONV
    | set(ATTENTION_FWD)
)

Shape = tuple[int, ...]

MATMUL = "matmul"
CONV = "conv"
ATTENTION = "attention"
COPY = "copy"
WRITE = "write"
REDUCTION = "reduction"
GENERIC = "generic"


def is_tensor_type(type_name: str) -> bool:
    return type_name in DTYPE_BYTES


def family(type_name: str) -> str | None:
    """``"bf16"``, ``"fp32"``... for a floating dtype name, else None."""
    return DTYPE_FAMILY.get(type_name)


def numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= max(int(d), 0)
    return n


def tensor_shape(dims: Sequence[Shape | None], types: Sequence[str], i: int) -> Shape | None:
    """Input ``i`` as a tensor shape (``()`` for a 0-d tensor), None if it is not a
    tensor (a scalar, a list, an undefined optional)."""
    if i >= len(dims) or i >= len(types) or not is_tensor_type(types[i]):
        return None
    return dims[i]


def _bytes(shape: Shape | None, type_name: str) -> int:
    if shape is None:
        return 0
    return numel(shape) * DTYPE_BYTES.get(type_name, 0)


def _broadcast(shapes: Sequence[Shape]) -> Shape:
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for k, d in enumerate(s):
            pos = rank - len(s) + k
            out[pos] = max(out[pos], d)
    return tuple(out)


def _ints(text: str) -> list[int] | None:
    """``"[1, 2]"`` or ``"1"`` (a concrete input) as a list of ints."""
    found = re.findall(r"-?\d+", text or "")
    return [int(x) for x in found] if found else None


def _concrete(concrete: Sequence[str], i: int) -> str:
    return concrete[i] if i < len(concrete) else ""


def _causal(concrete: Sequence[str], index: int) -> bool:
    return _concrete(concrete, index).strip() == "True"


def _matmul_mnk(
    name: str, dims: Sequence[Shape | None], types: Sequence[str]
) -> tuple[int, int, int, int] | None:
    """(batch, M, N, K) of a matrix-product op, from its input shapes."""
    first = 1 if name in ("aten::addmm", "aten::baddbmm") else 0
    a = tensor_shape(dims, types, first)
    b = tensor_shape(dims, types, first + 1)
    if a is None or b is None:
        return None
    if name in ("aten::bmm", "aten::baddbmm"):
        if len(a) != 3 or len(b) != 3:
            return None
        return a[0], a[1], b[2], a[2]
    if len(a) != 2 or len(b) != 2:
        return None
    return 1, a[0], b[1], a[1]


def _conv_out(
    dims: Sequence[Shape | None], types: Sequence[str], concrete: Sequence[str]
) -> tuple[Shape, Shape] | None:
    """(input shape, output shape) of a convolution (input, weight, bias, stride,
    padding, dilation, ...), 1 to 3 spatial dimensions; None for a transposed one
    (``aten::convolution``'s argument 6)."""
    x = tensor_shape(dims, types, 0)
    w = tensor_shape(dims, types, 1)
    if x is None or w is None or len(x) != len(w) or not 3 <= len(x) <= 5:
        return None
    if _concrete(concrete, 6).strip() == "True" and len(concrete) > 7:
        return None  # a transposed convolution: another formula
    spatial = len(x) - 2
    stride = _ints(_concrete(concrete, 3))
    padding = _ints(_concrete(concrete, 4))
    if not stride or not padding:
        # not recorded (older torch writes no "Concrete Inputs"): a guess of
        # stride 1 and no padding overcounts a strided layer 4x, so no estimate
        return None
    dilation = _ints(_concrete(concrete, 5)) or [1]
    out_hw = []
    for k in range(spatial):
        s_, p_, d_ = (v[k] if k < len(v) else v[-1] for v in (stride, padding, dilation))
        size = (x[2 + k] + 2 * p_ - d_ * (w[2 + k] - 1) - 1) // max(s_, 1) + 1
        out_hw.append(max(size, 0))
    return x, (x[0], w[0], *out_hw)


def _conv_flops(out: Shape, w: Shape) -> float:
    # Weight is [Cout, Cin/groups, k...]: its second dimension counts grouped
    # convolutions right (torch's own count uses the input channels).
    return 2.0 * numel(out) * numel(w[1:])


def attention_dims(
    name: str, dims: Sequence[Shape | None], types: Sequence[str]
) -> tuple[Shape, Shape, Shape] | None:
    """The shapes of an attention op's query, key and value (after the backward's
    ``grad_out``), None where they are not tensors of 3 dimensions or more."""
    first = 1 if name in ATTENTION_BWD else 0
    q = tensor_shape(dims, types, first)
    k = tensor_shape(dims, types, first + 1)
    v = tensor_shape(dims, types, first + 2)
    if q is None or k is None or v is None or len(q) < 3 or len(k) < 3 or len(v) < 3:
        return None
    return q, k, v


def estimate_flops(
    name: str,
    dims: Sequence[Shape | None],
    types: Sequence[str],
    concrete: Sequence[str] = (),
) -> float | None:
    """FLOPs of one call, or None when ``name`` has no formula or the shapes do not
    fit it.  A multiply-add counts 2."""
    if name in _MATMUL:
        mnk = _matmul_mnk(name, dims, types)
        if mnk is None:
            return None
        batch, m, n, k = mnk
        return 2.0 * batch * m * n * k
    if name in _CONV:
        shapes = _conv_out(dims, types, concrete)
        w = tensor_shape(dims, types, 1)
        if shapes is None or w is None:
            return None
        return _conv_flops(shapes[1], w)
    if name == _CONV_BWD:
        return _conv_backward_flops(dims, types, concrete)
    if name in _ELEMENTWISE_FLOP:
        operands = [s for i in range(len(dims)) if (s := tensor_shape(dims, types, i)) is not None]
        if not operands:
            return None
        return float(numel(_broadcast(operands)))
    if name in ATTENTION_FWD or name in ATTENTION_BWD:
        qkv = attention_dims(name, dims, types)
        if qkv is None:
            return None
        query, key, value = qkv
        heads = numel(query[:-2])
        lq, lk, dq, dv = query[-2], key[-2], query[-1], value[-1]
        if name in ATTENTION_FWD:
            # scores = q @ k^T, out = softmax(scores) @ v
            flops = 2.0 * heads * lq * lk * (dq + dv)
            causal = _causal(concrete, ATTENTION_FWD[name])
        else:
            # recomputed scores, grad of v, grad of scores, grad of q, grad of k
            flops = 2.0 * heads * lq * lk * (3 * dq + 2 * dv)
            causal = _causal(concrete, ATTENTION_BWD[name])
        # A causal mask skips about half of the score matrix.
        return flops / 2.0 if causal else flops
    return None


def _conv_backward_flops(
    dims: Sequence[Shape | None], types: Sequence[str], concrete: Sequence[str]
) -> float | None:
    """``aten::convolution_backward(grad_output, input, weight, bias_sizes, stride,
    padding, dilation, transposed, output_padding, groups, output_mask)``: each of
    the input and weight gradients it computes costs what the forward did."""
    grad = tensor_shape(dims, types, 0)
    w = tensor_shape(dims, types, 2)
    if grad is None or w is None or len(grad) != len(w):
        return None
    mask = re.findall(r"True|False", _concrete(concrete, 10))
    grads = 2 if len(mask) < 2 else (mask[0] == "True") + (mask[1] == "True")
    return grads * _conv_flops(grad, w)


def model_flops(
    name: str,
    dims: Sequence[Shape | None],
    types: Sequence[str],
    concrete: Sequence[str] = (),
) -> tuple[float, float] | None:
    """(model FLOPs, hardware FLOPs) of one call of a matrix product, convolution
    or attention op; None for other ops or shapes that do not fit.

    They differ for the fused attention backward: the model needs four T×T
    products (gradients of v, of the scores, of q and of k: twice the forward),
    while flash and memory-efficient kernels also recompute the scores q·kᵀ from
    the saved log-sum-exp (one more product, counted in hardware FLOPs only)."""
    if name not in MODEL_FLOP_OPS:
        return None
    flops = estimate_flops(name, dims, types, concrete)
    if flops is None:
        return None
    if name in ATTENTION_BWD:
        qkv = attention_dims(name, dims, types)
        if qkv is None:
            return None
        query, key, _value = qkv
        recompute = 2.0 * numel(query[:-2]) * query[-2] * key[-2] * query[-1]
        if _causal(concrete, ATTENTION_BWD[name]):
            recompute /= 2.0
        return flops - recompute, flops
    return flops, flops


def estimate_bytes(
    name: str,
    dims: Sequence[Shape | None],
    types: Sequence[str],
    concrete: Sequence[str] = (),
) -> tuple[float | None, str]:
    """(bytes one call moves at least, the rule used); None when the inputs carry
    no shapes.  See the module docstring for the rules."""
    tensors = [
        (s, types[i]) for i in range(len(dims)) if (s := tensor_shape(dims, types, i)) is not None
    ]
    if not tensors:
        return None, GENERIC
    read = sum(_bytes(s, t) for s, t in tensors)
    if name in _MATMUL:
        mnk = _matmul_mnk(name, dims, types)
        if mnk is not None:
            batch, m, n, _k = mnk
            first = 1 if name in ("aten::addmm", "aten::baddbmm") else 0
            item = DTYPE_BYTES.get(types[first], 0)
            if name == "aten::_scaled_mm":
                # out_dtype (argument 6) is a ScalarType number; default: the input's
                out = _ints(_concrete(concrete, 6))
                item = _SCALAR_TYPE_BYTES.get(out[0], item) if out else item
            return float(read + batch * m * n * item), MATMUL
    if name in _CONV:
        shapes = _conv_out(dims, types, concrete)
        if shapes is not None:
            return float(read + numel(shapes[1]) * DTYPE_BYTES.get(types[0], 0)), CONV
    if name in ATTENTION_FWD or name in ATTENTION_BWD:
        qkv = attention_dims(name, dims, types)
        if qkv is not None:
            query, key, value = qkv
            item = DTYPE_BYTES.get(types[1 if name in ATTENTION_BWD else 0], 0)
            written = numel(query)
            if name in ATTENTION_BWD:
                written += numel(key) + numel(value)  # grad of q, k and v
            return float(read + written * item), ATTENTION
    if name == "aten::copy_" and len(tensors) >= 2:
        # destination is written, not read
        return float(_bytes(*tensors[0]) + _bytes(*tensors[1])), COPY
    if name in _WRITE_ONLY:
        return float(_bytes(*tensors[0])), WRITE
    if name in _REDUCTIONS:
        return float(_bytes(*tensors[0])), REDUCTION
    largest = max(tensors, key=lambda st: _bytes(*st))
    return float(read + _bytes(*largest)), GENERIC


def dtype_family(types: Sequence[str]) -> str | None:
    """The ceiling family of an op: that of its first floating-point tensor input
    (autocast has already cast a matmul's inputs to bf16 by the time it runs)."""
    for t in types:
        fam = DTYPE_FAMILY.get(t)
        if fam is not None:
            return fam
    return None
