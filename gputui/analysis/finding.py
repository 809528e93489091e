"""One finding: what looks wrong, the numbers that show it, what it costs, and
what to change.  Every rule in gputui returns these, for every view: the
monitor, the attach screen, ``--once``, JSON, the exporter and ``gputui analyze``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from gputui.analysis.severity import ORDER, Severity
from gputui.protocol.value import ValueBase, value_class

#: how many recent monitor snapshots the GPU rules average over (one idle sample
#: between two busy ones must not raise a finding)
FINDINGS_WINDOW = 10


@value_class
class Finding(ValueBase):
    """One piece of advice.

    ``scope`` says what it is about, as shown ("GPU 0", "job", "rank 1",
    "kernel sm90_xmma_gemm…", "host"); ``gpu_index`` is set for findings about
    one GPU of the monitor.  ``impact_pct`` is the share of step time that the fix
    could recover (``impact_ms`` the same per step), None where a rule cannot say
    (a GPU that is lost, a counter that rose).  ``fix`` is the change to make,
    ``confirm`` what to look at after it, ``source`` where the rule comes from.
    """

    rule: str
    severity: Severity
    scope: str
    title: str
    evidence: str
    fix: str
    confirm: str = ""
    source: str = ""
    impact_pct: float | None = None
    impact_ms: float | None = None
    gpu_index: int | None = None
    #: seconds until the job fails at this rate (out of memory), where a rule can
    #: say: such a finding outranks every throughput finding
    failure_in_s: float | None = None
    #: the part of the step its cost lies in (a bucket of the step's time account,
    #: "issue" for launch + dispatch, "gpu_busy", "gpu_idle"; gputui.analysis.ledger)
    bucket: str | None = None
    #: symptoms of this cause: findings whose time lies in its part of the step,
    #: shown as its evidence rather than beside it
    related: tuple[Finding, ...] = ()
    #: the rule chose the severity itself (it does not follow the settled cost)
    severity_fixed: bool = False
    #: the part of the rule's own estimate (% of the step) that the other
    #: findings' costs already recover: settled away, so not in ``impact_pct``
    overlap_pct: float | None = None

    def evolve(self, **changes: Any) -> Finding:
        """A copy with ``changes``."""
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        """The JSON form (``findings`` in ``--json`` outputs; docs/json.md)."""
        return {
            "rule": self.rule,
            "severity": self.severity,
            "scope": self.scope,
            "title": self.title,
            "evidence": self.evidence,
            "impact_pct": _round(self.impact_pct),
            "impact_ms": _round(self.impact_ms),
            "fix": self.fix,
            "confirm": self.confirm,
            "source": self.source,
            "gpu": self.gpu_index,
            "failure_in_s": _round(self.failure_in_s),
            "bucket": self.bucket,
            "overlap_pct": _round(self.overlap_pct),
            "related": [
                {"rule": r.rule, "title": r.title, "evidence": r.evidence} for r in self.related
            ],
        }


def _round(value: float | None) -> float | None:
    if value is None or value != value or value in (float("inf"), float("-inf")):
        return None
    return round(value, 2)


def ranked(findings: Iterable[Finding]) -> list[Finding]:
    """Findings in the order they are shown: what will make the job fail first
    (out of memory in N s: the soonest first); then crit (a lost GPU outranks any
    cost); then by what the fix could recover, the largest share of the step first,
    findings without an estimate after those with one; then warn before info."""

    def key(f: Finding) -> tuple[float, int, float, int]:
        impact = f.impact_pct if f.impact_pct is not None and f.impact_pct == f.impact_pct else -1.0
        fails = f.failure_in_s
        urgent = fails if fails is not None and fails == fails else float("inf")
        return (urgent, 0 if f.severity == "crit" else 1, -impact, ORDER[f.severity])

    return sorted(findings, key=key)
