"""The analyzer on real jobs: planted-bottleneck scenarios (bench/scenarios/)
recorded on an H100 with `gputui run`: an attach session each (steps, memory,
one 3-step capture) and a monitor recording of the whole run, joined by time as
the attach screen joins a job to its GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputui.analysis.engine import analyze
from gputui.analysis.evidence import JobEvidence, job_evidence
from gputui.client.hook import parse_event
from gputui.protocol.capture import CaptureResult
from gputui.protocol.schema import MemoryBatch, StepBatch
from gputui.recording.attach import read_attach_recording
from gputui.recording.replay import read_recording

DATA = Path(__file__).resolve().parents[1] / "data" / "h100"


@pytest.fixture(scope="module")
def monitor() -> list:
    _header, snapshots = read_recording(DATA / "monitor-scenarios.jsonl.gz")
    return list(snapshots)


def scenario(name: str, monitor: list) -> JobEvidence:
    recording = read_attach_recording(DATA / f"{name}.jsonl.gz")
    steps: list = []
    memory: list = []
    capture = None
    for _t, msg in recording.messages:
        event = parse_event(msg)
        if isinstance(event, StepBatch):
            steps.extend(event.steps)
        elif isinstance(event, MemoryBatch):
            memory.extend((s, steps[-1].index if steps else None) for s in event.samples)
        elif isinstance(event, CaptureResult):
            capture = event
    start, end = steps[0].t, steps[-1].t
    gpu = [s.devices[0] for s in monitor if start + 2 <= s.timestamp_s <= end]
    total = recording.hello["device"]["total_memory"]
    return job_evidence(steps, memory, capture, gpu, cuda=True, device_total_bytes=total)


@pytest.mark.parametrize(
    ("name", "cause"),
    [
        ("dataloader", "data.loader_wait"),
        ("elementwise", "gpu.memory_bound"),
        ("fp32_matmul", "precision.fp32_matmul"),
        ("host_sync", "sync.host_sync"),
        ("launch_bound", "launch.overhead"),
        ("pageable_copy", "copy.pageable"),
    ],
)
def test_the_planted_cause_ranks_first(name: str, cause: str, monitor: list) -> None:
    findings = analyze(scenario(name, monitor))
    top = findings[0]
    assert top.rule == cause, [(f.rule, f.impact_pct) for f in findings]
    assert top.severity in ("warn", "crit") and top.impact_pct and top.impact_pct >= 20


def test_a_leaking_job_is_told_it_leaks(monitor: list) -> None:
    findings = analyze(scenario("memory_growth", monitor))
    (growth,) = [f for f in findings if f.rule == "memory.growth"]
    assert growth.severity in ("warn", "crit") and "per step" in growth.evidence


def test_a_healthy_job_has_no_warning(monitor: list) -> None:
    findings = analyze(scenario("healthy", monitor))
    assert [(f.rule, f.severity) for f in findings if f.severity in ("warn", "crit")] == []


def test_the_elementwise_job_reads_memory_bound_in_the_monitor_and_the_job_view(
    monitor: list,
) -> None:
    """One definition of "memory-bound" for the monitor's --once and the job view:
    the elementwise job (DRAM about 88%, SM about 99%, tensor cores idle) is
    memory-bound in both, and "no tensor-core work" in neither."""
    from gputui.analysis.monitor_findings import findings as device_findings
    from gputui.recording.attach import read_attach_recording

    recording = read_attach_recording(DATA / "elementwise.jsonl.gz")
    steps = [
        s
        for _t, msg in recording.messages
        if isinstance(e := parse_event(msg), StepBatch)
        for s in e.steps
    ]
    start, end = steps[0].t + 2, steps[-1].t
    during = [s for s in monitor if start <= s.timestamp_s <= end]
    assert len(during) >= 10
    gpm = during[-1].devices[0].gpm
    assert gpm is not None and gpm.dram_bw_util_pct >= 80 and gpm.sm_activity_pct >= 90
    said = {f.rule for f in device_findings(during[-1], during)}
    assert "device.memory_bound" in said and "device.no_tensor_work" not in said
    job = {f.rule for f in analyze(scenario("elementwise", monitor))}
    assert "gpu.memory_bound" in job and "gpu.no_tensor_work" not in job
