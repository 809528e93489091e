"""The conventions every command keeps: an error is one line that starts with the
command that says it; a range is written as its help writes it; a command with
a demo suggests its own demo; ``--demo ddp`` wherever ``--demo`` is taken; an
unknown command is named as such; ``TERM=dumb`` draws ASCII."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gputui.cli import main
from gputui.nvml.startup import TRY_DEMO
from gputui.recording.replay import read_recording
from tests.helpers.deadlines import RUN_S

NO_DRIVER = f"no NVIDIA driver found: libnvidia-ml.so is missing; {TRY_DEMO}"


class _NoDriver:
    """A live source on a machine without a driver."""

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        from gputui.errors import NvmlUnavailable

        raise NvmlUnavailable(NO_DRIVER)


class _Served(Exception):
    """The exporter got as far as its server: the test has what it wanted."""


def _no_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    import gputui.sources.live

    monkeypatch.setattr(gputui.sources.live, "LiveSource", _NoDriver)
    monkeypatch.setattr(gputui.sources.live, "SampleAhead", _NoDriver)


@pytest.mark.parametrize(
    ("args", "prefix", "said"),
    [
        (["analyze", "/nonexistent.json"], "gputui analyze: ", "/nonexistent.json: no such file"),
        (["--replay", "/nonexistent"], "gputui: ", "recording not found: /nonexistent"),
        (["--replay", "/nonexistent", "--once"], "gputui: ", "recording not found"),
        (["record", "-o", "/proc/x.jsonl.gz", "--demo"], "gputui record: ", "cannot write"),
        (["record", "-o", "/missing-dir/x", "--demo"], "gputui record: ", "no directory"),
    ],
)
def test_every_error_line_starts_with_its_command(
    args: list[str], prefix: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(prefix) and said in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("name", ["gputui", "gputui/data", "gputui_trace.json", "gputui: x"])
def test_a_path_that_begins_with_gputui_keeps_the_command_before_it(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trace's error starts with its path: a path named like the command is
    still prefixed ("gputui analyze: gputui/data: no trace files")."""
    monkeypatch.chdir(tmp_path)
    if name != "gputui_trace.json":
        (tmp_path / name).mkdir(parents=True)
    assert main(["analyze", name]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gputui analyze: {name}: "), err
    assert err.count("\n") == 1


def test_a_truncated_trace_is_said_by_analyze(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = Path(__file__).resolve().parents[1] / "data" / "traces" / "dataloader.pt.trace.json.gz"
    cut = tmp_path / "cut.pt.trace.json.gz"
    cut.write_bytes(trace.read_bytes()[:20_000])
    assert main(["analyze", str(cut)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gputui analyze: {cut}: truncated"), err


def test_the_monitor_without_a_driver_says_so_with_its_prefix(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _no_driver(monkeypatch)
    assert main(["--once"]) == 2
    assert capsys.readouterr().err == f"gputui: {NO_DRIVER}\n"


def test_a_range_is_said_as_the_help_writes_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["record", "-o", "x.gz", "--duration", "-5"]) == 2
    err = capsys.readouterr().err
    assert "must be between 0.1 and 31622400 s, got -5" in err and "e+07" not in err
    with pytest.raises(SystemExit):
        main(["record", "--help"])
    assert "0.1-31622400" in capsys.readouterr().out


def test_the_exporter_without_a_driver_suggests_its_own_demo(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import gputui.exporter.server

    _no_driver(monkeypatch)

    def serve(*_args: Any) -> Any:
        raise _Served

    monkeypatch.setattr(gputui.exporter.server, "make_server", serve)
    monkeypatch.setenv("GPUTUI_DEBUG", "1")
    with pytest.raises(_Served):
        main(["exporter", "--port", "0"])
    err = capsys.readouterr().err
    assert "try 'gputui exporter --demo'" in err and TRY_DEMO not in err


def test_record_without_a_driver_suggests_its_own_demo(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _no_driver(monkeypatch)
    out = tmp_path / "s.jsonl.gz"
    assert main(["record", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gputui record: no NVIDIA driver found")
    assert f"try 'gputui record -o {out} --demo'" in err


def test_record_takes_the_ddp_demo(tmp_path: Path) -> None:
    out = tmp_path / "ddp.jsonl.gz"
    assert main(["record", "-o", str(out), "--demo", "ddp", "--quiet", "--duration", "3"]) == 0
    snapshots = read_recording(out)[1]
    assert snapshots and len(snapshots[0].devices) == 2


def test_the_exporter_serves_the_ddp_demo(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import gputui.exporter.server

    served: list[str] = []

    def serve(_listen: str, _port: int, _render: Any, info: str) -> Any:
        served.append(info)
        raise _Served

    monkeypatch.setattr(gputui.exporter.server, "make_server", serve)
    monkeypatch.setenv("GPUTUI_DEBUG", "1")
    with pytest.raises(_Served):
        main(["exporter", "--demo", "ddp", "--port", "0"])
    assert "two NVIDIA H100" in served[0] and "DDP" in served[0]


def test_serve_streams_the_ddp_demo() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gputui", "serve", "--stdio", "--demo", "ddp"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=RUN_S,
        env=dict(os.environ, COLUMNS="80"),
    )
    head = json.loads(proc.stdout.splitlines()[0])
    assert "two NVIDIA H100" in head["source"]["label"], head


@pytest.mark.parametrize("word", ["nosuchcmd", "atach"])
def test_an_unknown_command_is_named_and_the_commands_listed(
    word: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([word]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gputui: unknown command '{word}'")
    assert "record, run, ls, attach, bench, exporter, cluster, analyze, serve" in err
    assert ("did you mean 'attach'?" in err) == (word == "atach")
    assert err.count("\n") == 1


def test_term_dumb_draws_ascii(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TERM", "dumb")
    monkeypatch.setenv("COLUMNS", "100")
    trace = Path(__file__).resolve().parents[1] / "data" / "traces" / "dataloader.pt.trace.json.gz"
    for args in (
        ["--demo", "--once"],
        ["attach", "--demo", "--once"],
        ["attach", "--demo", "ddp", "--once"],
        ["analyze", str(trace)],
    ):
        assert main(args) == 0
        out = capsys.readouterr().out
        assert out.isascii(), (args, [line for line in out.splitlines() if not line.isascii()][:3])
    monkeypatch.setenv("TERM", "xterm-256color")
    assert main(["analyze", str(trace)]) == 0
    assert not capsys.readouterr().out.isascii()  # the control: block characters


def test_term_dumb_opens_the_screens_in_ascii(monkeypatch: pytest.MonkeyPatch) -> None:
    import gputui.commands.monitor

    seen: list[bool] = []

    def opened(args: Any, leaving: bool = False) -> int:
        seen.append(args.ascii)
        return 0

    monkeypatch.setattr(gputui.commands.monitor, "main", opened)
    monkeypatch.setenv("TERM", "dumb")
    assert main(["--demo"]) == 0
    monkeypatch.setenv("TERM", "xterm")
    assert main(["--demo"]) == 0
    assert seen == [True, False]
