"""GPU kernel names: their classes and their short names (pure stdlib).

The one place that knows what a kernel name means.  The hook imports it inside
the job (to total GPU time by class), the viewers and ``gputui analyze`` to show
and classify kernels; so it imports nothing but the standard library.

Two levels of class:

- :func:`kernel_class`: gemm, attention, elementwise, reduction, communication,
  memcpy, memset, other -- the rollup a user reads ("62% GEMM, 20% elementwise").
- :func:`coarse_class`: compute, communication, memcpy, memset -- the split that
  Holistic Trace Analysis uses (comm ``nccl...``, memory ``Memcpy...``/``Memset...``,
  everything else compute), so idle/compute numbers agree with that tool.

Kernel names are demangled C++ with long template argument lists, and the
arguments often name other operations (an elementwise kernel whose functor
mentions ``sum``).  So the leading function name is tried first and the full name
only when the head says nothing.
"""

from __future__ import annotations

import re

GEMM = "gemm"
ATTENTION = "attention"
ELEMENTWISE = "elementwise"
REDUCTION = "reduction"
COMMUNICATION = "communication"
MEMCPY = "memcpy"
MEMSET = "memset"
OTHER = "other"

KERNEL_CLASSES = (GEMM, ATTENTION, ELEMENTWISE, REDUCTION, COMMUNICATION, MEMCPY, MEMSET, OTHER)

#: how each class is named in tables and rollups, in full and in a few letters
CLASS_LABELS = {
    GEMM: "GEMM",
    ATTENTION: "attention",
    ELEMENTWISE: "elementwise",
    REDUCTION: "reduction",
    COMMUNICATION: "communication",
    MEMCPY: "memcpy",
    MEMSET: "memset",
    OTHER: "other",
}
CLASS_SHORT = {
    GEMM: "GEMM",
    ATTENTION: "attn",
    ELEMENTWISE: "elem",
    REDUCTION: "reduce",
    COMMUNICATION: "comm",
    MEMCPY: "memcpy",
    MEMSET: "memset",
    OTHER: "other",
}

COMPUTE = "compute"
COARSE_CLASSES = (COMPUTE, COMMUNICATION, MEMCPY, MEMSET)

# Order matters: attention kernels are often built from CUTLASS/GEMM pieces, so
# attention is tested before gemm; "reduce" appears in NCCL names, so
# communication is tested first (in kernel_class, before these rules).  cuDNN's
# SDPA backward runs two helpers beside its ``cudnn_generated_fort_native_sdpa_…``
# kernels (``cudnn::fusion::compute_dot_do_o_specialized``, the dO·O row sums,
# and ``cudnn::fusion::convert_dq_to_16bits``), and SDPA with dropout on cuDNN
# unpacks its random seed with ``at::cuda::philox::unpack_cudnn``: attention too
# (the second would read as a convolution by its ``conv``).  cuDNN's older
# convolution kernels are named for their precision (``volta_scudnn_128x64_relu_
# interior_nn_v1``, ``hcudnn``) or their algorithm (Winograd): a GEMM, not the
# elementwise op their fused ReLU names.
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        ATTENTION,
        re.compile(
            r"flash|fmha|attention|attn|sdpa|mha_|softmax_warp_?attn|xformers|"
            r"cudnn::fusion::(compute_dot_do_o|convert_dq)|philox::unpack_cudnn",
            re.IGNORECASE,
        ),
    ),
    (
        GEMM,
        re.compile(
            r"gemm|gemv|matmul|addmm|splitkreduce|cutlass|cublas|nvjet|xmma|wgmma|hmma|s1688|s16816|"
            r"tensorop|conv|implicit_?gemm|dgrad|wgrad|fprop|triton_tem|bmm|_mm_|cijk_|"
            r"[sh]cudnn|winograd",
            re.IGNORECASE,
        ),
    ),
    (
        REDUCTION,
        re.compile(
            r"reduce|reduction|softmax|norm|_sum|sum_|mean|argmax|argmin|topk|sort|scan|"
            r"cub::|cross_?entropy|nll_loss|triton_red|triton_per|welford|cumsum|max_pool|"
            r"avg_pool|embedding_backward",
            re.IGNORECASE,
        ),
    ),
    (
        ELEMENTWISE,
        re.compile(
            r"elementwise|element_wise|pointwise|triton_poi|vectorized|unrolled|"
            r"multi_tensor_apply|fill|copy|cat_?array|catarray|index|gather|scatter|"
            r"where|clamp|dropout|relu|gelu|silu|sigmoid|tanh|add|mul|div|cast|"
            r"to_copy|embedding|transpose|permute",
            re.IGNORECASE,
        ),
    ),
)


#: Inductor's generated Triton kernels name their kind first -- pointwise,
#: reduction, persistent reduction, foreach, template -- and then the ops they
#: fused (``triton_poi_fused_bmm_clone_transpose_view_17`` is the pointwise
#: copy around a matrix product, not the product): the kind decides
_INDUCTOR = re.compile(r"triton_(poi|red|per|for|tem)_", re.IGNORECASE)
_INDUCTOR_KINDS = {"poi": ELEMENTWISE, "for": ELEMENTWISE, "red": REDUCTION, "per": REDUCTION}


def _head(name: str) -> str:
    """The function part of a demangled kernel name: no ``void ``, no template
    arguments, no parameter list."""
    text = name.strip()
    if text.startswith("void "):
        text = text[5:]
    cut = len(text)
    for ch in "<(":
        pos = text.find(ch)
        if pos != -1 and pos < cut:
            cut = pos
    return text[:cut]


#: DeepEP's expert-parallel dispatch and combine (its internode, intranode and
#: low-latency kernels; its layout kernels compute): an all-to-all exchange
_EXPERT_EXCHANGE = re.compile(
    r"(?:deep_ep|dpsk::ep)::(?:internode|intranode|internode_ll)::", re.IGNORECASE
)
_NVSHMEM = re.compile(r"^nvshmem", re.IGNORECASE)


def expert_exchange(name: str) -> bool:
    """Whether a kernel is DeepEP's expert-parallel dispatch or combine (or the
    notifications before them): communication beside NCCL, all-to-all."""
    return bool(_EXPERT_EXCHANGE.search(_head(name)))


def kernel_class(name: str) -> str:
    """One of :data:`KERNEL_CLASSES` for a GPU activity's name."""
    low = name.lstrip()
    if low[:4].lower() == "nccl" or "nccl" in _head(name).lower():
        return COMMUNICATION
    if expert_exchange(name) or _NVSHMEM.search(_head(name)):
        return COMMUNICATION
    if low.startswith("Memcpy") or low.lower().startswith("memcpy"):
        return MEMCPY
    if low.startswith("Memset") or low.lower().startswith("memset"):
        return MEMSET
    head = _head(name)
    inductor = _INDUCTOR.match(head.lstrip())
    if inductor is not None:
        kind = _INDUCTOR_KINDS.get(inductor.group(1).lower())
        if kind is not None:
            return kind
        # a template: a matrix product or convolution, or flex attention's
        return ATTENTION if _RULES[0][1].search(head) else GEMM
    for cls, pattern in _RULES:
        if pattern.search(head):
            return cls
    for cls, pattern in _RULES:
        if pattern.search(name):
            return cls
    return OTHER


def coarse_of(kclass: str) -> str:
    """Coarse class of a fine class (compute for everything but comm/memcpy/memset)."""
    if kclass in (COMMUNICATION, MEMCPY, MEMSET):
        return kclass
    return COMPUTE


def coarse_class(name: str) -> str:
    """One of :data:`COARSE_CLASSES` for a GPU activity's name (HTA's split)."""
    return coarse_of(kernel_class(name))


# -- short names ------------------------------------------------------------------------
# Short, recognizable names for demangled CUDA kernel names.
#
# ``void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<
# c10::BFloat16>, std::array<char*, 3ul> >(int, ...)`` becomes
# ``vectorized_elementwise_kernel<CUDAFunctor_add>``: the function's own name (the
# stem) plus the first one or two names in its template arguments that say what it
# computes (the functor), with namespaces, numbers, types and plumbing left out.
# The profiler cuts very long names, so unbalanced brackets are expected.


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: identifiers inside template arguments that never say what a kernel computes
_PLUMBING = frozenset(
    {
        "at",
        "native",
        "std",
        "c10",
        "cuda",
        "detail",
        "memory",
        "array",
        "char",
        "int",
        "unsigned",
        "long",
        "short",
        "float",
        "double",
        "bool",
        "half",
        "Half",
        "BFloat16",
        "bfloat16",
        "const",
        "operator",
        "lambda",
        "true",
        "false",
        "void",
        "TensorIteratorBase",
        "TensorIterator",
        "TensorListMetadata",
        "TensorListScalarListMetadata",
        "TrivialOffsetCalculator",
        "OffsetCalculator",
        "LoadWithCast",
        "StoreWithCast",
        "LoadWithoutCast",
        "StoreWithoutCast",
        "gpu_kernel_impl",
        "gpu_kernel_impl_nocast",
        "ReduceOp",
        "func_wrapper_t",
        "anonymous",
        "namespace",
        "ul",
        "u",
    }
)
_PREFIXES = (("cudnn_generated_fort_native_", "cudnn:"),)
MAX_DETAILS = 2


def _drop_parens(text: str) -> str:
    """Remove every parenthesised group (argument lists), tolerating a cut-off end."""
    out: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def short_kernel_name(name: str) -> str:
    text = name.strip()
    if text.startswith(("Memcpy", "Memset")):
        # "Memcpy HtoD (Pageable -> Device)": the part in brackets is the point
        return text
    if text.startswith("void "):
        text = text[5:]
    text = text.replace("(anonymous namespace)::", "")
    for prefix, short in _PREFIXES:
        if text.startswith(prefix):
            return short + text[len(prefix) :]
    cut = len(text)
    for mark in ("<", "("):
        pos = text.find(mark)
        if pos != -1:
            cut = min(cut, pos)
    head = text[:cut].strip()
    stem = head.rsplit("::", 1)[-1] or head or name
    if cut >= len(text) or text[cut] != "<":
        return stem
    # The template arguments: up to the matching '>' (or the end, when cut off).
    depth = 0
    end = len(text)
    for i in range(cut, len(text)):
        if text[i] == "<":
            depth += 1
        elif text[i] == ">":
            depth -= 1
            if depth == 0:
                end = i
                break
    args = _drop_parens(text[cut + 1 : end])
    details: list[str] = []
    for ident in _IDENT.findall(args):
        if ident in _PLUMBING or ident in details or len(ident) < 3:
            continue
        details.append(ident)
        if len(details) >= MAX_DETAILS:
            break
    if not details:
        return stem
    return f"{stem}<{', '.join(details)}>"


#: collective kinds by the words of NCCL kernel names and host collective ops
_COLLECTIVE_KINDS = (
    ("all_to_all", re.compile(r"alltoall|all_to_all|AllToAll", re.IGNORECASE)),
    ("reduce_scatter", re.compile(r"reducescatter|reduce_scatter", re.IGNORECASE)),
    ("all_gather", re.compile(r"allgather|all_gather", re.IGNORECASE)),
    ("all_reduce", re.compile(r"allreduce|all_reduce", re.IGNORECASE)),
    ("send_recv", re.compile(r"sendrecv|send_recv|\bsend\b|\brecv\b", re.IGNORECASE)),
    ("broadcast", re.compile(r"broadcast", re.IGNORECASE)),
)


def collective_kind(name: str) -> str | None:
    """The collective an NCCL kernel's or a host collective op's name reads as
    ("all_reduce", "all_to_all", ...: the first of :data:`_COLLECTIVE_KINDS`
    that matches), None where none does."""
    for kind, pattern in _COLLECTIVE_KINDS:
        if pattern.search(name):
            return kind
    return None
