"""The monitor on a replay: progress and a loop marker in the banner, a break in
the history graphs where the recording starts over."""

from __future__ import annotations

import itertools
from pathlib import Path

from gputui.recording.replay import ReplaySource
from gputui.snapshot.history import History
from gputui.tui.app import make_app
from gputui.tui.widgets.panels import BannerPanel
from tests.helpers.synthetic import make_snapshots, replay_source, write_recording


def test_history_breaks_where_time_goes_back_and_never_joins_end_to_start() -> None:
    snaps = make_snapshots(n_gpus=1, n_procs=1, n_steps=3, seed=2)
    history = History()
    for snap in [*snaps, *snaps]:
        history.add(snap, snap.timestamp_s)
    uuid = snaps[0].devices[0].uuid
    util = list(history.gpu_series(uuid, "util"))
    first = [s.devices[0].util_gpu_pct for s in snaps]
    assert util == [*first, None, *first]
    assert list(history.host["cpu"])[3] is None
    times = list(history.times)
    assert all(b > a for a, b in itertools.pairwise(times))
    assert len(times) == len(util)


def test_history_of_one_repeated_snapshot_has_no_breaks() -> None:
    snap = make_snapshots(n_gpus=1, n_procs=1, n_steps=1, seed=2)[0]
    history = History()
    for _ in range(4):
        history.add(snap, snap.timestamp_s)
    assert None not in history.gpu_series(snap.devices[0].uuid, "util")


async def test_banner_shows_position_and_marks_the_loop() -> None:
    source = replay_source(make_snapshots(n_gpus=1, n_procs=2, n_steps=5, seed=1))
    app = make_app(source, interval_s=1.0, banner="REPLAY: r, not this machine", autostart=False)
    async with app.run_test(size=(100, 40)) as pilot:
        app.advance(5)
        await pilot.pause()
        banner = app.screen.query_one(BannerPanel).plain
        assert banner.rstrip().endswith("5/5") and "pass" not in banner
        assert not app._notifications
        app.advance(2)
        await pilot.pause()
        assert app.screen.query_one(BannerPanel).plain.rstrip().endswith("2/5  pass 2")
        assert [n.message for n in app._notifications] == ["replay restarted from the beginning"]
        uuid = source.sample().devices[0].uuid
        assert list(app.session.history.gpu_series(uuid, "util"))[5] is None


async def test_banner_keeps_the_progress_at_80_columns(tmp_path: Path) -> None:
    path = write_recording(tmp_path / "r.jsonl.gz", make_snapshots(n_steps=12, seed=4))
    source = ReplaySource.from_file(path)
    long_banner = "REPLAY: " + "very-long-directory-name/" * 6 + "r.jsonl.gz, not this machine"
    app = make_app(source, interval_s=1.0, banner=long_banner, autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        source.count()
        app.advance(3)
        await pilot.pause()
        # the banner takes more lines, each of the full width; the progress stays
        # at the end of the last
        lines = app.screen.query_one(BannerPanel).plain.split("\n")
        assert len(lines) > 1 and {len(line) for line in lines} == {80}
        assert lines[-1].rstrip().endswith("3/12")
        assert "".join(line[1:].rstrip() for line in lines).startswith(
            long_banner.replace("3/12", "")[:60]
        )


async def test_the_banner_says_what_the_recording_is_not_its_name_twice(tmp_path: Path) -> None:
    """``--replay FILE``: the banner holds the file's path already; after it
    comes what the recording is, in its maker's note, and without a note
    nothing more (the name was said twice)."""
    snaps = make_snapshots(n_steps=3, seed=5)
    for note, said in (("two H100s: a DDP job", "two H100s: a DDP job"), (None, None)):
        path = write_recording(tmp_path / f"{note is None}.jsonl.gz", snaps, note=note)
        banner = f"REPLAY: {path}, not this machine"
        app = make_app(ReplaySource.from_file(path), interval_s=1.0, banner=banner, autostart=False)
        async with app.run_test(size=(160, 40)) as pilot:
            app.advance(1)
            await pilot.pause()
            text = " ".join(app.screen.query_one(BannerPanel).plain.split())
        assert text.count(path.name) == 1, text
        if said is not None:
            assert f"not this machine: {said}" in text, text
        else:
            assert "recording:" not in text, text


async def test_a_sped_up_replay_says_its_recorded_interval_and_its_speed(tmp_path: Path) -> None:
    """``--speed 100``: the top line says the recording's interval and the
    speed (it said "every 0.1s", the playback's floor)."""
    from gputui.tui.widgets.panels import HeaderPanel

    path = write_recording(tmp_path / "r.jsonl.gz", make_snapshots(n_steps=4, seed=6))
    for speed, said in ((100.0, "every 1s x100"), (1.0, "every 1s")):
        source = ReplaySource.from_file(path, speed=speed)
        app = make_app(
            source, interval_s=1.0, banner="REPLAY: r, not this machine", autostart=False
        )
        async with app.run_test(size=(160, 40)) as pilot:
            app.advance(1)
            await pilot.pause()
            text = app.screen.query_one(HeaderPanel).plain
        assert f"| {said} |" in text, text
