"""A finding whose own estimate overlaps the other findings' costs: its settled
cost and the words that say why it is smaller than its evidence."""

from __future__ import annotations

from gputui.analysis.finding import Finding
from gputui.analysis.ledger import Ledger, Window
from gputui.analysis.settle import settle
from gputui.reports.findings import cost_text


def _finding(rule: str, bucket: str, pct: float) -> Finding:
    return Finding(
        rule=rule,
        severity="warn",
        scope="job",
        title=rule,
        evidence="seen",
        fix="fix",
        impact_pct=pct,
        bucket=bucket,
    )


def test_a_cost_the_larger_fixes_recover_is_said_so() -> None:
    """Host-side fixes together recover at most the GPU's idle time: with 65% of
    it taken by launch overhead, a pageable copy's 5% of host sync is left 0%,
    and its cost line says where its 5% went; the larger cost says nothing."""
    ledger = Ledger(
        window=Window("profiled steps", 1),
        step_s=0.007,
        shares={"dispatch": 0.59, "python": 0.21, "launch": 0.15, "sync": 0.05},
        gpu_busy=0.35,
        gpu_idle=0.65,
    )
    found = [_finding("launch.overhead", "issue", 65.0), _finding("copy.pageable", "sync", 5.0)]
    launch, copy = settle(found, ledger)
    assert launch.impact_pct == 65.0 and launch.overlap_pct is None
    assert copy.impact_pct == 0.0 and copy.overlap_pct == 5.0
    assert copy.to_json()["overlap_pct"] == 5.0
    assert cost_text(copy).endswith(
        "in host sync wait; its own 5% is time the other findings' fixes already recover"
    )
    assert "recover" not in cost_text(launch)
