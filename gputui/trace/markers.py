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
  kernel name (flash, memory-efficient, cuDNN, math).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gputui.protocol.trace_metrics import JobMarkers
from gputui.trace.timeline import KERNEL, Timeline

_COMPILED_RANGES = ("Torch-Compiled Region", "CompiledFunction", "## Call CompiledFxGraph")
_GRAPH_LAUNCHES = frozenset({"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"})
_OPTIMIZER_OPS = ("aten::_fused_adam", "aten::_fused_sgd", "aten::_fused_adagrad")
#: collective kinds by the words of NCCL kernel names and host collective ops
_COLLECTIVES = (
    ("all_to_all", re.compile(r"alltoall|all_to_all|AllToAll", re.IGNORECASE)),
    ("reduce_scatter", re.compile(r"reducescatter|reduce_scatter", re.IGNORECASE)),
    ("all_gather", re.compile(r"allgather|all_gather", re.IGNORECASE)),
    ("all_reduce", re.compile(r"allreduce|all_reduce", re.IGNORECASE)),
    ("send_recv", re.compile(r"sendrecv|send_recv|\bsend\b|\brecv\b", re.IGNORECASE)),
    ("broadcast", re.compile(r"broadcast", re.IGNORECASE)),
)
_HOST_COLLECTIVE = re.compile(r"^(nccl:|gloo:|c10d::|record_param_comms)")
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


def _collective(name: str) -> str | None:
    for kind, pattern in _COLLECTIVES:
        if pattern.search(name):
            return kind
    return None


def job_markers(timeline: Timeline) -> JobMarkers:
    """The markers of one timeline (each distinct name looked at once)."""
    return markers_of(
        {r.name for r in timeline.ranges},
        {r.name for r in timeline.runtime},
        {a.name for a in timeline.gpu if a.kind == KERNEL},
    )


def markers_of(
    range_names: Iterable[str], runtime_names: Iterable[str], kernel_names: Iterable[str]
) -> JobMarkers:
    """The markers of a timeline's distinct names: its host ranges', its runtime
    calls' and its kernels'."""
    compiled = cuda_graphs = backward = optimizer = False
    collectives: set[str] = set()
    attention: set[str] = set()
    for name in range_names:
        if name.startswith(_COMPILED_RANGES):
            compiled = True
        elif name.startswith("autograd::engine::evaluate_function") or name.endswith(
            ("Backward0", "Backward1")
        ):
            backward = True
        elif name.startswith("Optimizer.step#") or name.startswith(_OPTIMIZER_OPS):
            optimizer = True
        elif _HOST_COLLECTIVE.match(name):
            kind = _collective(name)
            if kind is not None:
                collectives.add(kind)
        for backend, prefixes in _ATTENTION_OPS:
            if name.startswith(prefixes):
                attention.add(backend)
    if not _GRAPH_LAUNCHES.isdisjoint(runtime_names):
        cuda_graphs = True
    for name in kernel_names:
        if name.startswith("triton_"):
            compiled = True
        if "nccl" in name.lower():
            kind = _collective(name)
            if kind is not None:
                collectives.add(kind)
        for backend, pattern in _ATTENTION_KERNELS:
            if pattern.search(name):
                attention.add(backend)
    return JobMarkers(
        compiled=compiled,
        cuda_graphs=cuda_graphs,
        backward=backward,
        optimizer=optimizer,
        collectives=tuple(sorted(collectives)),
        attention=tuple(sorted(attention)),
    )
