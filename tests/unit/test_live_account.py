"""The step's account between captures: data, user phases and communication
from every step, the rest split as the last capture measured it, labelled."""

from __future__ import annotations

import pytest

from gputui.analysis.live_account import live_account
from gputui.exporter.jobs import JobSnapshot
from gputui.exporter.train_metrics import train_families
from gputui.reports.account import live_lines
from tests.helpers.evidence import account, steps


def job_steps() -> list:
    # 10 ms steps: data 2 ms, a user phase 1 ms, comm 1 ms, the rest 6 ms
    return steps(
        n=10,
        phases={"data": 0.002, "ckpt": 0.001, "comm": 0.001, "forward": 0.002, "other": 0.004},
    )


def test_measured_buckets_come_from_every_step() -> None:
    live = live_account(job_steps())
    assert live is not None and live.capture_step is None
    assert live.seconds["data"] == pytest.approx(0.002)
    assert live.seconds["phase"] == pytest.approx(0.001)
    assert live.seconds["comm"] == pytest.approx(0.001)
    assert live.seconds["rest"] == pytest.approx(0.006)
    assert sum(live.seconds.values()) == pytest.approx(live.step_s)


def test_the_rest_is_split_as_the_last_capture_measured_it() -> None:
    # the capture: sync 10%, launch 10%, dispatch 20%, the rest (Python) 40% of its step
    captured = account(sync=0.1, launch=0.1, dispatch=0.2, data=0.2, gpu_busy=0.5)
    live = live_account(job_steps(), captured, capture_step=120)
    assert live is not None and "rest" not in live.seconds
    # the 6 ms rest in the capture's proportions 1 : 1 : 2 : 4
    assert live.seconds["sync"] == pytest.approx(0.00075)
    assert live.seconds["dispatch"] == pytest.approx(0.0015)
    assert live.seconds["python"] == pytest.approx(0.003)
    assert live.seconds["data"] == pytest.approx(0.002)  # measured, not the capture's 20%
    assert sum(live.seconds.values()) == pytest.approx(live.step_s)
    assert live.source("python") == "from capture at step 120"
    assert live.source("data") == "every step"
    text = "\n".join(live_lines(live, width=100))
    assert "capture at step 120" in text and "data wait*" in text
    doc = live.to_json()
    assert doc["capture_step"] == 120
    assert {b["bucket"]: b["measured"] for b in doc["buckets"]}["python"] is False


def test_no_steps_no_account() -> None:
    assert live_account([]) is None


def test_the_exporter_has_the_buckets_measured_on_every_step() -> None:
    """Only the per-step buckets are exported: the others are a capture's, not
    the job's over time."""
    job = JobSnapshot(
        pid=1,
        job_id="j",
        rank=0,
        local_rank=0,
        world_size=1,
        argv=(),
        device_index=0,
        steps_total=10,
        step_seconds_sum=6.5,
        recent_step_seconds=(),
        phase_seconds={"data": 2.0, "ckpt": 1.0, "comm": 0.5, "forward": 3.0},
        phase_gpu_seconds={},
        samples_total=0,
        last_step_time_s=None,
        memory=None,
    )
    fams = {f.name: f for f in train_families([job], "node", cmdline=False)}
    fam = fams["gputui_train_account_seconds_total"]
    got = {dict(lab.pairs)["bucket"]: v for _suffix, lab, v in fam.samples}
    assert got == {"data": 2.0, "phase": 1.0, "comm": 0.5}


def test_the_note_marks_only_what_is_starred_and_offers_no_capture_to_a_recording() -> None:
    """A job with no data wait, user phase or communication: no row is marked *,
    so the note does not explain a mark; a recording's report does not ask for
    a capture no one can take of it."""
    plain = steps(n=10, phases={"forward": 0.004, "other": 0.006})
    captured = account(sync=0.1, launch=0.1, dispatch=0.2, gpu_busy=0.5)
    live = live_account(plain, captured, capture_step=7)
    assert live is not None
    text = " ".join(" ".join(live_lines(live, width=100)).split())
    assert "*" not in text and "the split the capture at step 7 measured" in text
    uncaptured = live_account(job_steps())
    assert uncaptured is not None
    asked = " ".join(live_lines(uncaptured, width=100))
    assert "--capture N" in asked
    assert "--capture N" not in " ".join(live_lines(uncaptured, width=100, recorded=True))
