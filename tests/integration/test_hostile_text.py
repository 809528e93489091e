"""Text that other users control reaches every output path cleaned: the monitor,
its detail and findings screens, ``--once``, the attach screen, ``attach --once``
(live and from a recording), ``ls``.  ``--json`` keeps the exact strings."""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from gputui import cli
from gputui.analysis.finding import Finding
from gputui.nvml import startup as nvml_open
from gputui.protocol.capture import CaptureResult, CpuOpRow, GpuTime, KernelRow
from gputui.protocol.schema import Hello, Status, StepBatch, StepRecord
from gputui.recording.attach import ATTACH_RECORDING_TYPE
from gputui.recording.replay import RecordingWriter, ReplaySource
from gputui.snapshot.model import ProcessSnapshot
from gputui.tui.app import make_app
from gputui.tui.attach import ReplayFeed, make_attach_app
from gputui.tui.screens.detail import ProcessDetailScreen
from gputui.tui.screens.findings import FindingsScreen
from tests.helpers import hookutil
from tests.helpers.fake_nvml import GIB, FakeNvml, FakeProcess, h100
from tests.helpers.screen import screen_text
from tests.helpers.synthetic import make_snapshots, wait_for

EVIL = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202eevil\ttab\nline\rcr\bbs\x1bP1|x\x1b\\"
#: what the sanitizer shows of the start of EVIL
SHOWN = "\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\u202eevil\\ttab\\nline"


def unsafe(text: str, allow: str = "\n") -> list[str]:
    """Control, format and separator characters in ``text`` (but ``allow``)."""
    bad = ("Cc", "Cf", "Zl", "Zp", "Cs", "Co")
    return [ch for ch in text if ch not in allow and unicodedata.category(ch) in bad]


# -- a monitor recording with hostile strings ----------------------------------------------
def hostile_snapshots() -> list[Any]:
    evil_proc = ProcessSnapshot(
        pid=31337,
        gpu_index=0,
        gpu_uuid="GPU-0",
        type="compute",
        gpu_mem_bytes=GIB,
        user="mallory" + EVIL,
        name="x" + EVIL,
        cmdline=("python", "train.py", EVIL, "A" * 10_000),
        hooked=True,
    )
    out = []
    for snap in make_snapshots(n_gpus=1, n_procs=2, n_steps=4):
        device = dataclasses.replace(snap.devices[0], name="NVIDIA H100" + EVIL, uuid="GPU-0")
        host = dataclasses.replace(snap.host, hostname="node" + EVIL)
        procs = tuple(dataclasses.replace(p, gpu_uuid="GPU-0") for p in snap.processes)
        out.append(
            dataclasses.replace(
                snap,
                devices=(device,),
                host=host,
                processes=(*procs, evil_proc),
                driver_version="580" + EVIL,
                error="lost" + EVIL,
            )
        )
    return out


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hostile") / "hostile.jsonl.gz"
    writer = RecordingWriter(path, interval_s=1.0, note="node" + EVIL)
    for snap in hostile_snapshots():
        writer.write(snap)
    writer.close()
    return path


def test_once_shows_hostile_strings_escaped(
    recording: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # room for the command's hostile part
    assert cli.main(["--replay", str(recording), "--once"]) == 0
    out = capsys.readouterr().out
    assert unsafe(out) == []
    assert "node\\x1b]0;pwned" in out and "train.py \\x1b]0" in out


def test_once_json_keeps_the_exact_strings(
    recording: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["--replay", str(recording), "--once", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["host"]["hostname"] == "node" + EVIL
    assert EVIL in doc["processes"][-1]["cmdline"]


async def test_monitor_screens_show_hostile_strings_escaped(recording: Path) -> None:
    source = ReplaySource.from_file(recording)
    app = make_app(source=source, autostart=False)
    async with app.run_test(size=(160, 50)) as pilot:
        app.advance(2)
        await pilot.pause()
        shown = screen_text(app)
        assert unsafe(shown) == [] and "node\\x1b]0;pwned" in shown
        assert "train.py \\x1b]0" in shown and "H100\\x1b]0;pwned" in shown
        # the detail screen of the hostile process, with its whole command line
        from gputui.tui.widgets.processes import ProcessTable

        table = app.screen.query_one(ProcessTable)
        key = next(k for k in table.order if k.endswith("31337"))
        table.select_key(key)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ProcessDetailScreen))
        await pilot.pause()
        shown = screen_text(app)
        assert unsafe(shown) == [] and "train.py \\x1b]0;pwned" in shown
        await pilot.press("escape")
        app.session.current.findings = [
            Finding("x", "warn", "GPU 0", "title" + EVIL, "seen" + EVIL, "fix" + EVIL)
        ]
        await pilot.press("f")
        await wait_for(pilot, lambda: isinstance(app.screen, FindingsScreen))
        await pilot.pause()
        shown = screen_text(app)
        assert unsafe(shown) == [], shown
        assert "title\\x1b]0;pwned" in shown, shown


# -- an attach recording with hostile strings -----------------------------------------------
def hostile_attach_recording(path: Path) -> Path:
    hello = Hello(
        pid=4242,
        argv=("python", "train.py", EVIL),
        torch="2.11" + EVIL,
        python="3.12" + EVIL,
        hostname="node" + EVIL,
        status=Status(t=1_700_000_000.0, errors=("boom" + EVIL,)),
    )
    steps = StepBatch(
        tuple(
            StepRecord(i, 1_700_000_000.0 + i, 0.01, {"forward": 0.004, "phase" + EVIL: 0.006})
            for i in range(20)
        )
    )
    capture = CaptureResult(
        id="c1",
        first_step=10,
        last_step=12,
        kernels=(KernelRow("kernel<" + EVIL + ">", "gemm", 3, 30.0, 10.0, share=1.0),),
        cpu_ops=(CpuOpRow("op" + EVIL, 3, 12.0, 20.0, share=1.0),),
        by_class={"gemm": 30.0},
        gpu_time=GpuTime(0, 100.0, 30.0, 70.0, 30.0),
        trace_path="/tmp/trace" + EVIL + ".json",
        started=1_700_000_010.0,
    )
    lines = [
        {"type": ATTACH_RECORDING_TYPE, "version": 1, "created_s": 1.0, "pid": 4242},
        hello.to_wire(),
        {"t": 0.1, "msg": steps.to_wire()},
        {"t": 0.2, "msg": capture.to_wire()},
    ]
    with gzip.open(path, "wt") as fh:
        for line in lines:
            fh.write(json.dumps(line) + "\n")
    return path


def test_attach_replay_once_shows_hostile_strings_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = hostile_attach_recording(tmp_path / "a.jsonl.gz")
    assert cli.main(["attach", "--replay", str(path), "--once"]) == 0
    out = capsys.readouterr().out
    assert unsafe(out) == []
    flat = " ".join(out.split())  # the report wraps long lines
    # the kernel shows by its short name, as in gputui analyze and on the screen
    assert "train.py \\x1b]0;pwned" in flat and "kernel<pwned, evil>" in flat
    assert cli.main(["attach", "--replay", str(path), "--once", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["hello"]["argv"][-1] == EVIL and doc["capture"]["kernels"][0]["name"].endswith(">")


async def test_attach_screen_shows_hostile_strings_escaped(tmp_path: Path) -> None:
    path = hostile_attach_recording(tmp_path / "a.jsonl.gz")
    app = make_attach_app(ReplayFeed.from_file(path), autostart=False)
    async with app.run_test(size=(140, 45)) as pilot:
        app.attach_screen.replay_to()
        await pilot.pause()
        shown = screen_text(app)
        assert unsafe(shown) == [], shown
        assert "train.py \\x1b]0;pwned" in shown and "torch 2.11\\x1b]0;pwned" in shown, shown


# -- a real process whose argv is hostile ---------------------------------------------------
@pytest.fixture(scope="module")
def evil_job(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with hookutil.isolated_dirs() as dirs:
        env = hookutil.make_env(*dirs)
        job = hookutil.start_job(
            env,
            tmp_path_factory.mktemp("evil"),
            ["--steps", "0", "--tag", EVIL],
            via_run=True,
            job=hookutil.STEP_JOB,
        )
        try:
            yield env, job
        finally:
            job.stop()


def test_ls_and_attach_once_show_a_live_jobs_argv_escaped(evil_job: Any) -> None:
    env, job = evil_job
    listed = hookutil.gputui(env, "ls")
    assert listed.returncode == 0, listed.stderr
    assert unsafe(listed.stdout) == []
    assert "\\x1b]0;pwned" in listed.stdout
    report = hookutil.gputui(env, "attach", str(job.pid), "--once")
    assert report.returncode == 0, report.stderr
    assert unsafe(report.stdout) == []
    assert "--tag \\x1b]0;pwned" in " ".join(report.stdout.split())
    as_json = hookutil.gputui(env, "ls", "--json")
    assert EVIL in json.loads(as_json.stdout)[0]["command"]


def test_monitor_once_shows_a_live_processs_argv_escaped(
    evil_job: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _env, job = evil_job
    fake = FakeNvml([h100(processes=[FakeProcess(job.pid, used_gpu_memory=GIB)])])
    monkeypatch.setattr(nvml_open, "import_pynvml", lambda: fake)
    monkeypatch.setenv("GPUTUI_SOCKET_DIR", os.environ.get("GPUTUI_SOCKET_DIR", "/nonexistent"))
    assert cli.main(["--once", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (proc,) = doc["processes"]
    # the real process's argv, read from /proc (psutil turns its CR into LF)
    assert any(arg.startswith("\x1b]0;pwned\x07\x1b[2J\x9b31m") for arg in proc["cmdline"])
    assert cli.main(["--once"]) == 0
    out = capsys.readouterr().out
    assert unsafe(out) == [] and str(job.pid) in out
