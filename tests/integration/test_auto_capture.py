"""The automatic capture through the CLI, against real CPU torch jobs under the
hook (`gputui run`): `attach --once` takes one capture with FLOPs once the job
is steady and says what it cost; `--no-capture` takes none; `--capture N`
takes its place; a capture of the last ten minutes makes it unneeded."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import hookutil

pytestmark = pytest.mark.slow  # CPU torch jobs
pytest.importorskip("torch")


@pytest.fixture(scope="module")
def env() -> Iterator[dict[str, str]]:
    with hookutil.isolated_dirs() as dirs:
        yield hookutil.make_env(*dirs)


@pytest.fixture
def job(env: dict[str, str], tmp_path: Path) -> Iterator[hookutil.Job]:
    """A job of its own: no capture of the last ten minutes."""
    j = hookutil.start_phase_job(env, tmp_path)
    yield j
    j.stop()


def once(env: dict[str, str], job: hookutil.Job, *args: str) -> dict[str, Any]:
    out = hookutil.gputui(env, "attach", str(job.pid), "--once", "--json", *args)
    assert out.returncode == 0, out.stderr
    report: dict[str, Any] = json.loads(out.stdout)
    return report


def test_once_captures_with_flops_and_says_what_it_cost(
    env: dict[str, str], job: hookutil.Job
) -> None:
    # --no-capture first: no capture at all
    report = once(env, job, "--no-capture")
    assert report["auto_capture"]["state"] == "off" and report["capture"] is None
    assert report["utilisation"] is None
    # then the automatic one: once the job is steady, 5 steps after a warm-up step
    report = once(env, job)
    auto = report["auto_capture"]
    assert auto["state"] == "done", auto
    assert "ordinary steps" in auto["reason"] and auto["id"].startswith("auto-")
    cap = report["capture"]
    assert cap["id"] == auto["id"] and cap["auto"] is True
    assert cap["options"]["flops"] and cap["options"]["shapes"]
    assert cap["last_step"] - cap["first_step"] == 4 and cap["cpu_ops"]
    # its steps came after the warm-up steps and were profiled (left out of the statistics)
    assert cap["first_step"] > 3 and report["stats"]["excluded_profiled"] >= 6
    cost = auto["cost"]
    assert cost["profiled_steps"] == 6 and cost["after_steps"] >= 1 and cost["complete"]
    assert cost["ordinary_ms"] > 4.0  # the job's data phase sleeps 4 ms a step
    assert cost["extra_ms"] >= 0 and cost["stop_ms"] == cap["stop_ms"]
    assert cost["slowdown"] > 0
    # findings and the MFU without a keypress (a CPU job: its FLOP rate, no peak)
    util = report["utilisation"]
    assert util is not None and util["capture_id"] == auto["id"]
    assert util["model_flops_per_step"] > 0 and util["mfu"] is None
    assert "analysis_notes" in report and not any(
        "need a capture" in note for note in report["analysis_notes"]
    )
    # a second look within ten minutes takes none, and says so
    text = hookutil.gputui(env, "attach", str(job.pid), "--once")
    assert text.returncode == 0, text.stderr
    assert "automatic capture: not needed: the job was captured at" in text.stdout
    assert "automatic capture: 5 steps" not in text.stderr


def test_an_explicit_capture_replaces_it(env: dict[str, str], job: hookutil.Job) -> None:
    out = hookutil.gputui(env, "attach", str(job.pid), "--capture", "2", "--once", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["auto_capture"]["state"] == "replaced"
    cap = report["capture"]
    assert "auto" not in cap and cap["last_step"] - cap["first_step"] == 1
    assert cap["options"]["flops"]  # every capture carries FLOPs now
    assert "automatic capture" not in out.stderr
    # --no-flops: a plain capture
    out = hookutil.gputui(
        env, "attach", str(job.pid), "--capture", "2", "--no-flops", "--once", "--json"
    )
    assert out.returncode == 0, out.stderr
    plain = json.loads(out.stdout)["capture"]
    assert not plain["options"]["flops"] and not plain["options"]["shapes"]
    # that capture is of the last ten minutes: the automatic one is not needed
    report = once(env, job)
    assert report["auto_capture"]["state"] == "skipped"
    assert report["capture"]["id"] == plain["id"] and report["capture"]["replay"] is True
