"""The analyzer: every registered rule over frozen evidence, findings ranked by
what they cost.

:func:`analyze` runs them all: the attach screen, ``attach --once``, JSON, the
exporter and ``gputui analyze`` call it, so every view agrees.  A rule that
raises is skipped and reported as an internal finding instead of hiding the
others.
"""

from __future__ import annotations

from collections.abc import Iterable

from gputui.analysis.evidence import JobEvidence, RanksEvidence
from gputui.analysis.finding import Finding, ranked
from gputui.analysis.registry import REGISTRY, Rule, run_rule

# the rule modules: importing one registers its rules (named once, here)
from gputui.analysis.rules import (  # noqa: F401 (imported to register)
    account,
    attention,
    capture,
    compile,
    data,
    device,
    efficiency,
    gpu,
    memory,
    ranks,
    roofline,
    steps,
)
from gputui.analysis.settle import settle


def job_rules() -> list[str]:
    return [rule_id for rule_id, r in REGISTRY.items() if r.scope == "job"]


def lacking(r: Rule, ev: JobEvidence) -> str:
    """What ``ev`` lacks of rule ``r``'s minimum evidence, in words ('' if nothing)."""
    return r.minimum.lacking(
        steps=ev.stats.count,
        gpu_samples=0 if ev.gpu is None else ev.gpu.samples,
        capture=ev.capture is not None,
        from_trace=ev.from_trace,
    )


def analyze(ev: JobEvidence, rules: Iterable[str] | None = None) -> list[Finding]:
    """Every job rule (or those named) over ``ev``, settled against its ledger
    (symptoms under their causes, every cost capped at its part of the step) and
    ranked by what they cost.  A rule whose minimum evidence ``ev`` lacks is not
    run: it says nothing (the views say what the analyzer waits for)."""
    out: list[Finding] = []
    for rule_id in rules if rules is not None else job_rules():
        if not lacking(REGISTRY[rule_id], ev):
            out.extend(run_rule(rule_id, ev))
    return settle(out, ev.ledger)


def analyze_ranks(ev: RanksEvidence) -> list[Finding]:
    """Every rule about the ranks of a multi-rank job, ranked by what they cost."""
    out: list[Finding] = []
    for rule_id, r in REGISTRY.items():
        if r.scope == "ranks":
            out.extend(run_rule(rule_id, ev))
    return ranked(out)
