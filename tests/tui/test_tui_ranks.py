"""The rank view, played from a recording of a real 2-rank job (torchrun, gloo
DDP on CPU, rank 1 planted 20 ms slower in its data loading, one synchronized
capture): the table, the straggler, Enter into one rank and back, sorting, the
capture of each rank; `attach --replay --once` on it; a pinned screen.

Pinned screens: update only after looking at them
(``pytest tests/tui/test_tui_ranks.py --snapshot-update``, then open the report).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gputui import cli
from gputui.errors import GputuiError
from gputui.recording.attach import AttachRecorder, read_attach_recording
from gputui.session.rank_feeds import ReplayRanksFeed
from gputui.tui.attach.rank_screen import AlertPanel, RankCapturePanel, RanksApp, RanksScreen
from gputui.tui.attach.screen import AttachScreen
from tests.helpers.synthetic import wait_for

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
RECORDING = SAMPLES / "attach-ranks-v2.jsonl.gz"
BANNER = "REPLAY of a 2-rank CPU job (gloo DDP), not this machine"
#: after the synchronized capture, and after enough steps for the rules
AT_S = 20.0


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def app(**kw: Any) -> RanksApp:
    return RanksApp(ReplayRanksFeed.from_file(RECORDING), autostart=False, banner=BANNER, **kw)


def screen_of(the_app: RanksApp) -> RanksScreen:
    return the_app.ranks_screen


async def test_the_rank_view_of_a_recorded_job() -> None:
    the_app = app()
    async with the_app.run_test(size=(120, 40)) as pilot:
        screen = screen_of(the_app)
        screen.replay_to(AT_S)
        await pilot.pause()
        summary = screen.summary
        assert summary is not None and [r.rank for r in summary.rows] == [0, 1]
        assert summary.missing_text() is None and summary.alert is None
        (top, *_rest) = screen.findings
        assert top.rule == "ranks.straggler" and top.scope == "rank 1"
        rows = {r.rank: r for r in summary.rows}
        assert rows[0].comm_s is not None and rows[1].comm_s is not None
        assert rows[0].comm_s - rows[1].comm_s == pytest.approx(0.02, rel=0.2)
        # both ranks profiled the same steps, and the panel says so
        spans = {(r.capture.first_step, r.capture.last_step) for r in summary.rows if r.capture}
        assert len(spans) == 1
        panel = screen.query_one(RankCapturePanel)
        assert "(the same steps on 2 ranks)" in panel.build(120).plain
        assert "c10d::allreduce_" in panel.build(120).plain  # a CPU job: its CPU ops


async def test_enter_opens_the_rank_and_escape_comes_back() -> None:
    the_app = app()
    async with the_app.run_test(size=(120, 40)) as pilot:
        screen = screen_of(the_app)
        screen.replay_to(AT_S)
        await pilot.pause()
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: isinstance(the_app.screen, AttachScreen))
        rank = the_app.screen
        assert isinstance(rank, AttachScreen)
        await wait_for(pilot, lambda: rank.view is not None and rank.view.stats.count > 0)
        assert rank.view is not None and rank.view.snap.hello is not None
        assert rank.view.snap.hello.rank == 1 and rank.state is screen.feed.links[1].state
        assert {d.name for d in rank.view.stats.phases} >= {"data", "comm", "backward"}
        with pytest.raises(GputuiError, match="memory snapshots need a live job"):
            rank.feed.request_memory_snapshot(5)
        await pilot.press("escape")
        await wait_for(pilot, lambda: the_app.screen is screen)
        assert screen.feed.links[1].state.snapshot().steps  # the rank's state stays


async def test_sorting_keeps_the_selected_rank() -> None:
    the_app = app()
    async with the_app.run_test(size=(120, 40)) as pilot:
        screen = screen_of(the_app)
        screen.replay_to(AT_S)
        await pilot.pause()
        await pilot.press("down")
        assert screen.selected_pid() == screen.feed.links[1].pid
        while screen.sort_key != "comm":
            await pilot.press("s")
        await pilot.press("S")  # most waiting first
        await pilot.pause()
        assert screen.order == [screen.feed.links[0].pid, screen.feed.links[1].pid]
        assert screen.selected_pid() == screen.feed.links[1].pid


async def test_a_recording_cannot_capture() -> None:
    the_app = app()
    async with the_app.run_test(size=(120, 40)) as pilot:
        screen_of(the_app).replay_to(AT_S)
        await pilot.press("p")
        await pilot.pause()
        assert not screen_of(the_app).check_action("capture", ())
        assert screen_of(the_app).query_one(AlertPanel).build(120).plain == ""


def test_replay_once_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["attach", "--replay", str(RECORDING), "--once", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["job"]["world_size"] == 2 and doc["job"]["local_ranks"] == 2
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert doc["job"]["findings"][0]["rule"] == "ranks.straggler"
    assert doc["recording"]["label"].startswith("replay of")
    assert doc["hello"]["rank"] == 0 and doc["stats"]["count"] > 0
    assert cli.main(["attach", "--replay", str(RECORDING), "--once"]) == 0
    text = capsys.readouterr().out
    assert "rank 1 is the straggler" in text and "job: 2 local ranks of 2" in text


def test_a_single_process_recording_still_replays_alone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["attach", "--replay", str(SAMPLES / "attach-v1.jsonl.gz"), "--once"]) == 0
    text = capsys.readouterr().out
    assert "pid " in text and "job:" not in text


def test_a_multi_rank_recording_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl.gz"
    hello = {"v": 1, "type": "hello", "pid": 11, "rank": 0, "world_size": 2}
    rec = AttachRecorder(path, hello, 11, ranks=[11, 12])
    rec.write({"v": 1, "type": "hello", "pid": 12, "rank": 1, "world_size": 2}, 1)
    rec.write({"v": 1, "type": "synced", "steps": 0})
    rec.write({"v": 1, "type": "synced", "steps": 5}, 1)
    rec.close()
    recording = read_attach_recording(path)
    assert recording.pid == 11 and [r.pid for r in recording.ranks] == [11, 12]
    first, second = recording.ranks
    assert first.hello["pid"] == 11 and [m["steps"] for _t, m in first.messages] == [0]
    assert second.hello["pid"] == 12 and [m["steps"] for _t, m in second.messages] == [5]
    # a one-connection session is still written as version 1
    AttachRecorder(tmp_path / "one.jsonl.gz", hello, 11).close()
    assert read_attach_recording(tmp_path / "one.jsonl.gz").ranks == ()


def test_snapshot_ranks_120x40(snap_compare: Any) -> None:
    async def run_before(pilot: Any) -> None:
        screen_of(pilot.app).replay_to(AT_S)
        await pilot.pause()

    assert snap_compare(app(), terminal_size=(120, 40), run_before=run_before)


def test_snapshot_ranks_80x24(snap_compare: Any) -> None:
    async def run_before(pilot: Any) -> None:
        screen_of(pilot.app).replay_to(AT_S)
        await pilot.pause()

    assert snap_compare(app(), terminal_size=(80, 24), run_before=run_before)


async def test_ascii_applies_to_the_rank_view() -> None:
    """``--ascii`` reaches the rank view as it does the single-job screen: no
    block, box-drawing scrollbar or bullet glyph is drawn."""
    for ascii_only in (False, True):
        the_app = app(ascii_only=ascii_only)
        async with the_app.run_test(size=(120, 40)) as pilot:
            screen_of(the_app).replay_to(AT_S)
            await pilot.pause()
            svg = the_app.export_screenshot()
        drawn = {ch for ch in "▏▎▍▌▋▊▉█●▇▄" if ch in svg}
        assert bool(drawn) is not ascii_only, drawn
