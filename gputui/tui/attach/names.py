"""Short, recognizable names for demangled CUDA kernel names.

``void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<
c10::BFloat16>, std::array<char*, 3ul> >(int, ...)`` becomes
``vectorized_elementwise_kernel<CUDAFunctor_add>``: the function's own name (the
stem) plus the first one or two names in its template arguments that say what it
computes (the functor), with namespaces, numbers, types and plumbing left out.
The profiler cuts very long names, so unbalanced brackets are expected.
"""

from __future__ import annotations

import re

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
