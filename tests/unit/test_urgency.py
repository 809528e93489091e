"""Urgency ranks first: a job that will run out of memory in seconds hears that
before any throughput advice, however large its cost."""

from __future__ import annotations

from gputui.analysis import engine
from gputui.analysis.finding import Finding, ranked
from tests.helpers.evidence import GIB, capture, evidence, kernel, memory, steps


def test_a_finding_with_a_time_to_failure_outranks_every_throughput_finding() -> None:
    fast = Finding("x.costly", "crit", "job", "t", "e", "f", impact_pct=90.0)
    oom = Finding("memory.growth", "warn", "job", "t", "e", "f", failure_in_s=300.0)
    sooner = Finding("memory.other", "warn", "job", "t", "e", "f", failure_in_s=30.0)
    assert [f.rule for f in ranked([fast, oom, sooner])] == [
        "memory.other",
        "memory.growth",
        "x.costly",
    ]
    assert oom.to_json()["failure_in_s"] == 300.0 and fast.to_json()["failure_in_s"] is None


def test_a_leak_that_fills_the_device_soon_comes_before_fp32_advice() -> None:
    # 100 steps/s (10 ms steps), +40 MiB a step on an 80 GiB device: full in seconds
    walls = steps(n=400, phases={"forward": 0.004, "backward": 0.006})
    mem = memory([(2 * GIB + i * 40 * 2**20, i) for i in range(0, 400, 4)])
    sgemm = "ampere_sgemm_128x64_tn"
    cap = capture([kernel(sgemm, "gemm", 100, 80_000.0)], busy_us=95_000.0)
    found = engine.analyze(evidence(walls, mem, cap))
    rules = [f.rule for f in found]
    assert "precision.fp32_matmul" in rules, rules
    assert rules[0] == "memory.growth", rules
    assert found[0].failure_in_s is not None and found[0].failure_in_s < 600
