"""The op rows of a capture recorded with FLOPs and shapes, on the wire (standard
library only).

One row is one op with one input signature (name, input shapes, dtypes) summed
over its calls: the GPU time of the kernels it launched, its FLOPs (torch's count
or gputui's estimate) and the bytes it moved (estimated from shapes and dtypes).
:mod:`gputui.trace.op_rows` builds them; :mod:`gputui.analysis.roofline`
places them against the GPU's ceilings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gputui.protocol import fields as f
from gputui.protocol import spec
from gputui.protocol.fields import SchemaError
from gputui.protocol.value import value_class

#: where a row's FLOPs come from
PROFILER = "profiler"  # torch's own count (``with_flops``)
ESTIMATED = "estimated"  # gputui's formula from the shapes (trace.op_costs)
FLOPS_SOURCES = (PROFILER, ESTIMATED)
#: most rows in a capture result
MAX_OP_ROWS = 50
MAX_INPUTS = 64
MAX_DIMS = 16
_MAX_NAME = 1000
_BIG = 1e30  # FLOPs and bytes: far beyond any real capture, still finite

Shape = tuple[int, ...]


def _flops_source(obj: Mapping[str, Any], key: str, where: str) -> str | None:
    """Where the row's FLOPs come from (None without FLOPs)."""
    source = f.text(obj, key, where, 16, default=None)
    if source is not None and source not in FLOPS_SOURCES:
        raise SchemaError(f"{where}.{key}", f"{source!r} is not one of {FLOPS_SOURCES}")
    return source if obj.get("flops") is not None else None


def _dims(obj: Mapping[str, Any], key: str, where: str) -> tuple[Shape | None, ...]:
    out: list[Shape | None] = []
    for i, item in enumerate(f.items(obj, key, where, MAX_INPUTS)):
        if item is None:
            out.append(None)
            continue
        here = f"{where}.{key}[{i}]"
        if (
            not isinstance(item, list)
            or len(item) > MAX_DIMS
            or not all(type(d) is int and 0 <= d <= f.MAX_COUNT for d in item)
        ):
            raise SchemaError(here, f"expected a list of at most {MAX_DIMS} sizes")
        out.append(tuple(item))
    return tuple(out)


@spec.value("op_row")
@value_class
class OpRow(spec.Wire):
    """One op with one input signature, summed over its calls."""

    name: str = spec.text(limit=_MAX_NAME)
    #: None for an input that is not one tensor
    input_dims: tuple[Shape | None, ...] = spec.field(
        _dims, write="[None if d is None else list(d) for d in {v}]"
    )
    input_types: tuple[str, ...] = spec.texts(MAX_INPUTS, 100, required=True)
    calls: int = spec.integer(lo=1)
    #: GPU time of the kernels it (or an op under it) launched
    device_us: float = spec.number(hi=1e15, write="round({v}, 3)")
    kernels: int = spec.integer(missing=0)
    flops: float | None = spec.number(hi=_BIG, missing=None)  #: total over the calls
    #: PROFILER or ESTIMATED
    flops_source: str | None = spec.field(_flops_source)
    #: total over the calls, estimated
    bytes_moved: float | None = spec.number(hi=_BIG, missing=None)
    #: which estimate gave ``bytes_moved`` (trace.op_costs)
    bytes_rule: str = spec.text(limit=20, missing="")


def _by_dtype(obj: Mapping[str, Any], key: str, where: str) -> tuple[tuple[str, float], ...]:
    by_dtype = f.child(obj, key, where) or {}
    pairs = [
        (str(k)[:16], f.check_number(v, f"{where}.{key}.{k}", 0.0, _BIG))
        for k, v in list(by_dtype.items())[:16]
    ]
    return tuple(sorted(pairs, key=lambda kv: -kv[1]))


@spec.value("flop_totals")
@value_class
class FlopTotals(spec.Wire):
    """The FLOPs of a whole capture (every op, not only the rows sent), for the
    model FLOP utilisation (MFU).  Totals over the captured steps.

    *Model* FLOPs count what the model needs: each matrix product, convolution and
    attention once in the forward, and its gradients in the backward.  *Hardware*
    FLOPs add what ran again: forward ops recomputed inside the backward
    (activation checkpointing) and the scores that fused attention kernels
    recompute in their backward.  Elementwise ops count in neither."""

    model: float = spec.number(hi=_BIG)
    hardware: float = spec.number(hi=_BIG)
    #: model FLOPs per dtype family ("bf16", "fp32", ...), biggest first
    by_dtype: tuple[tuple[str, float], ...] = spec.field(_by_dtype, default=(), write="dict({v})")
    #: of the hardware FLOPs, those of forward ops run again in the backward
    recomputed: float = spec.number(0.0, hi=_BIG)
    #: ops counted, and ops of those kinds whose shapes did not fit a formula
    ops: int = 0
    unknown: int = 0

    @property
    def dtype(self) -> str | None:
        """The dtype family with the most model FLOPs."""
        return self.by_dtype[0][0] if self.by_dtype else None
