"""The analyzer's registry: every rule, and how a finding's impact sets its
severity.

A rule is a pure function ``JobEvidence -> iterable of Finding`` registered with
:func:`rule` (the modules of :mod:`gputui.analysis.rules` register theirs on
import).  Each declares the least evidence it needs (:class:`Minimum`: ordinary
steps, samples of the GPU, a capture or trace); the engine does not run a rule
on less, so no rule warns from a handful of samples.  Its trigger names its
thresholds as ``{key}`` placeholders of :mod:`gputui.analysis.thresholds`,
filled in here.  :mod:`gputui.analysis.engine` runs them.

Severity follows the estimated impact (the share of step time the fix could
recover): crit from :data:`CRIT_IMPACT_PCT`, warn from :data:`WARN_IMPACT_PCT`,
info below; rules without an impact estimate choose their severity themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from gputui.analysis import thresholds
from gputui.analysis.finding import Finding
from gputui.analysis.severity import CRIT, INFO, WARN, Severity
from gputui.protocol.value import ValueBase, value_class

if TYPE_CHECKING:  # the monitor's device rules load without the job's evidence
    from gputui.analysis.evidence import JobEvidence, RanksEvidence

#: impact (% of the step) from which a finding is a warning, and critical
WARN_IMPACT_PCT = 10.0
CRIT_IMPACT_PCT = 30.0

#: a rule's check: evidence (JobEvidence for a job rule, DeviceEvidence for a
#: device rule) in, findings out
Check = Callable[[Any], Iterable[Finding]]

#: ordinary steps a live job's rules wait for, and samples of its GPU
MIN_STEPS = int(thresholds.value("min.steps"))
MIN_GPU_SAMPLES = int(thresholds.value("min.gpu_samples"))


@value_class
class Minimum(ValueBase):
    """The least evidence a rule needs before it may speak: ``steps`` ordinary
    steps of a live job (a trace's profiled steps are all there will be and
    stand for them, unless ``trace`` is False), ``gpu_samples`` samples of the
    GPU, a capture (live) or a trace."""

    steps: int = 0
    gpu_samples: int = 0
    capture: bool = False
    trace: bool = True

    @classmethod
    def of(cls, needs: Iterable[str]) -> Minimum:
        """The minimum a rule registered without one gets from its ``needs``."""
        wanted = set(needs)
        gpu = "gpu" in wanted
        return cls(
            steps=MIN_STEPS if wanted & {"steps", "gpu"} else 0,
            gpu_samples=MIN_GPU_SAMPLES if gpu else 0,
            capture="capture" in wanted,
        )

    def lacking(
        self, *, steps: int, gpu_samples: int, capture: bool, from_trace: bool = False
    ) -> str:
        """What the evidence lacks for this minimum, in words ('' when none)."""
        if self.capture and not capture:
            return "no capture or trace"
        if self.steps:
            if from_trace and not self.trace:
                return f"a trace's {steps} profiled steps (it needs {self.steps} live steps)"
            needed = 1 if from_trace else self.steps
            if steps < needed:
                return f"{steps} of {needed} ordinary steps"
        if gpu_samples < self.gpu_samples:
            return f"{gpu_samples} of {self.gpu_samples} GPU samples"
        return ""

    @property
    def words(self) -> str:
        """``20 ordinary steps, 3 GPU samples``; '' when the rule needs nothing."""
        parts = []
        if self.steps:
            parts.append(
                f"{self.steps} ordinary steps" + ("" if self.trace else " (not from a trace)")
            )
        if self.gpu_samples:
            parts.append(f"{self.gpu_samples} GPU samples")
        if self.capture:
            parts.append("a capture or trace")
        return ", ".join(parts)


@value_class
class Rule(ValueBase):
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
    #: rules whose warn or crit finding on the same evidence takes this one under
    #: it as evidence (they name the same time more precisely), whatever part of
    #: the step either names
    symptom_of: tuple[str, ...] = ()
    #: the least evidence it speaks from (the engine enforces it)
    minimum: Minimum = Minimum()
    #: the keys of the thresholds its trigger names (gputui.analysis.thresholds)
    thresholds: tuple[str, ...] = ()
    #: the part of the step its cost lies in (gputui.analysis.ledger: an account
    #: bucket, "issue", "gpu_busy", "gpu_idle", "outside"); None: no time (a
    #: failure, a lost GPU, advice)
    bucket: str | None = None
    #: an explanation rather than a cause (slow steps, idle gaps, a dominant
    #: kernel): when a cause's warn or crit finding names the same time, it goes
    #: under that cause as evidence
    symptom: bool = False


REGISTRY: dict[str, Rule] = {}


def rule(
    rule_id: str,
    family: str,
    source: str,
    needs: tuple[str, ...],
    scope: str = "job",
    trigger: str = "",
    symptom_of: tuple[str, ...] = (),
    *,
    minimum: Minimum | None = None,
    bucket: str | None = None,
    symptom: bool = False,
) -> Callable[[Check], Check]:
    """Register ``check`` as rule ``rule_id``.  ``trigger`` may name thresholds
    as ``{key}`` (filled from the table); ``minimum`` defaults to what
    ``needs`` implies (:meth:`Minimum.of`)."""

    def register(check: Check) -> Check:
        if rule_id in REGISTRY:
            raise ValueError(f"rule {rule_id} registered twice")
        REGISTRY[rule_id] = Rule(
            rule_id,
            family,
            check,
            source,
            needs,
            scope,
            thresholds.fill(trigger),
            symptom_of,
            Minimum.of(needs) if minimum is None else minimum,
            thresholds.keys_in(trigger),
            bucket,
            symptom,
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
    bucket: str | None = None,
) -> Finding:
    """A finding of rule ``rule_id``; ``share`` (0..1 of the step) sets the impact
    in % and in ms per step (of the job's mean step: the engine settles both
    against the ledger, gputui.analysis.ledger) and, unless given, the severity.
    ``bucket``: the part of the step its time lies in, where the rule's own
    (registered) part does not say."""
    impact_pct = None if share is None else round(100.0 * max(0.0, min(1.0, share)), 1)
    step_s = ev.mean_step_s
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
        bucket=bucket,
        severity_fixed=severity is not None,
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
