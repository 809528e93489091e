"""Clock-event ("throttle") reasons: what each is called and how bad it is.

The one table that the findings, the device panel, ``gputui --once`` and the
exporter all read, so a reason is named and coloured the same everywhere.
Reasons are the decoded NVML clock-event bits (``nvml.fields``).
Severity follows what the reason costs: a power cap lowers clocks as designed
under full load (warn); a software thermal slowdown means the GPU runs hot
enough to be held back (warn); hardware slowdowns, hardware thermal slowdown
and the external power brake cut clocks hard and point at a fault in power
delivery or cooling (crit).  The others (idle, application clocks, sync boost,
display clocks) cost nothing and are only informational.
"""

from __future__ import annotations

from collections.abc import Iterable

from gputui.analysis.severity import CRIT, INFO, WARN, Severity
from gputui.protocol.value import ValueBase, value_class


@value_class
class Throttle(ValueBase):
    """One clock-event (throttle) reason: its NVML name, label, flag and severity."""

    reason: str  # the decoded NVML name, e.g. "sw_power_cap"
    label: str  # what people call it, for findings and help
    flag: str  # a few capitals, for the device panel and --once
    severity: Severity


THROTTLES: dict[str, Throttle] = {
    t.reason: t
    for t in (
        Throttle(
            "sw_power_cap",
            "power cap (clocks lowered to stay under the power limit)",
            "PWR CAP",
            WARN,
        ),
        Throttle("sw_thermal_slowdown", "thermal slowdown (software)", "THERMAL", WARN),
        Throttle("hw_slowdown", "hardware slowdown", "HW SLOWDOWN", CRIT),
        Throttle("hw_thermal_slowdown", "thermal slowdown (hardware)", "HW THERMAL", CRIT),
        Throttle(
            "hw_power_brake_slowdown",
            "power brake (external power brake assertion)",
            "PWR BRAKE",
            CRIT,
        ),
        Throttle("gpu_idle", "idle (nothing to run)", "idle", INFO),
        Throttle("applications_clocks_setting", "application clocks setting", "app clocks", INFO),
        Throttle("sync_boost", "sync boost (clocks matched to other GPUs)", "sync boost", INFO),
        Throttle("display_clock_setting", "display clock setting", "display clocks", INFO),
    )
}


def costly(reasons: Iterable[str] | None) -> list[Throttle]:
    """The reasons in ``reasons`` that cost performance (warn or crit), in table
    order; unknown names are left out."""
    present = set(reasons or ())
    return [t for t in THROTTLES.values() if t.reason in present and t.severity != INFO]


def worst(throttles: Iterable[Throttle]) -> Severity | None:
    """The most severe of ``throttles``, or None when there are none."""
    found = [t.severity for t in throttles]
    if not found:
        return None
    return CRIT if CRIT in found else WARN if WARN in found else INFO
