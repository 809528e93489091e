"""The analyzer's finding for a memory snapshot with a growing allocation site."""

from __future__ import annotations

from gputui.analysis import engine
from gputui.analysis.finding import Finding
from tests.helpers import memsnap as h
from tests.helpers.evidence import GIB, evidence, memory


def leak_findings(**kw: object) -> list[Finding]:
    return [f for f in engine.analyze(evidence(**kw)) if f.rule == "memory.leak_site"]


def test_the_finding_names_the_site_and_the_fix() -> None:
    (f,) = leak_findings(memory_snapshot=h.result(h.planted_leak(leak_bytes=4 * 2**20)))
    assert f.severity == "warn"
    assert "leaky.py:42 (remember)" in f.evidence and "+4.0MiB per step" in f.evidence
    assert "steps 100..104" in f.evidence and "5 kept at the end" in f.evidence
    assert "loss.item() / .detach()" in f.fix and "leaky.py:42" in f.fix
    assert "--memory-snapshot" in f.confirm


def test_it_is_critical_when_the_device_fills_soon() -> None:
    # 1 GiB kept per step at ~28 steps/s, 2 GiB left on the device: seconds
    snap = h.result(h.planted_leak(leak_bytes=GIB))
    mem = memory([(6 * GIB, 10)], reserved=8 * GIB)
    (f,) = leak_findings(memory_snapshot=snap, mem=mem, total=10 * GIB)
    assert f.severity == "crit" and "full in about" in f.evidence


def test_quiet_without_a_snapshot_or_a_growing_site() -> None:
    assert leak_findings() == []
    assert leak_findings(memory_snapshot=h.result(h.planted_leak(leak=False))) == []
    # too few steps for a verdict: no finding either
    assert leak_findings(memory_snapshot=h.result(h.planted_leak(steps=2))) == []


def test_a_site_without_python_frames_is_said_so() -> None:
    snap = h.Snapshot()
    snap.marker()
    for _ in range(4):
        snap.alloc(2**20, [])
        snap.marker()
    (f,) = leak_findings(memory_snapshot=h.result(snap.build()))
    assert "no Python frame" in f.evidence
