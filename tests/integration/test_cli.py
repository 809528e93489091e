from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gputui.cli import main
from gputui.commands.monitor import DEMO_BANNER
from gputui.recording.replay import ReplaySource
from gputui.reports import monitor as report
from gputui.snapshot.model import SCHEMA_VERSION
from tests.helpers.deadlines import RUN_S

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
SAMPLES = Path(__file__).resolve().parents[1] / "samples"


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
        (["--once", "ls"], "gputui: 'ls' is a sub-command: give it first (gputui ls ...)"),
        (["--demo", "--once", "--window", "1"], "gputui: --window measures rates live"),
        (["--replay", "r.gz", "--once", "--window", "1"], "a recording's rates are the ones"),
        (["attach", "--demo", "--once", "--gpu-seconds", "3"], "--gpu-seconds needs a job"),
        (["attach", "--replay", "r.gz", "--timeout", "3"], "--replay plays a recording; --timeout"),
        (["attach", "--demo", "--single"], "--demo plays a recording; --single needs a job"),
        (["attach", "--demo", "--warmup", "2"], "--demo plays a recording; --warmup needs a job"),
        (["attach", "1", "--gpu-seconds", "3"], "--gpu-seconds is for --once"),
        (["attach", "1", "--once", "--warmup", "3"], "--warmup is a capture option"),
        (["attach", "1", "--once", "--memory-entries", "100000"], "goes with --memory-snapshot"),
        (["attach", "1", "--no-flops"], "--no-flops is a capture option"),
        (
            ["attach", "1", "--once", "--capture", "2", "--no-capture"],
            "--capture N asks for a capture and --no-capture for none",
        ),
        (["attach", "--demo", "--once", "--no-capture"], "--demo plays a recording; --no-capture"),
        (["attach", "1", "--memory-snapshot", "2", "--no-capture"], "--memory-snapshot runs alone"),
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
    from gputui.nvml.collector import probe

    if probe() is None:
        pytest.skip("an NVIDIA driver is present here")
    proc = run_cli("--once")
    assert proc.returncode == 2
    assert "--demo" in proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_demo_if_no_gpu_falls_back_to_the_recording() -> None:
    from gputui.nvml.collector import probe

    if probe() is None:
        pytest.skip("an NVIDIA driver is present here")
    proc = run_cli("--demo-if-no-gpu", "--once")
    assert proc.returncode == 0, proc.stderr
    assert "DEMO" in proc.stdout and "H100" in proc.stdout


def _render_demo_once(width: int = 80) -> str:
    source = ReplaySource.demo()
    snapshot = source.sample()
    return "\n".join(report.render(snapshot, source, DEMO_BANNER, width=width)) + "\n"


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
    assert doc["schema"] == SCHEMA_VERSION == 2
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
    from gputui.recording.replay import RecordingWriter
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


def test_once_imports_neither_rich_nor_textual_nor_an_installed_attrs(tmp_path: Path) -> None:
    """The printed report is plain text: the screens' libraries stay unloaded."""
    imported = _imported_by("--demo", "--once", extra_path=_fake_attrs(tmp_path))
    assert "rich" not in imported
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
        (["--replay", str(SAMPLES / "monitor-v1.jsonl.gz")], "gputui --once --replay "),
        (["attach", "--demo"], "gputui attach --demo --once"),
        (["--ascii", "attach", "--demo"], "gputui attach --demo --once"),
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


@pytest.mark.parametrize(
    "args",
    [
        ["analyze", "x.json", "--bogus"],
        ["attach", "--demo", "--once", "--bogus"],
        ["ls", "extra"],
        ["record", "-o", "x.gz", "--bogus"],
        ["run", "--bogus", "--", "python", "t.py"],
        ["--ascii", "run", "--", "python", "t.py"],
    ],
)
def test_a_sub_commands_bad_argument_is_said_by_that_sub_command(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    name = next(a for a in args if not a.startswith("-"))
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gputui {name}: unrecognized arguments: ")
    assert f"(see 'gputui {name} --help')" in err and err.count("\n") == 1


def test_flags_of_make_run_before_a_sub_command() -> None:
    """``make run`` passes --demo-if-no-gpu before ARGS: before a sub-command it is
    dropped; a shared display flag goes right after the sub-command's name, never
    into a job's command line after ``run --``."""
    from gputui.cli import normalize

    assert normalize(["--demo-if-no-gpu", "attach", "--demo"]) == ["attach", "--demo"]
    assert normalize(["--demo-if-no-gpu", "--ascii", "attach", "1"]) == ["attach", "--ascii", "1"]
    assert normalize(["--ascii", "run", "--", "python", "t.py"]) == [
        "run",
        "--ascii",
        "--",
        "python",
        "t.py",
    ]
    assert normalize(["--demo-if-no-gpu", "--once"]) == ["--demo-if-no-gpu", "--once"]


@pytest.mark.parametrize(
    "args",
    [
        ["--demo-if-no-gpu", "--demo", "--once"],
        ["--demo", "--once", "--demo-if-no-gpu"],
        [
            "--demo-if-no-gpu",
            "--replay",
            str(SAMPLES / "monitor-v1.jsonl.gz"),
            "--once",
        ],
        ["--demo-if-no-gpu", "attach", "--demo", "--once"],
        ["--demo-if-no-gpu", "ls"],
    ],
)
def test_demo_if_no_gpu_is_a_no_op_beside_a_recording_or_a_sub_command(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args) == 0, capsys.readouterr().err


def _without_terminal(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gputui", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--replay", "/nonexistent/rec.jsonl.gz"],
            "recording not found: /nonexistent/rec.jsonl.gz",
        ),
        (["attach", "--replay", "/nonexistent/s.jsonl.gz"], "recording not found"),
        # this test's own process: a process without a hook ({pid} is filled in the
        # test, so that every pytest worker collects the same test ids)
        (["attach", "{pid}"], "process {pid} has no gputui hook"),
        (["attach", "4194304"], "no process with pid 4194304"),
        (["cluster", "--prometheus", "ftp://x"], "not an http(s) URL"),
        (["cluster", "--prometheus", "http://127.0.0.1:{port}", "--timeout", "2"], "cannot reach"),
    ],
)
def test_without_a_terminal_what_is_missing_is_said_before_the_terminal(
    args: list[str], message: str
) -> None:
    """The terminal is checked last: a missing recording, job or server is said
    first, so that the printed form the refusal would name is not a dead end."""
    args = [
        a.replace("{port}", str(_closed_port())).replace("{pid}", str(os.getpid())) for a in args
    ]
    message = message.replace("{pid}", str(os.getpid()))
    proc = _without_terminal(*args)
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert message in line and "terminal" not in line


def test_without_a_terminal_the_live_monitor_says_first_that_there_is_no_driver() -> None:
    from gputui.nvml.collector import probe

    proc = _without_terminal()
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    if probe() is None:  # a driver: only the terminal is missing
        assert "the live screen needs a terminal" in line
    else:
        assert "NVIDIA" in line and "--demo" in line and "terminal" not in line


@pytest.mark.parametrize(
    "args",
    [
        ["attach", "{pid}", "--record", "/nonexistent/dir/x.jsonl.gz"],
        ["attach", "{pid}", "--single", "--record", "/nonexistent/dir/x.jsonl.gz"],
        ["record", "-o", "/nonexistent/dir/x.jsonl.gz", "--duration", "1"],
    ],
)
def test_a_recording_that_cannot_be_written_is_refused_before_anything_starts(
    args: list[str],
) -> None:
    """Before the job is connected to and the screen opens (the rank view's
    --record too: checked before the job's ranks are looked for), before the
    driver is opened."""
    proc = _without_terminal(*[a.replace("{pid}", str(os.getpid())) for a in args])
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"gputui {args[0]}: cannot write recording /nonexistent/dir/x.jsonl.gz")
    assert "no directory /nonexistent/dir" in line


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda d: d, "it is a directory"),
        (lambda d: d / "file" / "x.gz", "is not a directory"),
    ],
)
def test_check_writable_says_why(make: Any, problem: str, tmp_path: Path) -> None:
    from gputui.commands.args import check_writable
    from gputui.errors import GputuiError

    (tmp_path / "file").write_text("")
    with pytest.raises(GputuiError, match=problem):
        check_writable("gputui record", str(make(tmp_path)))
    check_writable("gputui record", str(tmp_path / "new.jsonl.gz"))
    check_writable("gputui record", str(tmp_path / "file"))  # overwritten
    assert not (tmp_path / "new.jsonl.gz").exists()


def test_window_on_the_demo_that_replaces_a_missing_driver_is_said() -> None:
    from gputui.nvml.collector import probe

    if probe() is None:
        pytest.skip("an NVIDIA driver is present here")
    proc = run_cli("--demo-if-no-gpu", "--once", "--window", "0.2", "--json")
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["source"]["rate_window_s"] is None
    (line,) = proc.stderr.splitlines()
    assert "playing the demo recording; --window does not apply to a recording" in line


def test_once_from_demo_says_na_for_a_process_sm_never_sampled() -> None:
    """The demo's first snapshot is its recorder's first NVML read, which had no
    per-process sample (recorded as 0): the busy job's SM is N/A, not 0%."""
    for width in (80, 200):
        lines = _render_demo_once(width).splitlines()
        header = next(line for line in lines if line.startswith("GPU") and "PID" in line)
        row = next(line for line in lines if "471*" in line)
        sm = header.index("SM")
        assert row[sm - 1 : sm + 2] == "N/A"
        assert all(line == line.rstrip() for line in lines)  # no trailing spaces
