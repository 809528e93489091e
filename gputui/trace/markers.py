"""What kind of job a timeline is, from the names in it (pure, standard library
only: the hook computes it inside the job, ``gputui analyze`` from a trace).

The analyzer's advice follows the job: a compiled model is not told to compile,
an inference loop gets no optimizer advice, communication advice follows the
collective in use, attention advice the SDPA backend that ran.  The names:

- **compiled**: torch.compile's regions and functions (``Torch-Compiled
  Region``, ``CompiledFunction``, ``## Call CompiledFxGraph``) or Inductor's
  Triton kernels (``triton_…``);
- **CUDA graphs**: graph launches (``cudaGraphLaunch``, ``cuGraphLaunch``,
  ``hipGraphLaunch``);
- **backward**: the autograd engine's functions (``autograd::engine::evaluate_function``)
  or ops named ``…Backward0``;
- **optimizer**: ``Optimizer.step#…`` ranges, fused and foreach optimizer ops;
- **collectives**: NCCL kernels and host collectives by kind (all-reduce,
  all-gather, reduce-scatter, all-to-all, send/recv, broadcast);
- **attention**: the scaled-dot-product-attention backends that ran, by op and
  kernel name (flash, memory-efficient, cuDNN, math), and what the ops inside
  each SDPA call show of its inputs (:func:`attention_inputs`): an attn_mask, the
  math backend's is_causal mask, its casts of 16-bit inputs to fp32, dropout.
- **the DataLoader**: where its batches are made, by the iterator its
  ``enumerate(DataLoader)#…__next__`` range names (``_MultiProcessingDataLoaderIter``:
  worker processes; ``_SingleProcessDataLoaderIter``: the training process).
- **the framework**: Lightning's profiler names its ranges ``[pl][…]``; a trace
  recorded with its Python stack names the HF Trainer's loop
  (``transformers/trainer.py(…)``) or Lightning's (``lightning/pytorch/…``).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from itertools import compress
from operator import itemgetter
from typing import Any

from gputui.protocol.trace_metrics import JobMarkers
from gputui.trace.kernels import collective_kind, expert_exchange
from gputui.trace.timeline import GPU_ANNOTATION, KERNEL, HostRange, Timeline

_NAME = itemgetter(2)

#: the names torch.compile gives the ranges around its compiled code
COMPILED_RANGES = ("Torch-Compiled Region", "CompiledFunction", "## Call CompiledFxGraph")
_GRAPH_LAUNCHES = frozenset({"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"})
_OPTIMIZER_OPS = ("aten::_fused_adam", "aten::_fused_sgd", "aten::_fused_adagrad")
#: torch's multi-tensor ops: a foreach optimizer's, but for the norm and the
#: scaling that gradient clipping (clip_grad_norm_) runs with them too
_FOREACH_OPS = "aten::_foreach_"
_CLIPPING_OPS = frozenset({"aten::_foreach_norm", "aten::_foreach_mul_"})
_HOST_COLLECTIVE = re.compile(r"^(nccl:|gloo:|c10d::|record_param_comms)")
#: the DataLoader's __next__ range, by where its iterator makes the batches
_LOADER_RANGE = "enumerate(DataLoader)#"
#: the training frameworks by the names they leave in a trace: a range's name
#: that starts with one of the first, or a Python function's path that holds one
#: of the second
_FRAMEWORK_NAMES = (
    ("lightning", ("[pl][",), ("lightning/pytorch/", "pytorch_lightning/")),
    ("transformers", (), ("transformers/trainer.py(",)),
    ("accelerate", (), ("accelerate/accelerator.py(",)),
)
#: a framework that runs under another (the HF Trainer on Accelerate): the
#: other is looked for after it is found
_UNDERNEATH = "accelerate"
_LOADER_ITERS = (
    ("_MultiProcessingDataLoaderIter", "workers"),
    ("_SingleProcessDataLoaderIter", "main"),
)
#: SDPA backends by op name, then by kernel name
_ATTENTION_OPS = (
    ("flash", ("aten::_scaled_dot_product_flash_attention", "aten::_flash_attention_")),
    (
        "efficient",
        ("aten::_scaled_dot_product_efficient_attention", "aten::_efficient_attention_"),
    ),
    ("cudnn", ("aten::_scaled_dot_product_cudnn_attention", "aten::_cudnn_attention_")),
    ("math", ("aten::_scaled_dot_product_attention_math",)),
)
_ATTENTION_KERNELS = (
    ("flash", re.compile(r"flash_fwd|flash_bwd|pytorch_flash::|flash::")),
    ("efficient", re.compile(r"fmha_cutlass|efficient_attention|mem_eff")),
    ("cudnn", re.compile(r"cudnn.*(sdpa|flash|fmha|attention)", re.IGNORECASE)),
)
#: the public op, and the backend ops it calls (an op named by one of these
#: prefixes runs a backend's kernels: what is outside them is SDPA's own work)
SDPA_OP = "aten::scaled_dot_product_attention"
_BACKEND_OPS = tuple(p for _backend, prefixes in _ATTENTION_OPS for p in prefixes)
_MATH_OP = "aten::_scaled_dot_product_attention_math"
#: ops SDPA runs on an attn_mask before its backend op: a boolean mask made
#: additive (logical_not, then where or masked_fill), a float mask expanded to
#: the batch and heads for the memory-efficient and cuDNN kernels
_MASK_OPS = frozenset(
    {"aten::expand", "aten::logical_not", "aten::where", "aten::masked_fill", "aten::masked_fill_"}
)
#: inside the math backend: the lower triangle it builds for is_causal=True, the
#: mask added to the scores, the copies that cast 16-bit inputs to fp32 (it
#: computes in fp32 unless torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp
#: is on; fp32 inputs need no copy), dropout
_MATH_CAUSAL = "aten::tril"
_MATH_ADD = frozenset({"aten::add_", "aten::add"})
_MATH_UPCAST = "aten::_to_copy"
_DROPOUT_OPS = frozenset({"aten::dropout", "aten::native_dropout", "aten::bernoulli_"})
_PROBES = _MASK_OPS | _MATH_ADD | _DROPOUT_OPS | {_MATH_CAUSAL, _MATH_UPCAST}
#: the memory-efficient backward's kernels with dropout applied (their generated
#: names say so: ``fmha_cutlassB_bf16_aligned_64x64_k64_dropout_sm80``)
_DROPOUT_KERNEL = re.compile(r"fmha_cutlassB_\w*_dropout_")


def op_backend(name: str) -> str | None:
    """The SDPA backend an op belongs to ("flash", "efficient", "cudnn",
    "math"), None for any other op."""
    for backend, prefixes in _ATTENTION_OPS:
        if name.startswith(prefixes):
            return backend
    return None


def kernel_backend(name: str) -> str | None:
    """The SDPA backend a kernel belongs to ("flash", "efficient", "cudnn"),
    None for any other kernel (the math backend runs ordinary matmul and
    softmax kernels)."""
    for backend, pattern in _ATTENTION_KERNELS:
        if pattern.search(name):
            return backend
    return None


class _Spans:
    """The union of some host ranges per thread, as disjoint sorted spans: which
    span (if any) holds a range."""

    def __init__(self) -> None:
        self._raw: dict[int, list[tuple[int, int]]] = {}
        self._starts: dict[int, list[int]] = {}
        self._spans: dict[int, list[tuple[int, int]]] = {}

    def add(self, r: HostRange) -> None:
        self._raw.setdefault(r.thread, []).append((r.start_us, r.end_us))

    def close(self) -> _Spans:
        for thread, raw in self._raw.items():
            merged: list[tuple[int, int]] = []
            for lo, hi in sorted(raw):
                if merged and lo <= merged[-1][1]:
                    merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
                else:
                    merged.append((lo, hi))
            self._spans[thread] = merged
            self._starts[thread] = [lo for lo, _hi in merged]
        return self

    def holding(self, r: HostRange) -> int:
        """The index of the span on ``r``'s thread that holds it; -1 for none."""
        starts = self._starts.get(r.thread)
        if not starts:
            return -1
        i = bisect.bisect_right(starts, r.start_us) - 1
        return i if i >= 0 and r.end_us <= self._spans[r.thread][i][1] else -1


def attention_inputs(ranges: Iterable[HostRange], names: Iterable[str] | None = None) -> set[str]:
    """What the ops inside scaled_dot_product_attention calls show of their
    inputs (no input shapes needed):

    - "mask": an attn_mask was prepared before the backend op (a boolean mask
      made additive, a float mask expanded for the fused kernels), or the math
      backend added a mask to the scores that it did not build itself;
    - "causal": the math backend built the lower triangle of is_causal=True;
    - "upcast": the math backend copied its inputs to fp32: they were fp16 or
      bf16;
    - "dropout": the math backend ran dropout.

    One pass over the host ranges; call it only where SDPA ran.  ``names``, the
    ranges' distinct names where the caller has them, lets the pass skip the
    ranges of every other name at C speed."""
    if names is not None and isinstance(ranges, (list, tuple)):
        wanted = {n for n in names if n == SDPA_OP or n in _PROBES or n.startswith(_BACKEND_OPS)}
        ranges = list(compress(ranges, map(wanted.__contains__, map(_NAME, ranges))))
    sdpa, backend, math = _Spans(), _Spans(), _Spans()
    probes: list[HostRange] = []
    for r in ranges:
        name = r.name
        if name == SDPA_OP:
            sdpa.add(r)
        elif name in _PROBES:
            probes.append(r)
        elif name.startswith(_BACKEND_OPS):
            backend.add(r)
            if name == _MATH_OP:
                math.add(r)
    sdpa.close(), backend.close(), math.close()
    found: set[str] = set()
    causal: set[tuple[int, int]] = set()  # math calls (thread, span) that built the triangle
    added: set[tuple[int, int]] = set()  # ... that added a mask to the scores
    for r in probes:
        name = r.name
        in_math = math.holding(r)
        if in_math >= 0:
            if name == _MATH_CAUSAL:
                causal.add((r.thread, in_math))
            elif name in _MATH_ADD:
                added.add((r.thread, in_math))
            elif name == _MATH_UPCAST:
                found.add("upcast")
            elif name in _DROPOUT_OPS:
                found.add("dropout")
        elif name in _MASK_OPS and sdpa.holding(r) >= 0 and backend.holding(r) < 0:
            found.add("mask")
    if causal:
        found.add("causal")
    if added - causal:
        found.add("mask")
    return found


def compiled_names(range_names: Iterable[str]) -> set[str]:
    """The names of torch.compile's ranges among ``range_names``."""
    return {name for name in range_names if name.startswith(COMPILED_RANGES)}


def launch_share_inside(
    ranges: Iterable[HostRange], launches: list[Any], names: set[str]
) -> float | None:
    """The share of ``launches`` (kernel launch calls, in start order) that
    start inside one of the host ranges named ``names`` on their thread:
    torch.compile's (:func:`compiled_names`: how much of the step the compiled
    code issues), the optimizer's steps.  None without such ranges or
    launches."""
    if not names or not launches:
        return None
    spans: dict[Any, list[tuple[int, int]]] = {}
    for r in ranges:
        if r[2] in names and r[4] != GPU_ANNOTATION:
            spans.setdefault(r[3], []).append((r[0], r[1]))
    if not spans:
        return None
    merged: dict[Any, tuple[list[int], list[int]]] = {}
    for tid, got in spans.items():
        starts: list[int] = []
        ends: list[int] = []
        for a, b in sorted(got):
            if ends and a <= ends[-1]:
                ends[-1] = max(ends[-1], b)
            else:
                starts.append(a)
                ends.append(b)
        merged[tid] = (starts, ends)
    inside = 0
    for c in launches:
        on = merged.get(c[3])
        if on is not None:
            k = bisect.bisect_right(on[0], c[0]) - 1
            inside += k >= 0 and c[0] < on[1][k]
    return inside / len(launches)


def job_markers(timeline: Timeline) -> JobMarkers:
    """The markers of one timeline (each distinct name looked at once)."""
    return markers_of(
        {r.name for r in timeline.ranges},
        {r.name for r in timeline.runtime},
        {a.name for a in timeline.gpu if a.kind == KERNEL},
        timeline.ranges,
    )


def _framework(name: str) -> str | None:
    """The training framework a range's name belongs to, if any."""
    for framework, prefixes, parts in _FRAMEWORK_NAMES:
        if name.startswith(prefixes) or any(part in name for part in parts):
            return framework
    return None


def _named(found: set[str | None]) -> tuple[str, ...]:
    return tuple(sorted(name for name in found if name is not None))


def markers_of(
    range_names: Iterable[str],
    runtime_names: Iterable[str],
    kernel_names: Iterable[str],
    ranges: Iterable[HostRange] = (),
    compiled_share: float | None = None,
) -> JobMarkers:
    """The markers of a timeline's distinct names: its host ranges', its runtime
    calls' and its kernels'; ``ranges`` (the host ranges themselves) for what
    SDPA's own ops show of its inputs; ``compiled_share``: the share of the
    launches made inside torch.compile's ranges (:func:`compiled_launch_share`)."""
    compiled = cuda_graphs = backward = optimizer = fused = foreach = False
    optimizers: set[str] = set()  # the optimizer classes the step ranges name
    loader: str | None = None
    framework: str | None = None
    collectives: set[str | None] = set()  # None: a name that says no kind
    attention: set[str | None] = set()
    inputs: set[str] = set()
    names = range_names if isinstance(range_names, (set, frozenset)) else set(range_names)
    if SDPA_OP in names:
        inputs = attention_inputs(ranges, names)
    for name in names:
        if name.startswith(COMPILED_RANGES):
            compiled = True
        elif name.startswith("autograd::engine::evaluate_function") or name.endswith(
            ("Backward0", "Backward1")
        ):
            backward = True
        elif name.startswith(_FOREACH_OPS):
            if name not in _CLIPPING_OPS:
                foreach = True
        elif name.startswith("Optimizer.step#") or name.startswith(_OPTIMIZER_OPS):
            optimizer = True
            if name.startswith(_OPTIMIZER_OPS):
                fused = True
            if name.startswith("Optimizer.step#"):
                # ``Optimizer.step#SGD.step``: the optimizer's class
                cls = name[len("Optimizer.step#") :].partition(".")[0]
                if cls.isidentifier() and len(cls) <= 40 and cls.isascii():
                    optimizers.add(cls)
        elif _HOST_COLLECTIVE.match(name):
            collectives.add(collective_kind(name))
        elif name.startswith(_LOADER_RANGE):
            loader = next((where for it, where in _LOADER_ITERS if it in name), loader)
        elif framework is None or framework == _UNDERNEATH:
            framework = _framework(name) or framework
        attention.add(op_backend(name))
    if not _GRAPH_LAUNCHES.isdisjoint(runtime_names):
        cuda_graphs = True
    for name in kernel_names:
        if name.startswith("triton_"):
            compiled = True
        if "nccl" in name.lower():
            collectives.add(collective_kind(name))
        elif expert_exchange(name):
            collectives.add("all_to_all")
        backend = kernel_backend(name)
        if backend is not None:
            attention.add(backend)
            if _DROPOUT_KERNEL.search(name):
                inputs.add("dropout")
    return JobMarkers(
        compiled=compiled,
        cuda_graphs=cuda_graphs,
        backward=backward,
        optimizer=optimizer,
        collectives=_named(collectives),
        attention=_named(attention),
        attention_inputs=tuple(sorted(inputs)),
        loader=loader,
        framework=framework,
        optimizer_class=min(optimizers) if len(optimizers) == 1 else None,
        compiled_launch_share=compiled_share if compiled else None,
        optimizer_kernels="fused" if fused else "foreach" if foreach else None,
    )


#: the share of a trace's launches made inside torch.compile's ranges
compiled_launch_share = launch_share_inside
