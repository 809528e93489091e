"""One GPU over a window of monitor samples, as the rules read it (means and how
often each throttle reason was active).  Standard library and the snapshot
model only: the monitor's device rules load it without the job's evidence."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import TYPE_CHECKING

from gputui.protocol.value import ValueBase, value_class

if TYPE_CHECKING:
    from gputui.snapshot.model import DeviceSnapshot


@value_class
class GpuWindow(ValueBase):
    """One GPU over a window of monitor samples: means, and how often each clock
    event (throttle reason) was active."""

    samples: int
    index: int | None = None
    name: str | None = None
    util_pct: float | None = None
    util_stdev_pct: float | None = None
    sm_active_pct: float | None = None
    sm_occupancy_pct: float | None = None
    tensor_pct: float | None = None
    dram_pct: float | None = None
    fp16_pct: float | None = None
    fp32_pct: float | None = None
    fp64_pct: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temp_c: float | None = None
    clock_sm_mhz: float | None = None
    clock_sm_max_mhz: float | None = None
    pcie_rx_bytes_per_s: float | None = None
    pcie_tx_bytes_per_s: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    #: reason -> share of samples (0..1) in which it was active
    throttle_share: Mapping[str, float] = field(default_factory=dict)
    gpm: bool = False  # GPM metrics were available

    @classmethod
    def of(cls, devices: Sequence[DeviceSnapshot]) -> GpuWindow | None:
        """The window over snapshots of one GPU, oldest first; None when empty."""
        live = [d for d in devices if not d.lost]
        if not live:
            return None
        last = live[-1]
        gpms = [d.gpm for d in live if d.gpm is not None]
        utils = [d.util_gpu_pct for d in live if d.util_gpu_pct is not None]
        reasons: dict[str, int] = {}
        counted = 0
        for d in live:
            if d.throttle_reasons is None:
                continue
            counted += 1
            for reason in d.throttle_reasons:
                reasons[reason] = reasons.get(reason, 0) + 1
        # One column per metric (a tuple per sample, transposed): the monitor runs
        # this for every GPU at every sample.
        gpm_rows = [
            (
                g.sm_activity_pct,
                g.sm_occupancy_pct,
                g.tensor_activity_pct,
                g.dram_bw_util_pct,
                g.fp16_activity_pct,
                g.fp32_activity_pct,
                g.fp64_activity_pct,
            )
            for g in gpms
        ]
        sm, occupancy, tensor, dram, fp16, fp32, fp64 = (
            list(zip(*gpm_rows, strict=True)) if gpm_rows else [()] * 7
        )
        power, temp, clock, rx, tx = zip(
            *[
                (
                    d.power_w,
                    d.temp_gpu_c,
                    d.clock_sm_mhz,
                    d.pcie_rx_bytes_per_s,
                    d.pcie_tx_bytes_per_s,
                )
                for d in live
            ],
            strict=True,
        )
        return cls(
            samples=len(live),
            index=last.index,
            name=last.name,
            util_pct=_mean(utils),
            util_stdev_pct=_pstdev(utils) if len(utils) >= 2 else None,
            sm_active_pct=_mean(sm),
            sm_occupancy_pct=_mean(occupancy),
            tensor_pct=_mean(tensor),
            dram_pct=_mean(dram),
            fp16_pct=_mean(fp16),
            fp32_pct=_mean(fp32),
            fp64_pct=_mean(fp64),
            power_w=_mean(power),
            power_limit_w=last.power_limit_w,
            temp_c=_mean(temp),
            clock_sm_mhz=_mean(clock),
            clock_sm_max_mhz=last.clock_sm_max_mhz,
            pcie_rx_bytes_per_s=_mean(rx),
            pcie_tx_bytes_per_s=_mean(tx),
            mem_used_bytes=last.mem_used_bytes,
            mem_total_bytes=last.mem_total_bytes,
            throttle_share={r: n / counted for r, n in reasons.items()} if counted else {},
            gpm=bool(gpms),
        )


def _mean(values: Sequence[float | int | None]) -> float | None:
    """The mean of the values that are there (not None, not NaN); None if none is."""
    if values and None not in values:
        total = math.fsum(values)  # type: ignore[arg-type]
        if total == total:  # no NaN among them: the common case, without a list
            return total / len(values)
    present = [v for v in values if v is not None and v == v]
    return math.fsum(present) / len(present) if present else None


def _pstdev(values: Sequence[float | int]) -> float:
    """The population standard deviation, in floats (``statistics.pstdev``
    computes in exact fractions: ten times the cost, for digits no rule reads)."""
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))
