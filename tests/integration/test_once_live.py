"""``gputui --once`` on the live path, with NVML faked: instant values by default,
rates over ``--window``, and the first sample taken while the output module loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputui import cli
from gputui.nvml import startup as nvml_open
from gputui.reports.monitor import RATES_HINT
from tests.helpers.fake_nvml import GIB, FakeNvml, FakeProcess, h100

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    nv = FakeNvml([h100(processes=[FakeProcess(4242, used_gpu_memory=3 * GIB)])])
    monkeypatch.setattr(nvml_open, "import_pynvml", lambda: nv)
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
    monkeypatch.setattr(nvml_open, "import_pynvml", lambda: nv)
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


#: NVML functions behind :data:`nvml_open.TEXT_ONE_SHOT_SKIPS` (values the text
#: report neither prints nor hands to a device rule)
NOT_FOR_THE_TEXT = (
    "nvmlDeviceGetMaxClockInfo",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetFanSpeed",
    "nvmlDeviceGetPerformanceState",
    "nvmlDeviceGetBAR1MemoryInfo",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetComputeMode",
    "nvmlDeviceGetPersistenceMode",
    "nvmlDeviceGetFieldValues",
    "nvmlGpmQueryDeviceSupport",
    "nvmlGpmSampleGet",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlSystemGetNVMLVersion",
)
#: what the text report prints or its device rules read: asked in every mode
FOR_THE_TEXT = (
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetEccMode",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetProcessUtilization",
)


@pytest.mark.parametrize(
    ("argv", "skips"),
    [(["--once"], True), (["--once", "--json"], False), (["--once", "--window", "0.1"], False)],
    ids=["text", "json", "text-window"],
)
def test_the_text_one_shot_makes_only_the_queries_it_shows(
    fake: FakeNvml, argv: list[str], skips: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """The text report of one instant reading does not ask NVML for what it does
    not print; ``--json`` and a windowed report (the controls) still do."""
    assert cli.main(argv) == 0
    capsys.readouterr()
    asked = {name for name in NOT_FOR_THE_TEXT if fake.calls[name]}
    assert asked == (set() if skips else set(NOT_FOR_THE_TEXT))
    assert all(fake.calls[name] for name in FOR_THE_TEXT)


def test_the_text_one_shot_still_shows_the_power_limit_and_ecc_errors(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    nv = FakeNvml([h100(ecc_uncorrected=3)])
    monkeypatch.setattr(nvml_open, "import_pynvml", lambda: nv)
    assert cli.main(["--once"]) == 0
    out = capsys.readouterr().out
    assert "ECC uncorrected 3" in out
    assert "/700W" in out.replace(" ", "")


def _keys(doc: object, at: str = "") -> set[str]:
    """Every key path of a JSON document (a list's first item stands for all)."""
    if isinstance(doc, dict):
        out = set()
        for key, value in doc.items():
            out.add(f"{at}.{key}")
            out |= _keys(value, f"{at}.{key}")
        return out
    if isinstance(doc, list) and doc:
        return _keys(doc[0], f"{at}[]")
    return set()


def test_the_live_json_has_every_key_of_the_demos(
    fake: FakeNvml, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--once --json`` live keeps the keys the golden document has (the demo's
    one-shot, checked against the schema in test_cli), with the values the text
    one-shot skips read."""
    assert cli.main(["--once", "--json"]) == 0
    live = json.loads(capsys.readouterr().out)
    golden = json.loads((GOLDEN / "once_demo.json").read_text())
    # the top level, the source, the host, and each device's and process's own
    # keys; inside what is null here (GPM without a window, MIG, containers) not
    wanted = {key for key in _keys(golden) if key.count(".") <= 2}
    assert len(wanted) > 80  # the control: the comparison has something to compare
    assert wanted - _keys(live) == set()
    device = live["devices"][0]
    for key in ("clock_sm_max_mhz", "energy_j", "pcie_gen_max", "bar1_total_bytes", "temp_mem_c"):
        assert device[key] is not None, key
    assert live["nvml_version"] is not None


def test_the_one_shot_leaving_the_process_does_not_shut_nvml_down(
    fake: FakeNvml, capsys: pytest.CaptureFixture[str]
) -> None:
    """``gputui --once`` exits right after: the kernel ends the session; called
    as a function (the control) it shuts NVML down."""
    assert cli.main(["--once"], leaving=True) == 0
    assert fake.shutdown_count == 0
    assert cli.main(["--once"]) == 0
    assert fake.shutdown_count == 1


def test_nvml_that_will_not_start_is_one_line_from_the_early_open(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    nv = FakeNvml([h100()])
    nv.fail("nvmlInit", 9)  # NVML_ERROR_DRIVER_NOT_LOADED
    monkeypatch.setattr(nvml_open, "import_pynvml", lambda: nv)
    assert cli.main(["--once"]) == 2
    err = capsys.readouterr().err
    assert "driver is not loaded" in err and len(err.strip().splitlines()) == 1


def test_pynvml_missing_is_one_line_from_the_early_open(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def missing() -> None:
        raise nvml_open.NvmlUnavailable("nvidia-ml-py is not installed (pip install nvidia-ml-py)")

    monkeypatch.setattr(nvml_open, "import_pynvml", missing)
    assert cli.main(["--once"]) == 2
    assert "nvidia-ml-py is not installed" in capsys.readouterr().err


def test_a_gpu_the_process_may_not_open_is_hidden_on_the_early_open(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """nvmlDeviceGetHandleByIndex refused (cgroups): the GPU is left out, as the
    collector does when it opens NVML itself."""
    nv = FakeNvml([h100(), h100(uuid="GPU-other")])
    nv.fail("nvmlDeviceGetHandleByIndex", 4, device=None, times=1)  # NO_PERMISSION
    monkeypatch.setattr(nvml_open, "import_pynvml", lambda: nv)
    assert cli.main(["--once", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["uuid"] for d in doc["devices"]] == ["GPU-other"]


@pytest.mark.parametrize("screen", [True, False], ids=["screen", "json-record-export"])
def test_the_monitors_screen_does_not_read_energy_bar1_or_each_core(
    fake: FakeNvml, screen: bool
) -> None:
    """The screen shows none of them; ``--json``, recordings and the exporter (the
    control) read energy and BAR1 on the slow cadence, and each core's CPU time."""
    from gputui.sources.live import open_live

    source = open_live(screen=screen)
    assert source._host.per_core is not screen  # type: ignore[attr-defined]
    try:
        for _ in range(12):  # past the slow cadence (every tenth sample)
            source.sample()
    finally:
        source.close()
    unread = {"nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetBAR1MemoryInfo"}
    assert {name for name in unread if fake.calls[name]} == (set() if screen else unread)
    assert fake.calls["nvmlDeviceGetPowerUsage"] >= 12
