"""The engine enforces each rule's declared minimum evidence: a rule speaks from
its minimum, and says nothing from one sample, step or capture less."""

from __future__ import annotations

import dataclasses

import pytest

from gputui.analysis import engine
from gputui.analysis.evidence import JobEvidence
from gputui.analysis.finding import Finding
from gputui.analysis.registry import MIN_GPU_SAMPLES, MIN_STEPS, REGISTRY, Minimum, rule
from gputui.analysis.steps import WARMUP_STEPS
from tests.helpers.evidence import capture, evidence, gpu_samples, kernel, steps

DEFAULT = {"forward": 0.01, "backward": 0.02, "optimizer": 0.004, "other": 0.002}


def fired(rule_id: str, ev: JobEvidence) -> list[Finding]:
    return [f for f in engine.analyze(ev) if f.rule == rule_id]


def loader_steps(ordinary: int) -> list:
    return steps(n=WARMUP_STEPS + ordinary, phases={**DEFAULT, "data": 0.02})


def spiky(n: int) -> list:
    return [s for k in range(n) for s in gpu_samples(1, util_gpu_pct=10.0 if k % 2 else 90.0)]


@pytest.mark.parametrize(
    ("rule_id", "enough", "one_less"),
    [
        # ordinary steps: the first WARMUP_STEPS do not count
        (
            "data.loader_wait",
            lambda: evidence(loader_steps(MIN_STEPS)),
            lambda: evidence(loader_steps(MIN_STEPS - 1)),
        ),
        # samples of the job's GPU
        (
            "gpu.memory_bound",
            lambda: evidence(gpu=gpu_samples(MIN_GPU_SAMPLES, dram=85.0, tensor=0.0)),
            lambda: evidence(gpu=gpu_samples(MIN_GPU_SAMPLES - 1, dram=85.0, tensor=0.0)),
        ),
        # utilization swings need more samples than the other GPU rules: a handful
        # taken during a capture swing by themselves
        ("gpu.spiky", lambda: evidence(gpu=spiky(10)), lambda: evidence(gpu=spiky(9))),
        # a capture or a trace
        (
            "precision.fp32_matmul",
            lambda: evidence(cap=capture([kernel("ampere_sgemm_128x64_nn", "gemm", 100, 80e3)])),
            lambda: evidence(),
        ),
    ],
)
def test_a_rule_speaks_from_its_minimum_and_not_below(rule_id, enough, one_less) -> None:  # type: ignore[no-untyped-def]
    assert [f.severity for f in fired(rule_id, enough())] in (["warn"], ["crit"])
    assert fired(rule_id, one_less()) == []


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
