"""The engine enforces each rule's declared minimum evidence (the boundaries of
the minimum steps and GPU samples are in test_rule_boundaries.py): a trace's
steps, rules registered the old way, and what is lacking in words."""

from __future__ import annotations

import dataclasses

import pytest

from gputui.analysis import engine
from gputui.analysis.evidence import JobEvidence
from gputui.analysis.finding import Finding
from gputui.analysis.registry import MIN_GPU_SAMPLES, MIN_STEPS, REGISTRY, Minimum, rule
from tests.helpers.evidence import evidence, steps

DEFAULT = {"forward": 0.01, "backward": 0.02, "optimizer": 0.004, "other": 0.002}


def fired(rule_id: str, ev: JobEvidence) -> list[Finding]:
    return [f for f in engine.analyze(ev) if f.rule == rule_id]


def test_slow_steps_of_a_trace_are_not_outliers() -> None:
    """A trace's few profiled steps stand for the steps of most rules, but not of
    the outlier and warm-up rules: profiling itself makes steps slow."""
    walls = [0.18 if k % 10 == 5 else 0.036 for k in range(60)]
    live = evidence(steps(walls=walls))
    assert fired("steps.slow_outliers", live)
    traced = dataclasses.replace(live, from_trace=True)
    assert fired("steps.slow_outliers", traced) == []
    assert REGISTRY["steps.slow_outliers"].minimum == Minimum(steps=MIN_STEPS, trace=False)


def test_the_minimum_follows_needs_for_rules_registered_without_one() -> None:
    """A rule registered the old way (needs only) gets the minimum its needs imply."""
    assert Minimum.of(("capture",)) == Minimum(capture=True)
    assert Minimum.of(("steps",)) == Minimum(steps=MIN_STEPS)
    assert Minimum.of(("gpu",)) == Minimum(steps=MIN_STEPS, gpu_samples=MIN_GPU_SAMPLES)
    assert REGISTRY["memory.malloc_in_loop"].minimum == Minimum(capture=True)


def test_a_rule_registered_the_old_way_still_registers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gputui.analysis.registry.REGISTRY", dict(REGISTRY))
    from gputui.analysis import registry

    @rule("test.old_style", "kernels", "a test", ("capture",), "job", "capture: always", ())
    def old(_ev: JobEvidence) -> list[Finding]:
        return []

    r = registry.REGISTRY["test.old_style"]
    assert r.minimum.capture and r.trigger == "capture: always" and r.thresholds == ()


def test_what_is_lacking_is_said() -> None:
    need = Minimum(steps=MIN_STEPS, gpu_samples=MIN_GPU_SAMPLES)
    assert (
        need.lacking(steps=12, gpu_samples=5, capture=False) == f"12 of {MIN_STEPS} ordinary steps"
    )
    assert need.lacking(steps=40, gpu_samples=1, capture=False) == (
        f"1 of {MIN_GPU_SAMPLES} GPU samples"
    )
    assert need.lacking(steps=3, gpu_samples=5, capture=True, from_trace=True) == ""
    assert Minimum(capture=True).lacking(steps=0, gpu_samples=0, capture=False)
