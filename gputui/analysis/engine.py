"""The analyzer: every registered rule over frozen evidence, findings ranked by
what they cost.

:func:`analyze` runs them all: the attach screen, ``attach --once``, JSON, the
exporter and ``gputui analyze`` call it, so every view agrees.  A rule that
raises is skipped and reported as an internal finding instead of hiding the
others.
"""

from __future__ import annotations

from collections.abc import Iterable

# The rule modules register their rules on import.
from gputui.analysis.evidence import JobEvidence, RanksEvidence
from gputui.analysis.finding import Finding, ranked
from gputui.analysis.registry import REGISTRY
from gputui.analysis.rules import capture, device, gpu, memory, ranks, roofline, steps
from gputui.analysis.rules.device import DeviceEvidence
from gputui.analysis.severity import INFO, ORDER

#: the modules whose rules the engine runs (imported above for that)
RULE_MODULES = (capture, device, gpu, memory, ranks, roofline, steps)


def _run(rule_id: str, ev: object) -> list[Finding]:
    try:
        return list(REGISTRY[rule_id].check(ev))
    except Exception as exc:  # a rule's bug must not hide the other findings
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


def job_rules() -> list[str]:
    return [rule_id for rule_id, r in REGISTRY.items() if r.scope == "job"]


def analyze(ev: JobEvidence, rules: Iterable[str] | None = None) -> list[Finding]:
    """Every job rule (or those named) over ``ev``, ranked by what they cost."""
    out: list[Finding] = []
    for rule_id in rules if rules is not None else job_rules():
        out.extend(_run(rule_id, ev))
    return ranked(out)


def analyze_ranks(ev: RanksEvidence) -> list[Finding]:
    """Every rule about the ranks of a multi-rank job, ranked by what they cost."""
    out: list[Finding] = []
    for rule_id, r in REGISTRY.items():
        if r.scope == "ranks":
            out.extend(_run(rule_id, ev))
    return ranked(out)


def analyze_devices(evidence: Iterable[DeviceEvidence]) -> list[Finding]:
    """Every device rule over each GPU: most severe first, then by GPU (the
    monitor has no step time to rank costs by)."""
    out: list[Finding] = []
    device_rules = [rule_id for rule_id, r in REGISTRY.items() if r.scope == "device"]
    for ev in evidence:
        for rule_id in device_rules:
            out.extend(_run(rule_id, ev))
    out.sort(key=lambda f: (ORDER[f.severity], -1 if f.gpu_index is None else f.gpu_index))
    return out
