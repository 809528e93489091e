"""A GPU's ceilings as the roofline reads them, and where they come from (pure
stdlib).  Apart from :mod:`gputui.analysis.roofline`, which places ops under
them, so that what only shows a GPU's ceilings (the monitor's device panel, the
saved measurements) loads neither the op rows nor their cost model."""

from __future__ import annotations

from gputui.protocol.value import ValueBase, value_class

#: the ceilings were measured on this GPU (``gputui bench``)...
MEASURED = "measured"
#: ...or are its datasheet's
DATASHEET = "datasheet"


@value_class
class Roof(ValueBase):
    """A GPU's ceilings: memory bandwidth and dense compute per dtype family."""

    bandwidth_gbps: float
    compute_tflops: tuple[tuple[str, float], ...]  #: ("bf16", 790.0), ...
    source: str  #: MEASURED or DATASHEET
    label: str  #: what the figures are: "measured 2026-11-23", "H100 SXM5 datasheet"

    def tflops(self, family: str | None) -> float | None:
        for fam, value in self.compute_tflops:
            if fam == family:
                return value
        return None

    def balance_flop_per_byte(self, family: str | None) -> float | None:
        peak = self.tflops(family)
        if peak is None or self.bandwidth_gbps <= 0:
            return None
        return peak * 1e12 / (self.bandwidth_gbps * 1e9)
