"""The analyzer's registry: every rule, and how a finding's impact sets its
severity.

A rule is a pure function ``JobEvidence -> iterable of Finding`` registered with
:func:`rule` (the modules of :mod:`gputui.analysis.rules` register theirs on
import); it says nothing when its evidence is missing or too thin.
:mod:`gputui.analysis.engine` runs them.

Severity follows the estimated impact (the share of step time the fix could
recover): crit from :data:`CRIT_IMPACT_PCT`, warn from :data:`WARN_IMPACT_PCT`,
info below; rules without an impact estimate choose their severity themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gputui.analysis.finding import Finding
from gputui.analysis.severity import CRIT, INFO, WARN, Severity

if TYPE_CHECKING:  # the monitor's device rules load without the job's evidence
    from gputui.analysis.evidence import JobEvidence, RanksEvidence

#: impact (% of the step) from which a finding is a warning, and critical
WARN_IMPACT_PCT = 10.0
CRIT_IMPACT_PCT = 30.0

#: a rule's check: evidence (JobEvidence for a job rule, DeviceEvidence for a
#: device rule) in, findings out
Check = Callable[[Any], Iterable[Finding]]


@dataclass(frozen=True)
class Rule:
    """One rule: its id, family and check, where it comes from, what it needs, its scope."""

    id: str
    family: str  # data, sync, launch, copy, precision, kernels, memory, steps, gpu, comm
    check: Check
    #: where the rule comes from (a bottleneck table row, a tool's rule)
    source: str
    #: the evidence it needs: "steps", "memory", "capture", "gpu", "ranks",
    #: "snapshot" (for the docs)
    needs: tuple[str, ...]
    #: "job" (over JobEvidence: attach, analyze), "device" (over DeviceEvidence:
    #: the monitor, one GPU at a time) or "ranks" (over RanksEvidence: the local
    #: ranks of a multi-rank job)
    scope: str = "job"
    #: when it fires, with its thresholds, in words (docs/analyzer.md)
    trigger: str = ""
    #: rules whose warn or crit finding on the same evidence silences this one
    #: (they name the same time more precisely)
    suppressed_by: tuple[str, ...] = ()


REGISTRY: dict[str, Rule] = {}


def rule(
    rule_id: str,
    family: str,
    source: str,
    needs: tuple[str, ...],
    scope: str = "job",
    trigger: str = "",
    suppressed_by: tuple[str, ...] = (),
) -> Callable[[Check], Check]:
    """Register ``check`` as rule ``rule_id``."""

    def register(check: Check) -> Check:
        if rule_id in REGISTRY:
            raise ValueError(f"rule {rule_id} registered twice")
        REGISTRY[rule_id] = Rule(
            rule_id, family, check, source, needs, scope, trigger, suppressed_by
        )
        return check

    return register


def severity_of(impact_pct: float | None, floor: Severity = INFO) -> Severity:
    """The severity an impact estimate earns (never below ``floor``)."""
    order = {INFO: 0, WARN: 1, CRIT: 2}
    earned: Severity = INFO
    if impact_pct is not None:
        if impact_pct >= CRIT_IMPACT_PCT:
            earned = CRIT
        elif impact_pct >= WARN_IMPACT_PCT:
            earned = WARN
    return earned if order[earned] >= order[floor] else floor


def finding(
    ev: JobEvidence | RanksEvidence,
    rule_id: str,
    title: str,
    evidence: str,
    fix: str,
    confirm: str,
    *,
    share: float | None = None,
    scope: str = "job",
    severity: Severity | None = None,
    failure_in_s: float | None = None,
) -> Finding:
    """A finding of rule ``rule_id``; ``share`` (0..1 of the step) sets the impact
    in % and in ms per step (from the job's median step) and, unless given, the
    severity."""
    impact_pct = None if share is None else round(100.0 * max(0.0, min(1.0, share)), 1)
    step_s = ev.step_s
    impact_ms = None
    if impact_pct is not None and step_s:
        impact_ms = round(impact_pct / 100.0 * step_s * 1000.0, 2)
    return Finding(
        rule=rule_id,
        severity=severity or severity_of(impact_pct),
        scope=scope,
        title=title,
        evidence=evidence,
        fix=fix,
        confirm=confirm,
        source=REGISTRY[rule_id].source if rule_id in REGISTRY else "",
        impact_pct=impact_pct,
        impact_ms=impact_ms,
        failure_in_s=failure_in_s,
    )


def run_rule(rule_id: str, ev: object) -> list[Finding]:
    """Rule ``rule_id``'s findings over ``ev``; a rule that raises becomes one
    info finding that says so (a rule's bug must not hide the other findings)."""
    try:
        return list(REGISTRY[rule_id].check(ev))
    except Exception as exc:
        return [
            Finding(
                rule="analyzer.rule_failed",
                severity=INFO,
                scope="gputui",
                title=f"rule {rule_id} could not run",
                evidence=f"{type(exc).__name__}: {exc}",
                fix="report this to the gputui maintainers with the job's recording",
                source="gputui",
            )
        ]
