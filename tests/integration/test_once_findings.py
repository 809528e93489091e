"""Findings in the printed reports: ``gputui attach ... --once [--json]`` (live
and from a recording) and ``gputui --once [--json]`` read the same analyzer as
the screens."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gputui import cli
from gputui.nvml import startup as nvml_open
from gputui.protocol.hello import DeviceInfo
from gputui.protocol.schema import Hello
from gputui.session.oneshot import JobReport
from gputui.session.reading import Collected, GpuSampling
from gputui.snapshot.model import DeviceSnapshot
from tests.helpers.fake_nvml import FakeNvml, h100

DATA = Path(__file__).resolve().parents[1] / "data" / "h100"
FINDING_KEYS = {
    "rule",
    "severity",
    "scope",
    "title",
    "evidence",
    "impact_pct",
    "impact_ms",
    "fix",
    "confirm",
    "source",
    "gpu",
    "failure_in_s",
    "bucket",
    "overlap_pct",
    "related",
}


def test_attach_replay_once_json_ranks_the_planted_cause_first(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A pageable-copy job recorded on an H100: the report of the recording names
    the pageable copies first, with the fix, as the screen does."""
    assert (
        cli.main(["attach", "--replay", str(DATA / "pageable_copy.jsonl.gz"), "--once", "--json"])
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    findings = doc["findings"]
    assert findings and set(findings[0]) == FINDING_KEYS
    assert findings[0]["rule"] == "copy.pageable"
    assert findings[0]["impact_pct"] >= 20 and "pin_memory" in findings[0]["fix"]
    impacts = [f["impact_pct"] for f in findings if f["impact_pct"] is not None]
    assert impacts == sorted(impacts, reverse=True)  # ranked by cost
    # the recording predates GPU samples: the report says which rules could not run
    assert doc["gpu_samples"] == 0
    assert any("GPU rules" in note for note in doc["analysis_notes"])


def test_a_recorded_cpu_job_in_numpy_gets_the_python_finding_first(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A CPU-only job whose step is a numpy sort in a user phase, recorded
    without a capture by a hook older than the sampler's split: its profile
    names the function, and the report leads with it (before: only the data
    finding, the numpy time "not split yet")."""
    recording = DATA.parent / "cpu_python.jsonl.gz"
    assert cli.main(["attach", "--replay", str(recording), "--once", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    first = doc["findings"][0]
    assert first["rule"] == "cpu.python" and first["severity"] == "crit"
    assert first["bucket"] == "host_code"  # the user phase augment holds it
    assert "sort (fromnumeric.py:1092)" in first["evidence"]
    assert "called from hot_numpy (train_cpu.py:64)" in first["evidence"]
    assert cli.main(["attach", "--replay", str(recording), "--once"]) == 0
    text = capsys.readouterr().out
    findings = text[text.index("findings (") :]
    assert findings.splitlines()[2].startswith("CRIT  Python outside torch holds the step")


def test_attach_replay_once_text_shows_the_findings(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["attach", "--replay", str(DATA / "dataloader.jsonl.gz"), "--once"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "findings (" in out and "ranked by the step time a fix could recover" in out
    assert "num_workers" in out  # the data-loading fix, in words


def test_a_short_session_says_the_analyzer_waits(capsys: pytest.CaptureFixture[str]) -> None:
    from gputui.protocol.schema import StepBatch, StepRecord
    from gputui.reports.attach import print_report, report_dict

    got = Collected(Hello(pid=7, argv=("python", "t.py")))
    got.add(
        StepBatch(
            tuple(
                StepRecord(index=i, t=float(i), wall=0.1, phases={"forward": 0.1}) for i in range(5)
            ),
            0,
            False,
        )
    )
    report = JobReport.of(7, got, 1000)
    doc = report_dict(report)
    assert doc["findings"] == []
    assert any("waits for 20 ordinary steps" in n for n in doc["analysis_notes"])
    print_report(report)
    assert "waits for 20 ordinary steps" in " ".join(capsys.readouterr().out.split())


class _Collector:
    """Stands in for NVML: two GPUs, the job's found by its UUID."""

    def __init__(self) -> None:
        self.samples = 0
        self.closed = False

    def sample(self) -> Any:
        self.samples += 1
        devices = tuple(
            DeviceSnapshot(index=i, name="H100", uuid=f"GPU-{i}", util_gpu_pct=90.0 + i)
            for i in range(2)
        )
        return type("S", (), {"devices": devices})()

    def close(self) -> None:
        self.closed = True


def test_the_jobs_gpu_is_sampled_by_uuid_while_the_report_is_collected() -> None:
    collector = _Collector()
    hello = Hello(pid=7, cuda_in_use=True, device=DeviceInfo(index=0, uuid="GPU-1"))
    got = Collected(hello)
    sampling = GpuSampling(got, 0.3, open_collector=lambda: collector)
    sampling.finish()
    assert len(got.gpu) >= 3 and {d.uuid for d in got.gpu} == {"GPU-1"}
    assert got.gpu_note is None and collector.closed


def test_a_cpu_job_or_no_driver_is_said_not_raised() -> None:
    cpu = Collected(Hello(pid=7))
    GpuSampling(cpu, 1.0).finish()
    assert cpu.gpu == [] and cpu.gpu_note == "the job uses no CUDA device"

    def no_driver() -> Any:
        from gputui.errors import NvmlUnavailable

        raise NvmlUnavailable("no NVIDIA driver: NVML Shared Library Not Found")

    got = Collected(Hello(pid=7, cuda_in_use=True, device=DeviceInfo(index=0, uuid="GPU-0")))
    GpuSampling(got, 5.0, open_collector=no_driver).finish()  # returns at once, not in 5 s
    assert got.gpu == [] and got.gpu_note and "no NVIDIA driver" in got.gpu_note


def test_monitor_once_reports_findings(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeNvml([h100(ecc_uncorrected=2)])
    monkeypatch.setattr(nvml_open, "import_pynvml", lambda: fake)
    assert cli.main(["--once", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (ecc,) = [f for f in doc["findings"] if f["rule"] == "device.ecc"]
    assert ecc["severity"] == "crit" and ecc["gpu"] == 0 and set(ecc) == FINDING_KEYS
    assert cli.main(["--once"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Findings (" in out and "uncorrected ECC errors" in out


def test_monitor_once_on_a_healthy_recording_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--demo", "--once", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["findings"] == []
    assert cli.main(["--demo", "--once"]) == 0
    assert "Findings: nothing to report" in capsys.readouterr().out


def test_replayed_capture_with_flops_prints_its_roofline(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # no measured ceilings here
    path = str(DATA / "transformer_flops.jsonl.gz")
    assert cli.main(["attach", "--replay", path, "--once", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["capture"]["options"]["flops"] and len(doc["capture"]["op_rows"]) == 50
    roof = doc["roofline"]
    assert roof["roof"]["source"] == "datasheet" and len(roof["ops"]) == 10
    for op in roof["ops"]:
        if op["flops"] and op["device_us"]:
            assert op["achieved_tflops"] == pytest.approx(op["flops"] / op["device_us"] / 1e6)
    assert cli.main(["attach", "--replay", path, "--once"]) == 0
    assert "Roofline: the top ops against H100 SXM5 80GB datasheet" in capsys.readouterr().out
