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


def test_a_synchronizing_steps_gpu_fixes_recover_its_waits_at_the_jobs_own_speed() -> None:
    """Two synchronizations a step keep the host from running far ahead: a fix on
    the GPU's side recovers the time the host waits.  Under the profiler launch
    and dispatch ran 1.75x slower: the job itself does its own work sooner, and
    where the GPU's compute, as measured, outlasts that work the host waits at
    least for the rest.  Where the host's own work still outlasts the GPU's,
    the measured waits stand; a live account (no slowdown) keeps its waits."""
    shares = {"dispatch": 0.59, "python": 0.2, "launch": 0.12, "sync": 0.06, "ahead": 0.03}

    def ledger(busy: float, slowdown: float = 1.75) -> Ledger:
        return Ledger(
            window=Window("profiled steps", 4),
            step_s=0.053,
            shares=shares,
            gpu_busy=busy,
            gpu_idle=max(0.0, 1.0 - busy * 1.2),  # (at the job's own speed)
            gpu_copy=0.01,
            syncs_per_step=2.0,
            slowdown=slowdown,
        )

    own_work = 1.0 - 0.09 - (0.59 + 0.12) * (1 - 1 / 1.75)
    slack = ledger(0.8).gpu_slack
    assert slack is not None and abs(slack - (0.8 - 0.01 - own_work)) < 1e-9
    assert 0.8 - 0.01 - own_work > 0.09  # (more than the measured waits)
    # a GPU busy less than the host's own work: the measured waits
    for got in (ledger(0.5).gpu_slack, ledger(0.8, slowdown=1.0).gpu_slack):
        assert got is not None and abs(got - 0.09) < 1e-9
