"""The monitor app driven by Pilot over replayed synthetic snapshots."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
from textual.widgets import Input

from gputui.host.in_view import InView
from gputui.session.monitor import Reading
from gputui.session.process_sort import HOST_ORDER
from gputui.session.process_view import SORTABLE
from gputui.snapshot.model import ProcessSnapshot
from gputui.tui.app import GputuiApp, make_app
from gputui.tui.messages import SnapshotReady
from gputui.tui.screens.detail import DetailPanel, ProcessDetailScreen
from gputui.tui.screens.dialogs import SignalDialog
from gputui.tui.screens.help import HelpScreen, help_text
from gputui.tui.screens.monitor import MonitorScreen, StatusLine
from gputui.tui.widgets.devices import DevicePanel
from gputui.tui.widgets.panels import (
    BannerPanel,
    FindingsBar,
    HeaderPanel,
    HistoryPanel,
    HostPanel,
)
from gputui.tui.widgets.processes import ProcessTable
from tests.helpers.deadlines import WAIT_S
from tests.helpers.synthetic import (
    LiveLikeSource,
    header,
    live_like_source,
    make_snapshots,
    replay_source,
    wait_for,
    with_processes,
)

SNAPSHOTS = make_snapshots(n_gpus=4, n_procs=8, n_steps=12)
BANNER = "DEMO - recording of a real H100 session, not this machine"


def app_for(**kw: Any) -> GputuiApp:
    source = kw.pop("source", None) or replay_source(SNAPSHOTS)
    # A long interval: the sampler takes its first snapshot at once, then tests step
    # the data themselves with app.advance(), so nothing changes behind their back.
    return make_app(source, interval_s=kw.pop("interval_s", 3600.0), **kw)


def notes(app: GputuiApp) -> list[str]:
    seen: list[str] = []
    original = app.notify

    def record(message: str, **kw: Any) -> None:
        seen.append(message)
        original(message, **kw)

    app.notify = record  # type: ignore[method-assign]
    return seen


async def started(pilot: Any) -> GputuiApp:
    app: GputuiApp = pilot.app
    await wait_for(pilot, lambda: app.session.snapshot_count >= 1)
    await pilot.pause()
    return app


def table(app: GputuiApp) -> ProcessTable:
    return app.screen.query_one(ProcessTable)


async def test_first_snapshot_fills_every_panel() -> None:
    app = app_for(banner=BANNER)
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot)
        screen = app.screen
        assert isinstance(screen, MonitorScreen)
        assert BANNER in screen.query_one(BannerPanel).plain
        devices = screen.query_one(DevicePanel).plain
        assert "GPU 0" in devices and "NVIDIA H100 80GB HBM3" in devices
        assert "TENSOR" in devices and "PWR CAP" in devices
        assert "not supported on this GPU" in devices  # the A100 has no GPM
        assert "CPU" in screen.query_one(HostPanel).plain
        assert len(table(app).order) == 8
        assert "busy GPU, idle tensor cores" in screen.query_one(FindingsBar).plain


async def test_recording_banner_without_explicit_banner() -> None:
    async with app_for().run_test() as pilot:
        app = await started(pilot)
        assert "RECORDING" in app.screen.query_one(BannerPanel).plain
        assert app.screen.query_one(BannerPanel).display


async def test_sort_keys_and_header_click() -> None:
    async with app_for().run_test(size=(120, 40)) as pilot:
        app = await started(pilot)
        t = table(app)
        await pilot.press("s")  # gpu -> pid
        assert t.sort_spec.column == "pid" and not t.sort_spec.descending
        pids = [int(k.split("|")[1]) for k in t.order]
        assert pids == sorted(pids)
        await pilot.press("r")
        pids = [int(k.split("|")[1]) for k in t.order]
        assert pids == sorted(pids, reverse=True)
        await pilot.press("S")  # back to the previous column
        assert t.sort_spec.column == "gpu"
        # header click: %SM, biggest first; again: reversed
        t.post_message(t.HeaderSelected("sm"))
        await pilot.pause()
        assert t.sort_spec.column == "sm" and t.sort_spec.descending
        snapshot = app.session.current.snapshot
        assert snapshot is not None
        by_key = {f"{p.gpu_uuid}|{p.pid}": p for p in snapshot.processes}
        sms = [by_key[k].sm_pct for k in t.order]
        known = [v for v in sms if v is not None]
        assert known == sorted(known, reverse=True)
        assert sms[-1] is None  # N/A sorts last


async def test_header_click_with_the_mouse() -> None:
    async with app_for().run_test(size=(120, 40)) as pilot:
        app = await started(pilot)
        t = table(app)
        x = t.column_x("gpu_mem")
        await pilot.click(ProcessTable, offset=(x + 2, 0))
        await pilot.pause()
        assert t.sort_spec.column == "gpu_mem" and t.sort_spec.descending


async def test_filter_by_text_user_gpu_and_type() -> None:
    async with app_for().run_test(size=(120, 40)) as pilot:
        app = await started(pilot)
        t = table(app)
        await pilot.press("slash")
        assert app.screen.query_one(Input).has_focus
        await pilot.press(*"user:bob")
        await pilot.pause()
        procs = {p.pid: p for p in app.session.current.snapshot.processes}  # type: ignore[union-attr]
        users = {procs[int(k.split("|")[1])].user for k in t.order}
        assert users == {"bob"} and len(t.order) == 2
        await pilot.press("enter")
        assert t.has_focus
        await pilot.press("escape")
        assert len(t.order) == 8
        await pilot.press("slash", *"gpu:3 vllm", "enter")
        assert [procs[int(k.split("|")[1])].gpu_index for k in t.order] == [3]
        await pilot.press("escape", "x")  # compute only
        assert len(t.order) == 7 and t.proc_filter.kind == "compute"
        await pilot.press("x")  # graphics only
        assert len(t.order) == 1
        await pilot.press("escape")
        t.move_cursor(0)
        await pilot.press("u")  # the selected process's user
        assert t.proc_filter.users == ("alice",)
        await pilot.press("escape", "slash", *"nosuchjob type:bogus")
        await pilot.pause()
        status = app.screen.query_one(StatusLine).plain
        assert "Processes 0/8" in status and "no process matches" in status
        assert "type: is compute or graphics, not 'bogus'" in status


async def test_tree_view_groups_children_under_parents() -> None:
    async with app_for().run_test(size=(120, 40)) as pilot:
        app = await started(pilot)
        t = table(app)
        await pilot.press("t")
        order = t.order
        assert "parent|4000" in order  # the launcher is not a GPU process
        # ... nor counted as one
        assert "Processes 8/8" in app.screen.query_one(StatusLine).plain
        rows = {key: t.row(key) for key in order}
        children = rows["parent|4000"].children  # type: ignore[union-attr]
        assert children and all(
            rows[k].proc is not None and rows[k].proc.ppid == 4000  # type: ignore[union-attr]
            for k in order
            if rows[k].proc is not None and rows[k].pid in children  # type: ignore[union-attr]
        )
        # GPU process 4100 is the parent of others: they come right after it
        i = next(i for i, k in enumerate(order) if k.endswith("|4100"))
        after = order[i + 1]
        assert rows[after].proc is not None and rows[after].proc.ppid == 4100  # type: ignore[union-attr]
        # a recording: the parent's name is not looked up on this machine
        assert "(parent, not on a GPU)" in str(t.cell("parent|4000", "command"))
        await pilot.press("t")
        assert not any(k.startswith("parent|") for k in t.order)


async def test_detail_screen_shows_full_command_and_history() -> None:
    async with app_for().run_test(size=(120, 40)) as pilot:
        app = await started(pilot)
        app.advance(3)
        t = table(app)
        t.move_cursor(3)
        await pilot.pause()
        proc = t.selected_process
        assert proc is not None
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ProcessDetailScreen))
        text = app.screen.query_one(DetailPanel).plain
        assert " ".join(proc.cmdline or ()) in text
        assert f"Process {proc.pid}" in text and "History" in text
        app.advance(1)  # the detail screen follows new snapshots
        await pilot.pause()
        await pilot.press("escape")
        assert isinstance(app.screen, MonitorScreen)


async def test_kill_dialog_sends_sigterm_to_a_real_process() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        victim = ProcessSnapshot(
            pid=child.pid,
            gpu_index=0,
            gpu_uuid=SNAPSHOTS[0].devices[0].uuid,
            type="compute",
            gpu_mem_bytes=2**30,
            user="me",
            cmdline=("sleep", "60"),
            start_time_s=psutil.Process(child.pid).create_time(),
            ppid=1,
        )
        source = live_like_source(with_processes(SNAPSHOTS, [victim], replace=True))
        async with app_for(source=source).run_test(size=(120, 40)) as pilot:
            app = await started(pilot)
            assert table(app).selected_process == victim
            await pilot.press("k")
            await wait_for(pilot, lambda: isinstance(app.screen, SignalDialog))
            await pilot.click("#term")
            await wait_for(pilot, lambda: isinstance(app.screen, MonitorScreen))
            assert child.wait(timeout=WAIT_S) == -signal.SIGTERM
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


async def test_kill_dialog_cancel_sends_nothing() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        victim = ProcessSnapshot(
            pid=child.pid, gpu_index=0, gpu_uuid=SNAPSHOTS[0].devices[0].uuid, type="compute"
        )
        source = live_like_source(with_processes(SNAPSHOTS, [victim], replace=True))
        async with app_for(source=source).run_test(size=(120, 40)) as pilot:
            await started(pilot)
            await pilot.press("k")
            await pilot.press("escape")
            await pilot.pause()
            assert child.poll() is None
    finally:
        child.kill()
        child.wait()


async def test_readonly_refuses_signals_and_says_so() -> None:
    source = live_like_source(SNAPSHOTS)
    app = app_for(source=source, readonly=True)
    async with app.run_test(size=(120, 40)) as pilot:
        seen = notes(app)
        await started(pilot)
        await pilot.press("k")
        await pilot.pause()
        assert not isinstance(app.screen, SignalDialog)
        assert any("read-only" in n for n in seen)


async def test_recording_refuses_signals() -> None:
    app = app_for()
    async with app.run_test(size=(120, 40)) as pilot:
        seen = notes(app)
        await started(pilot)
        await pilot.press("k")
        await pilot.pause()
        assert not isinstance(app.screen, SignalDialog)
        assert any("recording" in n for n in seen)


async def test_signal_refused_when_pid_was_reused() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stale = ProcessSnapshot(
            pid=child.pid, gpu_index=0, gpu_uuid="GPU-x", type="compute", start_time_s=1.0
        )
        app = app_for(source=live_like_source(SNAPSHOTS))
        async with app.run_test() as pilot:
            await started(pilot)
            assert app.send_signal(stale, signal.SIGTERM) is False
            assert child.poll() is None
    finally:
        child.kill()
        child.wait()


async def test_compact_mode_key_and_auto_choice() -> None:
    async with app_for().run_test(size=(120, 40)) as pilot:
        app = await started(pilot)
        devices = app.screen.query_one(DevicePanel)
        assert not devices.compact  # 4 GPUs fit at 40 lines
        full_lines = len(devices.plain.splitlines())
        await pilot.press("c")
        assert devices.compact
        assert len(devices.plain.splitlines()) < full_lines
        await pilot.press("c")
        assert not devices.compact
    many = make_snapshots(n_gpus=8, n_procs=40, n_steps=3)
    async with app_for(source=replay_source(many)).run_test(size=(120, 40)) as pilot:
        app = await started(pilot)
        assert app.screen.query_one(DevicePanel).compact  # 8 GPUs: one line each


async def test_resize_to_80x24_keeps_working() -> None:
    async with app_for().run_test(size=(200, 60)) as pilot:
        app = await started(pilot)
        t = table(app)
        assert len(t.column_keys) == 12
        assert app.screen.query_one(HistoryPanel).display
        await pilot.resize_terminal(80, 24)
        await wait_for(pilot, lambda: app.screen.size == (80, 24))
        await pilot.pause()
        assert len(t.column_keys) == 9  # the least important columns give way
        assert not app.screen.query_one(HistoryPanel).display
        assert app.screen.query_one(HostPanel).compact
        assert len(t.order) == 8
        for line in app.screen.query_one(DevicePanel).plain.splitlines():
            assert len(line) <= 78
        await pilot.press("down", "s")
        assert t.sort_spec.column == "pid"


async def test_cursor_stays_on_its_process_across_refreshes() -> None:
    async with app_for().run_test(size=(120, 40)) as pilot:
        app = await started(pilot)
        t = table(app)
        await pilot.press("s", "s", "s", "s", "s")  # gpu->pid->user->type->gpu_mem->sm
        assert t.sort_spec.column == "sm"
        await pilot.press("down", "down", "down")
        chosen = t.selected_row
        assert chosen is not None
        moved = False
        before = t.order
        for _ in range(8):
            app.advance(1)
            await pilot.pause()
            assert t.selected_row is not None and t.selected_row.key == chosen.key
            moved = moved or t.order != before
        assert moved, "the %SM order should change between snapshots"


async def test_pause_and_interval_keys() -> None:
    async with app_for(interval_s=1.0).run_test() as pilot:
        app = await started(pilot)
        await pilot.press("p")
        assert app.session.poller.paused
        await pilot.press("p")
        assert not app.session.poller.paused
        await pilot.press("plus")
        assert app.session.poller.interval_s == 2.0
        await pilot.press("minus", "minus")
        assert app.session.poller.interval_s == 0.5


async def test_attach_hook_point() -> None:
    calls: list[int] = []

    def factory(pid: int) -> None:
        calls.append(pid)
        return None

    app = app_for(attach_factory=factory)
    async with app.run_test(size=(120, 40)) as pilot:
        seen = notes(app)
        await started(pilot)
        t = table(app)
        hooked = next(k for k in t.order if t.row(k).proc and t.row(k).proc.hooked)  # type: ignore[union-attr]
        t.select_key(hooked)
        await pilot.press("a")
        assert calls == [int(hooked.split("|")[1])]
        t.move_cursor(0)
        await pilot.press("a")
        assert any("no gputui hook" in n for n in seen)
    app = app_for()
    async with app.run_test(size=(120, 40)) as pilot:
        seen = notes(app)
        await started(pilot)
        t = table(app)
        t.select_key(next(k for k in t.order if t.row(k).proc.hooked))  # type: ignore[union-attr]
        await pilot.press("a")
        assert any("is a recorded process, not one on this machine" in n for n in seen)


async def test_attach_in_the_demo_plays_the_recorded_attach_session() -> None:
    """The demo's hooked job was recorded by its attach screen as well: a on it
    opens that session instead of a dead end."""
    from gputui.recording.replay import ReplaySource
    from gputui.tui.attach import AttachScreen, ReplayFeed

    app = make_app(ReplaySource.demo(), 3600.0, autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        app.advance(3)
        await pilot.pause()
        t = table(app)
        t.select_key(next(k for k in t.order if t.row(k).proc and t.row(k).proc.hooked))  # type: ignore[union-attr]
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, AttachScreen) and isinstance(app.screen.feed, ReplayFeed)
        assert app.screen.feed.pid == 471  # the same job, recorded by both views
        await pilot.press("escape")
        assert not isinstance(app.screen, AttachScreen)


async def test_help_lists_every_binding() -> None:
    text = help_text().plain
    keys = {
        "q",
        "p",
        "f",
        "d",
        "c",
        "g",
        "m",
        "s",
        "r",
        "t",
        "u",
        "x",
        "k",
        "a",
        "/",
        "esc",
    }
    for key in keys:
        assert f"\n  {key}" in text or f" {key} " in text or f"{key} /" in text, key
    async with app_for().run_test() as pilot:
        app = await started(pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, MonitorScreen)


async def test_graph_metric_and_theme_keys() -> None:
    async with app_for().run_test(size=(120, 40)) as pilot:
        app = await started(pilot)
        graphs = app.screen.query_one(HistoryPanel)
        assert "GPU util" in graphs.plain
        await pilot.press("m", "m", "m")
        assert "tensor activity" in graphs.plain
        assert "not available on this GPU" in graphs.plain  # the A100 row
        theme = app.theme
        await pilot.press("d")
        assert app.theme != theme


async def test_ascii_mode_draws_only_ascii() -> None:
    app = app_for(ascii_only=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot)
        app.advance(5)
        await pilot.pause()
        for widget in (DevicePanel, HistoryPanel, HostPanel):
            assert app.screen.query_one(widget).plain.isascii(), widget
        await pilot.press("t")
        for key in table(app).order:
            assert str(table(app).cell(key, "command")).isascii()


def test_snapshot_messages_collapse() -> None:
    a = SnapshotReady(Reading(SNAPSHOTS[0], 0.0))
    b = SnapshotReady(Reading(SNAPSHOTS[1], 1.0))
    assert a.can_replace(b) and b.can_replace(a)


@pytest.mark.parametrize("count", [1])
async def test_sampler_thread_feeds_the_app(count: int) -> None:
    async with app_for(interval_s=0.1).run_test() as pilot:
        app = pilot.app
        await wait_for(pilot, lambda: app.session.snapshot_count >= 3)
        assert app.session.history.samples == app.session.snapshot_count


async def test_ascii_mode_draws_nothing_but_ascii() -> None:
    """--ascii covers what Textual draws too: scrollbars, the footer, cut texts."""
    from gputui.recording.replay import ReplaySource
    from gputui.tui.attach import ReplayFeed, make_attach_app

    monitor = make_app(ReplaySource.demo(), 3600.0, ascii_only=True, autostart=False)
    async with monitor.run_test(size=(80, 24)) as pilot:
        monitor.advance(120)  # both processes: the table scrolls
        await pilot.pause()
        drawn = "\n".join(s.text for s in monitor.screen._compositor.render_strips())
        assert "GPU" in drawn and drawn.isascii(), sorted({c for c in drawn if not c.isascii()})
    attach = make_attach_app(ReplayFeed.demo(), ascii_only=True, autostart=False)
    async with attach.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        attach.attach_screen.replay_to(40.0)
        await pilot.pause()
        drawn = "\n".join(s.text for s in attach.screen._compositor.render_strips())
        assert "Capture" in drawn and "connected" not in drawn
        assert drawn.isascii(), sorted({c for c in drawn if not c.isascii()})


async def test_live_monitor_shows_dram_and_pcie_against_measured_ceilings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU that `gputui bench` measured: DRAM bandwidth in bytes next to the
    measured copy bandwidth, PCIe next to the measured pinned copies; another
    GPU, never measured, shows neither; a recording never reads this machine's."""
    import dataclasses

    from gputui.ceilings import cache
    from tests.helpers.synthetic import live_like_source
    from tests.unit.test_ceilings import _document

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    uuid = "GPU-12345678-1234-1234-1234-123456789abc"
    snapshots = [
        dataclasses.replace(
            s, devices=(dataclasses.replace(s.devices[0], uuid=uuid), *s.devices[1:])
        )
        for s in SNAPSHOTS
    ]
    cache.save(_document(name=snapshots[0].devices[0].name or "", uuid=uuid), uuid)
    app = make_app(live_like_source(snapshots), 3600.0)
    async with app.run_test(size=(140, 50)) as pilot:
        await started(pilot)
        await wait_for(pilot, lambda: uuid in app.session.current.ceilings)
        app.screen.refresh_data()  # type: ignore[attr-defined]
        panel = app.screen.query_one(DevicePanel)
        first, second = panel.plain.split("GPU 1 ", 1)
        # 45% of the H100's 3.35 TB/s datasheet peak, beside the 2.95 TB/s copy
        assert "DRAM bw  45% = 1.5TB/s of 3.0TB/s measured" in first
        assert "(measured max ↓55.0GB/s)" in first  # host to device only was measured
        assert "measured" not in second
    replay = app_for()
    async with replay.run_test(size=(140, 50)) as pilot:
        await started(pilot)
        assert replay.session.current.ceilings == {}


async def test_start_up_objects_leave_the_cyclic_collector_outside_tests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import gc

    import gputui.tui.app as app_module

    monkeypatch.setattr(app_module, "GC_FREEZE_AFTER_S", 0.01)
    app = app_for()
    assert gc.get_freeze_count() == 0
    async with app.run_test() as pilot:
        await started(pilot)
        await pilot.pause(0.1)
        # headless (tests, screenshots): many apps share one process, nothing frozen
        assert gc.get_freeze_count() == 0
        try:
            app._freeze_startup_objects()
            assert gc.get_freeze_count() > 0
        finally:
            gc.unfreeze()


def test_command_lines_are_cleaned_once_and_long_ones_not_kept() -> None:
    from gputui.session import process_view

    process_view._command_text.cache_clear()
    short = ProcessSnapshot(
        pid=1, gpu_index=0, gpu_uuid="GPU-0", type="compute", cmdline=("python", "train.py\x1b[2J")
    )
    long = ProcessSnapshot(
        pid=2, gpu_index=0, gpu_uuid="GPU-0", type="compute", cmdline=("x" * 5000,)
    )
    for _ in range(3):
        assert process_view.display_command(short) == "python train.py\\x1b[2J"
        assert process_view.display_command(long).startswith("xxx")
    info = process_view._command_text.cache_info()
    assert (info.hits, info.misses, info.currsize) == (2, 1, 1)


def _count_calls(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, what: Any) -> list[Any]:
    """``what`` of the first argument of each call of ``module.NAME`` from now on."""
    seen: list[Any] = []
    original = getattr(module, name)

    def counting(first: Any, *args: Any) -> Any:
        seen.append(what(first))
        return original(first, *args)

    monkeypatch.setattr(module, name, counting)
    return seen


async def _below_the_first_screen(pilot: Any, t: Any) -> tuple[str, int]:
    """Move the cursor past the first screen: the selected row's key and the view's top."""
    for _ in range(t.size.height - 1 + 10):
        await pilot.press("down")
    await pilot.pause()
    key, top = t.selected_row.key, t.scroll_offset.y
    assert top > 0
    return key, top


def _big_node(steps: int, count: int = 500) -> list[Any]:
    """``count`` processes on one GPU whose %SM changes order at every step."""
    import dataclasses

    base = make_snapshots(n_gpus=1, n_procs=1, n_steps=steps)
    out = []
    for step, snap in enumerate(base):
        template = snap.processes[0]
        procs = tuple(
            dataclasses.replace(
                template, pid=10_000 + k, sm_pct=float((k * 7 + step * 131) % 100), ppid=1
            )
            for k in range(count)
        )
        out.append(dataclasses.replace(snap, processes=procs))
    return out


async def test_many_processes_make_cells_for_the_rows_in_view_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gputui.tui.widgets import process_rows

    made = _count_calls(monkeypatch, process_rows, "cells", lambda row: row.pid)
    app = app_for(source=replay_source(_big_node(4)))
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot)
        t = table(app)
        assert t.total == 500 and len(t.order) == 500
        in_view = t.size.height - 1
        made.clear()
        app.advance()
        await pilot.pause()
        # a refresh makes the rows in view (at most), not the 500
        assert 0 < len(made) <= in_view
        made.clear()
        await pilot.press("end")
        await pilot.pause()
        assert len(made) <= 2 * in_view and t.selected_process.pid == 10_499  # type: ignore[union-attr]


async def test_tree_selection_and_scroll_survive_refreshes(monkeypatch: pytest.MonkeyPatch) -> None:
    from gputui.session import process_view

    laid = _count_calls(monkeypatch, process_view, "tree_layout", len)
    app = app_for(source=replay_source(_big_node(6)))
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot)
        t = table(app)
        t.set_sort(t.sort_spec.on("pid"))
        await pilot.press("t")
        await pilot.pause()
        assert t.tree_view and laid
        key, top = await _below_the_first_screen(pilot, t)
        laid.clear()
        for _ in range(2):
            app.advance()  # new numbers, the same processes under the same parents
            await pilot.pause()
            assert t.selected_row.key == key and t.scroll_offset.y == top  # type: ignore[union-attr]
        assert not laid  # the tree was not laid out again


async def test_selection_and_scroll_survive_refreshes() -> None:
    app = app_for(source=replay_source(_big_node(6)))
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot)
        t = table(app)
        in_view = t.size.height - 1
        # sorted by pid: the order does not change from one sample to the next
        t.set_sort(t.sort_spec.on("pid"))
        key, top = await _below_the_first_screen(pilot, t)
        app.advance()
        await pilot.pause()
        assert t.selected_row.key == key and t.scroll_offset.y == top  # type: ignore[union-attr]
        # sorted by %SM, which moves every row at each sample: the selected process
        # keeps the cursor, and the view follows it when it would leave the screen
        t.set_sort(t.sort_spec.on("sm"))
        await pilot.pause()
        t.select_key(key)
        await pilot.pause()
        moved = 0
        for _ in range(4):
            before = t.cursor_row
            app.advance()
            await pilot.pause()
            top = t.scroll_offset.y
            assert t.selected_row.key == key  # type: ignore[union-attr]
            assert top <= t.cursor_row < top + in_view
            moved += abs(t.cursor_row - before) >= in_view
        assert moved  # the process did jump further than a screen


class ViewedSource(LiveLikeSource):
    """A live-like source that keeps the view the app hands a live source."""

    in_view: InView | None = None

    def use_view(self, in_view: InView) -> None:
        self.in_view = in_view


def pids_in_view(t: ProcessTable) -> frozenset[int]:
    top = t.scroll_offset.y
    keys = t.order[top : top + t.size.height - 1]
    return frozenset(row.pid for row in map(t.row, keys) if row is not None)


async def test_the_pids_on_screen_reach_a_live_source() -> None:
    many = make_snapshots(n_gpus=8, n_procs=40, n_steps=3)
    source = ViewedSource(header(), many, "live")
    async with app_for(source=source).run_test(size=(120, 40)) as pilot:
        app = await started(pilot)
        assert source.in_view is app.session.in_view
        t = table(app)
        first = pids_in_view(t)
        assert 0 < len(first) < 40
        await wait_for(pilot, lambda: app.session.in_view.pids() == first)
        await pilot.press("end")  # scrolled: the view follows
        await wait_for(pilot, lambda: pids_in_view(t) != first)
        last = pids_in_view(t)
        await wait_for(pilot, lambda: app.session.in_view.pids() == last)
        t.move_cursor(len(t.order) - 1)
        proc = t.selected_process
        assert proc is not None
        # the detail screen's process stays read at every refresh until it closes
        await pilot.press("home")
        await wait_for(pilot, lambda: app.session.in_view.pids() == first)
        app.push_screen(ProcessDetailScreen(proc))
        await wait_for(pilot, lambda: app.session.in_view.pids() == first | {proc.pid})
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.session.in_view.pids() == first)


async def test_sorting_by_a_host_value_reaches_a_live_source() -> None:
    # sorted by %CPU or HOST-MEM, the rows off screen are ordered by their host
    # values: the collector reads those processes more often then
    many = make_snapshots(n_gpus=8, n_procs=40, n_steps=3)
    source = ViewedSource(header(), many, "live")
    async with app_for(source=source).run_test(size=(120, 40)) as pilot:
        app = await started(pilot)
        t = table(app)
        await wait_for(pilot, lambda: app.session.in_view.pids() is not None)
        assert t.sort_spec.column not in HOST_ORDER and not app.session.in_view.host_order()
        seen: set[tuple[str, bool]] = set()
        for _ in SORTABLE:
            await pilot.press("s")
            host = t.sort_spec.column in HOST_ORDER
            await wait_for(pilot, lambda h=host: app.session.in_view.host_order() == h)  # type: ignore[misc]
            column = t.sort_spec.column
            seen.add((column, app.session.in_view.host_order()))
        assert {("cpu", True), ("rss", True), ("gpu_mem", False)} <= seen


async def test_time_cell_follows_the_clock_and_only_it_is_made_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import dataclasses

    from gputui.tui.widgets import process_rows

    base = make_snapshots(n_gpus=1, n_procs=1, n_steps=4)
    start = base[0].timestamp_s
    proc = dataclasses.replace(base[0].processes[0], start_time_s=start - 50.0)
    # the same process object at every step: only the clock moves (0.4 s, then 10 s)
    snaps = [
        dataclasses.replace(snap, timestamp_s=start + at, processes=(proc,))
        for snap, at in zip(base, (0.0, 0.4, 10.4, 20.4), strict=True)
    ]
    make_cells = process_rows.cells
    made = _count_calls(monkeypatch, process_rows, "cells", lambda row: row.pid)
    app = app_for(source=replay_source(snaps))
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot)
        t = table(app)
        key = t.order[0]
        assert t.cell(key, "time").plain == "50s"
        made.clear()
        row_before = t._row_cells(0)[1]
        app.advance()  # 50.4 s: the same text, the same row
        await pilot.pause()
        assert t.cell(key, "time").plain == "50s"
        assert t._row_cells(0)[1] is row_before
        for expected in ("1:00", "1:10"):
            app.advance()
            await pilot.pause()
            assert t.cell(key, "time").plain == expected
            # the row equals one made from scratch, and no row was made from scratch
            fresh = make_cells(t.row(key), t._now_s)  # type: ignore[arg-type]
            assert t._row_cells(0)[1] == tuple(fresh[i] for i in t._indices)
            assert expected in t.render_line(1).text
        assert made == []


async def test_a_running_monitor_trims_its_heap(monkeypatch: pytest.MonkeyPatch) -> None:
    from gputui.tui import footprint

    trims: list[bool] = []
    monkeypatch.setattr(footprint, "trim", lambda: trims.append(True) or True)
    monkeypatch.setattr(footprint, "FIRST_TRIM_S", 0.01)
    monkeypatch.setattr(footprint, "TRIM_EVERY_S", 0.05)
    import gc

    app = app_for()
    before = gc.get_threshold()
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await started(pilot)
            assert trims == []  # headless (tests, screenshots): no housekeeping
            assert gc.get_threshold() == before
            app.start_housekeeping()
            # the young generation is collected ten times less often, the others as before
            assert gc.get_threshold() == (max(before[0], footprint.YOUNG_THRESHOLD), *before[1:])
            await wait_for(pilot, lambda: len(trims) >= 3)  # once at start, then every interval
    finally:
        gc.set_threshold(*before)


async def test_the_findings_bar_shows_the_sessions_findings() -> None:
    """What the session works out (its cadence: tests/unit/test_monitor_session.py)
    is what the bar draws."""
    app = make_app(replay_source(SNAPSHOTS), 3600.0, autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        app.advance(3)
        await pilot.pause()
        assert app.screen.query_one(FindingsBar).items is app.session.current.findings


async def test_the_interval_has_one_holder_the_poller() -> None:
    """+ and - set the poller's interval, which the header, the graphs and the
    findings' cadence read: no other copy of it is kept to go stale."""
    async with app_for(interval_s=1.0).run_test() as pilot:
        app = await started(pilot)
        await pilot.press("plus")
        assert app.session.poller.interval_s == 2.0
        assert not hasattr(app, "interval_s")
        assert "interval_s" not in vars(app.session)
        app.screen.refresh_data()  # type: ignore[attr-defined]
        assert app.screen.query_one(HeaderPanel).state.interval_s == 2.0
