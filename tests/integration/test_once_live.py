"""``gputui --once`` on the live path, with NVML faked: instant values by default,
rates over ``--window``, and the first sample taken while the output module loads."""

from __future__ import annotations

import json

import pytest

from gputui import cli
from gputui.collectors import nvml
from gputui.reports.monitor import RATES_HINT
from tests.helpers.fake_nvml import GIB, FakeNvml, FakeProcess, h100


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    nv = FakeNvml([h100(processes=[FakeProcess(4242, used_gpu_memory=3 * GIB)])])
    monkeypatch.setattr(nvml, "_import_pynvml", lambda: nv)
    return nv


def test_once_reads_instant_values_and_says_how_to_get_rates(
    fake: FakeNvml, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["--once"]) == 0
    out = capsys.readouterr().out
    assert "H100" in out and "4242" in out
    assert " ".join(RATES_HINT.split()) in " ".join(out.split())
    assert "tensor" not in out  # no GPM line without a window
    assert fake.gpm_pairs == []
    assert fake.shutdown_count == 1


def test_once_with_a_window_has_gpm_rates(
    fake: FakeNvml, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["--once", "--window", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "tensor" in out and "Rates (GPM" not in out
    assert len(fake.gpm_pairs) == 1


def test_once_json_says_which_window_rates_span(
    fake: FakeNvml, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["--once", "--json"]) == 0
    instant = json.loads(capsys.readouterr().out)
    assert instant["source"] == {"label": "live", "is_recording": False, "rate_window_s": None}
    assert instant["devices"][0]["gpm"] is None
    assert instant["host"]["cpu_pct"] is None
    assert cli.main(["--once", "--json", "--window", "0.15"]) == 0
    windowed = json.loads(capsys.readouterr().out)
    assert windowed["source"]["rate_window_s"] == 0.15
    assert windowed["devices"][0]["gpm"]["tensor_activity_pct"] is not None
    assert windowed["host"]["cpu_pct"] is not None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--window", "0.5"], "--window needs --once"),
        (["--once", "--window", "0.05"], "must be between 0.1 and 60"),
        (["--once", "--window", "soon"], "not a number"),
    ],
)
def test_bad_windows_are_one_line_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_process_without_a_utilization_sample_reads_na_not_0(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """NVML's first read has no per-process sample yet: the busiest job read
    "SM 0%"; nothing was measured, so it is N/A (null in the JSON)."""
    nv = FakeNvml([h100(processes=[FakeProcess(4242, used_gpu_memory=3 * GIB, sm_util=None)])])
    monkeypatch.setattr(nvml, "_import_pynvml", lambda: nv)
    assert cli.main(["--once"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("GPU") and "PID" in line)
    row = next(line for line in lines if "4242" in line)
    sm = header.index("SM")
    assert row[sm - 1 : sm + 2] == "N/A"
    assert all(line == line.rstrip() for line in lines)  # no trailing spaces
    assert cli.main(["--once", "--json"]) == 0
    (proc,) = json.loads(capsys.readouterr().out)["processes"]
    assert proc["sm_pct"] is None
