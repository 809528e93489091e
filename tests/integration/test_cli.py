from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from gputui import report
from gputui.cli import main
from gputui.collectors.replay import ReplaySource
from gputui.commands.monitor import DEMO_BANNER
from tests.helpers.deadlines import RUN_S

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, TZ="UTC", COLUMNS="80", NO_COLOR="1")
    return subprocess.run(
        [sys.executable, "-m", "gputui", *args],
        capture_output=True,
        text=True,
        timeout=RUN_S,
        env=env,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--interval", "0.05"], "must be between 0.1 and 30 s"),
        (["--interval", "abc"], "not a number of seconds"),
        (["--speed", "0"], "must be between 0.01 and 1000"),
        (["--json"], "--json needs --once"),
        (["--replay", "/nonexistent/rec.gz", "--once"], "recording not found"),
        (["--bogus"], "unrecognized arguments"),
        (["--demo", "--replay", "x"], "not allowed with"),
        (["record"], "required: -o/--output"),
        (["record", "-o", "x.gz", "--duration", "-1"], "must be between 0.1 and"),
        (["attach", "1", "--flops"], "--flops is a capture option: add --once --capture N"),
        (["attach", "1", "--once", "--shapes"], "--shapes is a capture option"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_corrupt_recording_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00not really gzip")
    proc = run_cli("--replay", str(bad), "--once")
    assert proc.returncode == 2
    assert "corrupt" in proc.stderr and "Traceback" not in proc.stderr


def test_no_driver_says_what_is_missing_and_suggests_demo() -> None:
    from gputui.collectors.nvml import probe

    if probe() is None:
        pytest.skip("an NVIDIA driver is present here")
    proc = run_cli("--once")
    assert proc.returncode == 2
    assert "--demo" in proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_demo_if_no_gpu_falls_back_to_the_recording() -> None:
    from gputui.collectors.nvml import probe

    if probe() is None:
        pytest.skip("an NVIDIA driver is present here")
    proc = run_cli("--demo-if-no-gpu", "--once")
    assert proc.returncode == 0, proc.stderr
    assert "DEMO" in proc.stdout and "H100" in proc.stdout


def _render_demo_once(width: int = 80) -> str:
    source = ReplaySource.demo()
    snapshot = source.sample()
    console = Console(width=width, record=True, color_system=None, file=open(os.devnull, "w"))
    console.print(report.render(snapshot, source, DEMO_BANNER))
    return console.export_text()


def test_once_from_demo_matches_golden_and_fits_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        text = _render_demo_once()
    finally:
        monkeypatch.undo()
        time.tzset()
    assert max(len(line) for line in text.splitlines()) <= 80
    golden = GOLDEN / "once_demo.txt"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


def test_once_subprocess_prints_demo() -> None:
    proc = run_cli("--demo", "--once")
    assert proc.returncode == 0, proc.stderr
    assert DEMO_BANNER in proc.stdout
    assert "H100" in proc.stdout


def test_json_from_demo_matches_golden_and_schema() -> None:
    proc = run_cli("--demo", "--once", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == 1
    assert doc["source"] == {
        "label": ReplaySource.demo().label,
        "is_recording": True,
        "rate_window_s": None,
    }
    assert {"timestamp_s", "host", "devices", "processes", "driver_version"} <= doc.keys()
    device = doc["devices"][0]
    for key in ("index", "uuid", "util_gpu_pct", "mem_used_bytes", "gpm", "throttle_reasons"):
        assert key in device
    golden = GOLDEN / "once_demo.json"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(proc.stdout)
    assert doc == json.loads(golden.read_text())


def test_replay_of_a_recording_once(tmp_path: Path) -> None:
    from gputui.collectors.replay import RecordingWriter
    from tests.unit.test_replay import make_snapshot

    path = tmp_path / "r.jsonl.gz"
    writer = RecordingWriter(path, interval_s=1.0)
    writer.write(make_snapshot(1_700_000_000.0))
    writer.close()
    proc = run_cli("--replay", str(path), "--once")
    assert proc.returncode == 0, proc.stderr
    assert "REPLAY" in proc.stdout and "train.py" in proc.stdout
    assert "PWR CAP" in proc.stdout


def _imported_by(*argv: str, extra_path: Path | None = None) -> set[str]:
    """The top-level modules ``python -m gputui ARGV`` imported (``-X importtime``)."""
    return _imported_by_python("-m", "gputui", *argv, extra_path=extra_path)


def _imported_by_python(*argv: str, extra_path: Path | None = None) -> set[str]:
    env = dict(os.environ)
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(extra_path), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *argv],
        capture_output=True,
        text=True,
        timeout=RUN_S,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


def _fake_attrs(where: Path) -> Path:
    """An importable `attr` package, as on machines with attrs installed."""
    (where / "attr").mkdir()
    (where / "attr" / "__init__.py").write_text("ib = 'fake attrs'\n")
    return where


def test_once_imports_rich_but_not_textual_nor_an_installed_attrs(tmp_path: Path) -> None:
    imported = _imported_by("--demo", "--once", extra_path=_fake_attrs(tmp_path))
    assert "rich" in imported
    assert "textual" not in imported and "attr" not in imported


def test_without_attrs_hides_attrs_from_rich_pretty_then_restores_it(tmp_path: Path) -> None:
    # rich.pretty imports attrs at its top in every Rich version
    code = (
        "import sys\n"
        "from gputui.commands.monitor import without_attrs\n"
        "with without_attrs():\n"
        "    import rich.pretty\n"
        "assert 'attr' not in sys.modules, 'attr left behind'\n"
        "import attr\n"
        "print(rich.pretty._has_attrs, attr.ib)\n"
    )
    probe = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=RUN_S,
        env={**os.environ, "PYTHONPATH": str(_fake_attrs(tmp_path))},
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split() == ["False", "fake", "attrs"]


def test_once_json_imports_no_rich() -> None:
    imported = _imported_by("--demo", "--once", "--json")
    assert "rich" not in imported and "textual" not in imported


@pytest.mark.parametrize(
    ("args", "instead"),
    [
        (["--demo"], "gputui --once --demo"),
        ([], "gputui --once"),
        (["attach", "--demo"], "gputui attach --demo --once"),
        (["--ascii", "attach", "--demo"], "gputui attach --demo --once"),
        (["cluster", "--prometheus", "http://127.0.0.1:1"], "--once"),
    ],
)
def test_a_live_screen_without_a_terminal_refuses_at_once(args: list[str], instead: str) -> None:
    """Without a terminal (cron, a pipe) the screens would draw into the pipe
    forever: one line naming the printed form, exit status 2."""
    proc = subprocess.run(
        [sys.executable, "-m", "gputui", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_S,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert "the live screen needs a terminal" in line and instead in line


def test_display_flags_before_a_sub_command_apply_to_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--ascii", "attach", "--demo", "--once"]) == 0
    assert "pid 471" in capsys.readouterr().out
