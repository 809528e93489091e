"""Classify GPU kernel names (pure stdlib; used in the job and by the UI).

Two levels:

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

COMPUTE = "compute"
COARSE_CLASSES = (COMPUTE, COMMUNICATION, MEMCPY, MEMSET)

# Order matters: attention kernels are often built from CUTLASS/GEMM pieces, so
# attention is tested before gemm; "reduce" appears in NCCL names, so
# communication is tested first (in kernel_class, before these rules).
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        ATTENTION,
        re.compile(
            r"flash|fmha|attention|attn|sdpa|mha_|softmax_warp_?attn|xformers", re.IGNORECASE
        ),
    ),
    (
        GEMM,
        re.compile(
            r"gemm|gemv|matmul|addmm|splitkreduce|cutlass|cublas|nvjet|xmma|wgmma|hmma|s1688|s16816|"
            r"tensorop|conv|implicit_?gemm|dgrad|wgrad|fprop|triton_tem|bmm|_mm_",
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


def kernel_class(name: str) -> str:
    """One of :data:`KERNEL_CLASSES` for a GPU activity's name."""
    low = name.lstrip()
    if low[:4].lower() == "nccl" or "nccl" in _head(name).lower():
        return COMMUNICATION
    if low.startswith("Memcpy") or low.lower().startswith("memcpy"):
        return MEMCPY
    if low.startswith("Memset") or low.lower().startswith("memset"):
        return MEMSET
    head = _head(name)
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
