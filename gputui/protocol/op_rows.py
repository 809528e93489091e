"""The op rows of a capture recorded with FLOPs and shapes, on the wire (standard
library only).

One row is one op with one input signature (name, input shapes, dtypes) summed
over its calls: the GPU time of the kernels it launched, its FLOPs (torch's count
or gputui's estimate) and the bytes it moved (estimated from shapes and dtypes).
:mod:`gputui.trace.op_rows` builds them; :mod:`gputui.analysis.roofline`
places them against the GPU's ceilings.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from gputui.protocol import fields as f
from gputui.protocol.fields import SchemaError, typed

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


@dataclass(frozen=True)
class OpRow:
    """One op with one input signature, summed over its calls."""

    name: str
    input_dims: tuple[Shape | None, ...]  #: None for an input that is not one tensor
    input_types: tuple[str, ...]
    calls: int
    device_us: float  #: GPU time of the kernels it (or an op under it) launched
    kernels: int
    flops: float | None  #: total over the calls
    flops_source: str | None  #: PROFILER or ESTIMATED
    bytes_moved: float | None  #: total over the calls, estimated
    bytes_rule: str  #: which estimate gave ``bytes_moved`` (trace.op_costs)

    @classmethod
    def from_wire(cls, obj: Any, where: str = "op_row") -> OpRow:
        obj = typed(obj, where)
        flops = f.opt_number(obj, "flops", where, hi=_BIG)
        source = f.opt_text(obj, "flops_source", where, 16)
        if source is not None and source not in FLOPS_SOURCES:
            raise SchemaError(f"{where}.flops_source", f"{source!r} is not one of {FLOPS_SOURCES}")
        return cls(
            name=f.text(obj, "name", where, _MAX_NAME),
            input_dims=_dims(f.items(obj, "input_dims", where, MAX_INPUTS), where),
            input_types=f.texts(obj, "input_types", where, MAX_INPUTS, 100),
            calls=f.integer(obj, "calls", where, lo=1),
            device_us=f.number(obj, "device_us", where, hi=1e15),
            kernels=f.integer(obj, "kernels", where, default=0),
            flops=flops,
            flops_source=source if flops is not None else None,
            bytes_moved=f.opt_number(obj, "bytes_moved", where, hi=_BIG),
            bytes_rule=f.text(obj, "bytes_rule", where, 20, default=""),
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "input_dims": [list(d) if d is not None else None for d in self.input_dims],
            "input_types": list(self.input_types),
            "calls": self.calls,
            "device_us": round(self.device_us, 3),
            "kernels": self.kernels,
            "flops": self.flops,
            "flops_source": self.flops_source,
            "bytes_moved": self.bytes_moved,
            "bytes_rule": self.bytes_rule,
        }


def _dims(items: list[Any], where: str) -> tuple[Shape | None, ...]:
    out: list[Shape | None] = []
    for i, item in enumerate(items):
        if item is None:
            out.append(None)
            continue
        here = f"{where}.input_dims[{i}]"
        if (
            not isinstance(item, list)
            or len(item) > MAX_DIMS
            or not all(type(d) is int and 0 <= d <= f.MAX_COUNT for d in item)
        ):
            raise SchemaError(here, f"expected a list of at most {MAX_DIMS} sizes")
        out.append(tuple(item))
    return tuple(out)


@dataclass(frozen=True)
class FlopTotals:
    """The FLOPs of a whole capture (every op, not only the rows sent), for the
    model FLOP utilisation (MFU).  Totals over the captured steps.

    *Model* FLOPs count what the model needs: each matrix product, convolution and
    attention once in the forward, and its gradients in the backward.  *Hardware*
    FLOPs add what ran again: forward ops recomputed inside the backward
    (activation checkpointing) and the scores that fused attention kernels
    recompute in their backward.  Elementwise ops count in neither."""

    model: float
    hardware: float
    #: model FLOPs per dtype family ("bf16", "fp32", ...), biggest first
    by_dtype: tuple[tuple[str, float], ...] = ()
    #: of the hardware FLOPs, those of forward ops run again in the backward
    recomputed: float = 0.0
    #: ops counted, and ops of those kinds whose shapes did not fit a formula
    ops: int = 0
    unknown: int = 0

    @property
    def dtype(self) -> str | None:
        """The dtype family with the most model FLOPs."""
        return self.by_dtype[0][0] if self.by_dtype else None

    @classmethod
    def from_wire(cls, obj: Any, where: str = "flop_totals") -> FlopTotals:
        obj = typed(obj, where)
        by_dtype = f.child(obj, "by_dtype", where) or {}
        pairs = [
            (str(k)[:16], f.check_number(v, f"{where}.by_dtype.{k}", 0.0, _BIG))
            for k, v in list(by_dtype.items())[:16]
        ]
        return cls(
            model=f.number(obj, "model", where, hi=_BIG),
            hardware=f.number(obj, "hardware", where, hi=_BIG),
            by_dtype=tuple(sorted(pairs, key=lambda kv: -kv[1])),
            recomputed=f.number(obj, "recomputed", where, hi=_BIG, default=0.0),
            ops=f.integer(obj, "ops", where, default=0),
            unknown=f.integer(obj, "unknown", where, default=0),
        )

    def to_wire(self) -> dict[str, Any]:
        wire = asdict(self)  # the wire's keys are the fields' names
        wire["by_dtype"] = dict(self.by_dtype)
        return wire
