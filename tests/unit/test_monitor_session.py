"""The monitor's headless session: history, the findings' cadence, the replay's
progress, the measured ceilings and the poller's failures, without Textual."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from typing import Any

import pytest

from gputui.host.in_view import InView
from gputui.recording.replay import ReplaySource
from gputui.session import monitor
from gputui.session.monitor import INTERVALS, MonitorSession, Reading
from gputui.snapshot.model import Snapshot
from tests.helpers.deadlines import RUN_S
from tests.helpers.synthetic import (
    LiveLikeSource,
    header,
    live_like_source,
    make_snapshots,
    replay_source,
)

SNAPSHOTS = make_snapshots(n_gpus=4, n_procs=8, n_steps=12)


REAL_FINDINGS = monitor.findings


def counted_findings(monkeypatch: pytest.MonkeyPatch) -> list[Snapshot]:
    """The snapshots the device rules run on from now on."""
    runs: list[Snapshot] = []
    real = REAL_FINDINGS

    def counted(snapshot: Snapshot, history: Any = None) -> Any:
        runs.append(snapshot)
        return real(snapshot, history)

    monkeypatch.setattr(monitor, "findings", counted)
    return runs


@pytest.mark.parametrize(("interval_s", "every"), [(1.0, 2), (2.0, 1), (0.5, 4)])
def test_findings_run_every_two_seconds_of_data_and_at_once_when_the_gpus_change(
    monkeypatch: pytest.MonkeyPatch, interval_s: float, every: int
) -> None:
    """The device rules read a window of samples: they run again once 2 s of data
    have passed (every other sample at 1 s, each one at 2 s), and at once when the
    GPUs change or the data time goes back; the last run's findings stay."""
    runs = counted_findings(monkeypatch)
    source = ReplaySource(header(interval_s=interval_s), SNAPSHOTS, "recording: synthetic")
    session = MonitorSession(source, 3600.0)
    snaps = SNAPSHOTS[:9]
    for i, snapshot in enumerate(snaps):
        session.take(Reading(snapshot, 100.0 + i * interval_s))
        ran = i % every == 0
        assert (runs[-1] is snapshot) == ran, i
        if ran:  # the control: the rules over the same window, worked out again
            window = snaps[max(0, i - 9) : i + 1]
            assert session.current.findings == REAL_FINDINGS(snapshot, window)
    assert len(runs) == len(range(0, len(snaps), every))
    # a GPU lost, then gone: at once, each
    first = snaps[0]
    lost = dataclasses.replace(
        first, devices=(dataclasses.replace(first.devices[0], lost=True), *first.devices[1:])
    )
    session.take(Reading(lost, 100.0 + 9 * interval_s))
    assert runs[-1] is lost
    fewer = dataclasses.replace(snaps[1], devices=snaps[1].devices[1:])
    session.take(Reading(fewer, 100.0 + 9.1 * interval_s))
    assert runs[-1] is fewer
    # the data time went back (a replay that started over)
    session.take(Reading(snaps[2], 50.0))
    assert runs[-1] is snaps[2]


def test_the_cadence_follows_the_pollers_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """A live source has no cadence of its own: the poller's interval, as + and -
    leave it, is the step of the history and of the findings' cadence (they run
    again once 2 s less half a step of data have passed)."""
    runs = counted_findings(monkeypatch)
    session = MonitorSession(live_like_source(SNAPSHOTS), 1.0)
    session.source.natural_interval_s = None  # as a live source's
    assert session.change_interval(1) == 2.0 == session.poller.interval_s
    first = SNAPSHOTS[:4]
    for i, snapshot in enumerate(first):
        session.take(Reading(snapshot, 100.0 + 1.2 * i))
    assert runs == first  # 1.2 s of data: more than 2 s less half a 2 s step
    assert session.change_interval(-1) == 1.0
    assert session.change_interval(-1) == 0.5
    then = SNAPSHOTS[4:8]
    for i, snapshot in enumerate(then):
        session.take(Reading(snapshot, 104.1 + 0.5 * i))
    assert runs[4:] == [then[3]]  # 2 s after the last run, not 1.5 s


def test_the_interval_steps_stop_at_both_ends() -> None:
    session = MonitorSession(replay_source(SNAPSHOTS), INTERVALS[-1])
    assert session.change_interval(1) == INTERVALS[-1]
    session.poller.set_interval(INTERVALS[0])
    assert session.change_interval(-1) == INTERVALS[0]
    assert session.toggle_pause() and session.poller.paused
    assert not session.toggle_pause() and not session.poller.paused


def test_history_and_the_newest_data_follow_each_reading() -> None:
    session = MonitorSession(replay_source(SNAPSHOTS), 1.0)
    session.advance(3)
    assert session.snapshot_count == 3 == session.history.samples
    assert session.current.snapshot is SNAPSHOTS[2]
    # a recording's data time is its snapshots' own
    assert session.current.data_time_s == SNAPSHOTS[2].timestamp_s


def test_a_replay_that_starts_over_is_said_once_with_its_progress() -> None:
    session = MonitorSession(replay_source(SNAPSHOTS[:3]), 1.0)
    restarted = []
    for _ in range(7):
        restarted.append(session.take(session.sample_now()))
    # the fourth snapshot is the first of the second pass, the seventh of the third
    assert restarted == [False, False, False, True, False, False, True]
    replay = session.current.replay
    assert replay is not None and (replay.position, replay.total, replay.loops) == (1, 3, 2)


def test_ceilings_are_looked_up_once_per_gpu_on_the_pollers_side(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gputui.ceilings import cache

    asked: list[str] = []
    measured = object()

    def load(uuid: str) -> object | None:
        asked.append(uuid)
        return measured if uuid == first.devices[0].uuid else None

    monkeypatch.setattr(cache, "load_ceilings", load)
    first = SNAPSHOTS[0]
    session = MonitorSession(live_like_source(SNAPSHOTS), 1.0)
    reading = session.reading(first)
    assert asked == [d.uuid for d in first.devices]
    assert reading.ceilings == {first.devices[0].uuid: measured}
    again = session.reading(SNAPSHOTS[1])
    assert asked == [d.uuid for d in first.devices]  # none read again
    assert again.ceilings is reading.ceilings
    # a GPU not seen before is read, once
    new_gpu = dataclasses.replace(first.devices[1], uuid="GPU-new")
    grown = dataclasses.replace(first, devices=(*first.devices, new_gpu))
    session.reading(grown)
    session.reading(grown)
    assert asked == [*(d.uuid for d in first.devices), "GPU-new"]
    # taken: the newest data carries them; a reading without any keeps them
    session.take(reading)
    session.take(session.sample_now())
    assert session.current.ceilings == {first.devices[0].uuid: measured}
    # never a recording's, never on a sample taken on the drawing thread
    assert MonitorSession(replay_source(SNAPSHOTS), 1.0).reading(first).ceilings is None
    assert session.sample_now().ceilings is None
    assert len(asked) == len(first.devices) + 1


def test_a_good_snapshot_clears_the_pollers_failure() -> None:
    readings: list[Reading] = []
    failures: list[str] = []
    session = MonitorSession(replay_source(SNAPSHOTS), 1.0, readings.append, failures.append)
    session._poll_failed(OSError("NVML went away"))
    assert failures == ["sampling failed: OSError: NVML went away"]
    session.take_failure(failures[0])
    assert session.current.poll_error == failures[0]
    session._polled(SNAPSHOTS[0])
    assert [r.snapshot for r in readings] == [SNAPSHOTS[0]]
    session.take(readings[0])
    assert session.current.poll_error is None


def test_the_view_is_given_to_the_source_once_after_its_first_sample() -> None:
    given: list[InView] = []

    class Viewed(LiveLikeSource):
        def use_view(self, in_view: InView) -> None:
            given.append(in_view)

    session = MonitorSession(Viewed(header(), SNAPSHOTS, "live"), 1.0)
    assert given == []
    session.advance(3)
    assert given == [session.in_view]


def test_the_session_loads_no_textual() -> None:
    code = (
        "import sys; import gputui.session.monitor\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=RUN_S, check=True
    )
    assert out.stdout.strip() == "[]"
