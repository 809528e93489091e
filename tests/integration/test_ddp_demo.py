"""The embedded DDP demos (a real job on two H100s with NCCL): ``gputui --demo
ddp`` plays the monitor's session and ``gputui attach --demo ddp`` the rank
view's, whose straggler is the rank that was made slow, and whose overlap is
HTA's on the traces that capture wrote."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gputui.protocol.capture import CaptureResult, GpuTime
from gputui.protocol.trace_metrics import TraceMetrics
from tests.helpers.hookutil import REPO

DATA = REPO / "tests" / "data" / "h100x2-nccl"


def gputui(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gputui", *args],
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "COLUMNS": "120"},
    )


def test_the_monitor_plays_two_gpus_and_the_hooked_ranks() -> None:
    out = gputui("--demo", "ddp", "--once", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [d["name"] for d in doc["devices"]] == ["NVIDIA H100 80GB HBM3"] * 2
    procs = doc["processes"]
    assert sorted(p["gpu_index"] for p in procs) == [0, 1]  # one rank a GPU
    assert all(p["hooked"] for p in procs)
    assert doc["source"]["is_recording"]
    text = gputui("--demo", "ddp", "--once")
    assert text.returncode == 0 and text.stdout.startswith("DEMO:")
    # the default demo is still the one-GPU session
    one = json.loads(gputui("--demo", "--once", "--json").stdout)
    assert len(one["devices"]) == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--demo", "nope", "--once"], "invalid choice: 'nope' (choose from 'h100', 'ddp')"),
        (["--demo", "attach"], "'attach' is a sub-command: give it first"),
        (["attach", "--demo", "nope"], "invalid choice: 'nope' (choose from 'h100', 'ddp')"),
        (["attach", "--demo", "ddp", "123"], "--demo plays a recording; a pid needs a job"),
    ],
)
def test_a_wrong_demo_is_one_line(argv: list[str], message: str) -> None:
    out = gputui(*argv)
    assert out.returncode == 2 and out.stdout == ""
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_the_rank_view_names_the_slow_rank() -> None:
    out = gputui("attach", "--demo", "ddp", "--once", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["recording"]["demo"] is True
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    (top, *_rest) = doc["job"]["findings"]
    # the job ran with --slow-rank 1 --slow-data-s 0.02
    assert (top["rule"], top["scope"]) == ("ranks.straggler", "rank 1")
    assert "rank 1's data takes" in top["evidence"]
    # one diagnosis for the job: the straggler, and why it is slow
    assert doc["diagnosis"]["straggler"] == 1
    assert doc["diagnosis"]["cause"] == "data.loader_wait"
    text = gputui("attach", "--demo", "ddp", "--once")
    assert "diagnosis: rank 1 is the straggler" in text.stdout


def test_the_rank_views_overlap_is_htas_on_the_captures_traces() -> None:
    """The demo's synchronized capture wrote demo-rank0/1 (tests/data); HTA on
    those traces and the rank view on the same capture give the same overlap."""
    pytest.importorskip("hta")
    sys.path.insert(0, str(REPO / "tests" / "integration"))
    from test_hta_truth import hta

    doc = json.loads(gputui("attach", "--demo", "ddp", "--once", "--json").stdout)
    shown = {r["rank"]: r["capture"]["comm_compute_overlap"] for r in doc["ranks"]}
    for rank in (0, 1):
        reference = hta(DATA / f"demo-rank{rank}.pt.trace.json.gz")["overlap"]
        assert shown[rank] * 100 == pytest.approx(reference, abs=0.5), (rank, shown, reference)


def _metrics(overlap_pct: float | None) -> TraceMetrics:
    return TraceMetrics(
        steps_total=3,
        last_step_dropped=True,
        temporal=None,
        idle_breakdown=None,
        comm_compute_overlap_pct=overlap_pct,
        launch=None,
    )


def test_a_captures_overlap_is_htas_window_when_the_hook_sent_it() -> None:
    gpu = GpuTime(0, 100.0, 90.0, 10.0, 60.0, 30.0, 0.0, 0.0, comm_compute_overlap=0.56)
    base = CaptureResult(id="c", first_step=1, last_step=3, gpu_time=gpu)
    assert base.comm_compute_overlap == 0.56  # a hook that sent no trace metrics
    with_metrics = CaptureResult(
        id="c", first_step=1, last_step=3, gpu_time=gpu, trace_metrics=_metrics(60.38)
    )
    assert with_metrics.comm_compute_overlap == pytest.approx(0.6038)
    no_comm = CaptureResult(id="c", gpu_time=gpu, trace_metrics=_metrics(None))
    assert no_comm.comm_compute_overlap is None


def test_the_demos_are_packaged() -> None:
    pyproject = (REPO / "pyproject.toml").read_text()
    assert '"data/*.gz"' in pyproject
    for name in ("demo_ddp.jsonl.gz", "attach_demo_ddp.jsonl.gz"):
        assert (Path(REPO) / "gputui" / "data" / name).stat().st_size > 10_000


def test_every_demo_name_has_its_recording() -> None:
    from gputui import cli
    from gputui.commands import attach
    from gputui.recording.replay import DEMO_RESOURCES
    from gputui.session.feeds import DEMO_RESOURCES as ATTACH_RESOURCES

    assert list(cli.DEMOS) == list(DEMO_RESOURCES)  # the same names, the default first
    assert list(attach.DEMOS) == list(ATTACH_RESOURCES)
    for name in (*DEMO_RESOURCES.values(), *ATTACH_RESOURCES.values()):
        assert (REPO / "gputui" / "data" / name).is_file(), name
