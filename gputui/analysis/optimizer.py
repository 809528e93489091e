"""How the job's optimizer steps: torch.optim's per-parameter loop, its
multi-tensor (foreach) kernels or its fused ones, from a capture's ops and
kernels or the Python sampler's torch.optim functions.  Pure."""

from __future__ import annotations

from gputui.analysis.evidence import JobEvidence
from gputui.protocol.profile import PythonProfile

#: the optimizer implementations torch.optim's functions are named after
#: (``_single_tensor_adam``, ``_multi_tensor_sgd``, ``_fused_adamw``, ...)
SINGLE, MULTI, FUSED = "single-tensor", "multi-tensor", "fused"
_IMPL_PREFIXES = (("_single_tensor_", SINGLE), ("_multi_tensor_", MULTI), ("_fused_", FUSED))


def optimizer_impl(ev: JobEvidence) -> tuple[str, str] | None:
    """(implementation, what showed it) of the job's optimizer step: from a
    capture's ops and kernels, else from the Python sampler's torch.optim
    functions (the one on the stack longest); None when neither tells."""
    cap = ev.capture
    sampled = _sampled_impl(ev.python_profile)
    if cap is not None:
        ops = [o.name for o in cap.cpu_ops]
        kernels = [k.name.lower() for k in cap.kernels]
        if any(n.startswith("aten::_fused_") for n in ops) or any(
            any(mark in k for mark in _FUSED_KERNELS) for k in kernels
        ):
            return FUSED, "the capture's fused optimizer kernels"
        if sampled is not None and sampled[0] == FUSED:
            # a capture keeps its top ops and kernels only: the sampler saw it
            return sampled
        if any(n.startswith("aten::_foreach_") for n in ops) or any(
            "multi_tensor_apply" in k for k in kernels
        ):
            return MULTI, "the capture's foreach kernels"
        # the tables keep the top ops and kernels: a small optimizer's are among
        # the names the markers read, every one of them
        seen = None if cap.markers is None else cap.markers.optimizer_kernels
        if seen is not None:
            return (
                (FUSED, "the capture's fused optimizer ops")
                if seen == "fused"
                else (
                    MULTI,
                    "the capture's foreach ops",
                )
            )
        return SINGLE, "the capture shows no foreach or fused optimizer kernels"
    return sampled


#: torch's fused optimizer kernels, lower-cased: the fused ops' own names, and
#: the multi-tensor kernel they run (``FusedAdamMathFunctor`` over
#: ``FusedOptimizerTensorListMetadata``)
_FUSED_KERNELS = ("fused_adam", "fused_sgd", "fusedoptimizer", "fusedadam", "fusedsgd")


def _sampled_impl(profile: PythonProfile | None) -> tuple[str, str] | None:
    """The implementation of torch.optim's function the sampler saw longest."""
    if profile is None:
        return None
    best: tuple[float, str, str] | None = None
    for f in profile.functions:
        if "/optim/" not in "/" + f.file.replace("\\", "/"):
            continue
        for prefix, impl in _IMPL_PREFIXES:
            if f.function.startswith(prefix) and (best is None or f.total_s > best[0]):
                best = (f.total_s, impl, f.function)
    if best is None or best[0] <= 0:
        return None
    return best[1], f"the Python sampler saw torch.optim's {best[2]}"
