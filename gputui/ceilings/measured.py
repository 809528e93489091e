"""What ``gputui bench`` measures, as values (stdlib only: the monitor reads them
without torch)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from gputui.analysis.roof import MEASURED, Roof
from gputui.protocol.value import ValueBase, value_class

HBM_COPY = "hbm_copy"
MATMUL_FP32 = "matmul_fp32"
MATMUL_TF32 = "matmul_tf32"
MATMUL_BF16 = "matmul_bf16"
MATMUL_FP16 = "matmul_fp16"
MATMUL_FP8 = "matmul_fp8"
H2D_PINNED = "h2d_pinned"
D2H_PINNED = "d2h_pinned"
H2D_PAGEABLE = "h2d_pageable"
D2H_PAGEABLE = "d2h_pageable"
LAUNCH = "launch"

GBPS = "GB/s"
TFLOPS = "TFLOP/s"
US = "us"

#: every measurement, in the order it is taken and shown: key -> (label, unit)
MEASUREMENTS: dict[str, tuple[str, str]] = {
    HBM_COPY: ("HBM copy, read+write", GBPS),
    MATMUL_FP32: ("matmul fp32", TFLOPS),
    MATMUL_TF32: ("matmul tf32", TFLOPS),
    MATMUL_BF16: ("matmul bf16", TFLOPS),
    MATMUL_FP16: ("matmul fp16", TFLOPS),
    MATMUL_FP8: ("matmul fp8 e4m3", TFLOPS),
    H2D_PINNED: ("PCIe host->device, pinned", GBPS),
    D2H_PINNED: ("PCIe device->host, pinned", GBPS),
    H2D_PAGEABLE: ("PCIe host->device, pageable", GBPS),
    D2H_PAGEABLE: ("PCIe device->host, pageable", GBPS),
    LAUNCH: ("kernel launch, back to back", US),
}

#: matmul measurement key -> dtype family (as gputui.trace.op_costs names them)
MATMUL_FAMILY = {
    MATMUL_FP32: "fp32",
    MATMUL_TF32: "tf32",
    MATMUL_BF16: "bf16",
    MATMUL_FP16: "fp16",
    MATMUL_FP8: "fp8",
}


@value_class
class Measurement(ValueBase):
    """One ceiling: the median of the repetitions, with the slowest and the fastest.

    For rates (GB/s, TFLOP/s) ``worst`` is the lowest; for the launch time (us)
    the highest.  ``error`` says why there is no value ("not supported: ...")."""

    key: str
    value: float | None
    worst: float | None
    best: float | None
    repetitions: int
    size: str  #: what one repetition did: "1.0GiB copy x 12", "8192^3 x 4"
    error: str | None = None

    @property
    def label(self) -> str:
        return MEASUREMENTS.get(self.key, (self.key, ""))[0]

    @property
    def unit(self) -> str:
        return MEASUREMENTS.get(self.key, ("", ""))[1]


@value_class
class Ceilings(ValueBase):
    """A GPU's measured ceilings (medians); None where not measured or not supported."""

    gpu_uuid: str
    gpu_name: str
    hbm_copy_gbps: float | None  #: device-to-device copy, bytes read + bytes written
    fp32_tflops: float | None
    tf32_tflops: float | None
    bf16_tflops: float | None
    fp16_tflops: float | None
    fp8_tflops: float | None
    h2d_pinned_gbps: float | None
    d2h_pinned_gbps: float | None
    h2d_pageable_gbps: float | None
    d2h_pageable_gbps: float | None
    launch_us: float | None  #: per tiny kernel launched back to back
    measured_at: str  #: ISO 8601, UTC
    torch_version: str | None
    cuda_version: str | None
    driver_version: str | None
    gputui_version: str | None
    quick: bool

    def matmul_tflops(self, family: str) -> float | None:
        return {
            "fp32": self.fp32_tflops,
            "tf32": self.tf32_tflops,
            "bf16": self.bf16_tflops,
            "fp16": self.fp16_tflops,
            "fp8": self.fp8_tflops,
        }.get(family)

    def roof(self) -> Roof | None:
        """These ceilings as a roofline (None without a bandwidth measurement)."""
        if not self.hbm_copy_gbps:
            return None
        compute = tuple(
            (fam, value)
            for fam in MATMUL_FAMILY.values()
            if (value := self.matmul_tflops(fam)) is not None
        )
        return Roof(self.hbm_copy_gbps, compute, MEASURED, f"measured {self.measured_at[:10]}")

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Any) -> Ceilings | None:
        """The ceilings in ``data`` (a parsed cache file), or None if any field is
        missing or of the wrong type."""
        if not isinstance(data, dict):
            return None
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = data.get(f.name)
            if f.name in ("gpu_uuid", "gpu_name", "measured_at"):
                if not isinstance(value, str) or not value:
                    return None
            elif f.name == "quick":
                if not isinstance(value, bool):
                    return None
            elif f.name.endswith("_version"):
                if value is not None and not isinstance(value, str):
                    return None
            elif value is not None:
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    return None
                if not value > 0 or value == float("inf"):
                    return None
                value = float(value)
            values[f.name] = value
        return cls(**values)


def ceilings_from(
    measurements: list[Measurement] | tuple[Measurement, ...], **identity: Any
) -> Ceilings:
    """The medians of ``measurements`` as :class:`Ceilings`, with ``identity``
    (uuid, name, versions, date, quick) filled in."""
    by_key = {m.key: m.value for m in measurements if m.error is None}
    return Ceilings(
        hbm_copy_gbps=by_key.get(HBM_COPY),
        fp32_tflops=by_key.get(MATMUL_FP32),
        tf32_tflops=by_key.get(MATMUL_TF32),
        bf16_tflops=by_key.get(MATMUL_BF16),
        fp16_tflops=by_key.get(MATMUL_FP16),
        fp8_tflops=by_key.get(MATMUL_FP8),
        h2d_pinned_gbps=by_key.get(H2D_PINNED),
        d2h_pinned_gbps=by_key.get(D2H_PINNED),
        h2d_pageable_gbps=by_key.get(H2D_PAGEABLE),
        d2h_pageable_gbps=by_key.get(D2H_PAGEABLE),
        launch_us=by_key.get(LAUNCH),
        **identity,
    )
