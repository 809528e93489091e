"""The monitor with processes in containers: the CONTAINER column, its sort and
filter, the detail screen, and no signal to a host pid."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

from gputui.snapshot.model import ContainerInfo, PodInfo
from gputui.tui.screens.detail import DetailPanel, ProcessDetailScreen
from gputui.tui.screens.dialogs import SignalDialog
from gputui.tui.screens.monitor import MonitorScreen
from tests.helpers.synthetic import live_like_source, make_snapshots, wait_for
from tests.tui.test_tui_app import app_for, notes, started, table

ID = "5dace3de0735f73d2b5048f12d41a71741a02e49668de921fdae62f7e65dc498"
POD = ContainerInfo(
    "cri-o", ID, name="train", pod=PodInfo("7d4424e6-bb13", "trainer-0", "ml", "burstable")
)
HOSTILE = ContainerInfo("docker", ID, name="x\x1b[31mred\x07")


def _snapshots(host_pid: int = 999_999) -> list:
    out = []
    for snap in make_snapshots(n_gpus=2, n_procs=4, n_steps=3):
        procs = list(snap.processes)
        procs[0] = dataclasses.replace(procs[0], container=POD)
        procs[1] = dataclasses.replace(procs[1], container=HOSTILE)
        procs[2] = dataclasses.replace(
            procs[2], pid=host_pid, host_pid=host_pid, user=None, cmdline=None
        )
        out.append(dataclasses.replace(snap, processes=tuple(procs)))
    return out


async def test_column_sort_filter_and_detail() -> None:
    snaps = _snapshots()
    async with app_for(source=live_like_source(snaps)).run_test(size=(120, 40)) as pilot:
        app = await started(pilot)
        t = table(app)
        assert "container" in t.column_keys
        cells = {k: str(t.cell(k, "container")) for k in t.order}
        shown = set(cells.values())
        assert "ml/trainer-0" in shown and "host pid" in shown
        assert not any("\x1b" in c or "\x07" in c for c in cells.values())
        # sorted by the column: the processes in containers first, the others after
        t.post_message(t.HeaderSelected("container"))
        await pilot.pause()
        assert t.sort_spec.column == "container"
        first = str(t.cell(t.order[0], "container"))
        assert first == "ml/trainer-0"
        # the filter matches the pod's namespace and name
        await pilot.press("slash", *"trainer-0", "enter")
        await pilot.pause()
        assert len(t.order) == 1
        t.move_cursor(0)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ProcessDetailScreen))
        text = app.screen.query_one(DetailPanel).plain
        assert "Container" in text and "trainer-0" in text and "burstable" in text
        await pilot.press("escape")
        assert isinstance(app.screen, MonitorScreen)


async def test_no_column_without_containers() -> None:
    async with app_for().run_test(size=(120, 40)) as pilot:
        app = await started(pilot)
        assert "container" not in table(app).column_keys


async def test_a_host_pid_is_never_signalled() -> None:
    # a real process whose pid stands for a host pid this namespace does not show
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        source = live_like_source(_snapshots(host_pid=child.pid))
        app = app_for(source=source)
        async with app.run_test(size=(120, 40)) as pilot:
            seen = notes(app)
            await started(pilot)
            t = table(app)
            # keyed apart from a process of this namespace with the same number
            key = next(k for k in t.order if k.endswith(f"|-{child.pid}"))
            assert t.select_key(key)
            await pilot.press("k")
            await pilot.pause()
            assert not isinstance(app.screen, SignalDialog)
            assert any("is the host's" in n for n in seen)
            assert child.poll() is None
    finally:
        child.kill()
        child.wait()
