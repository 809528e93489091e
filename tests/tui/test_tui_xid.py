"""The monitor with a GPU that reported Xid errors: the device panel's flag and
line, and the finding with the code's meaning."""

from __future__ import annotations

import dataclasses

from gputui.snapshot.model import XidCount, XidEvent
from gputui.tui.widgets.devices import DevicePanel
from tests.helpers.synthetic import live_like_source, make_snapshots, wait_for
from tests.tui.test_tui_app import app_for, started

FELL = XidEvent(79, 1.7e9, 4242, "python\x1b[2J", "GPU has fallen off the bus.", "kernel log")


def _snapshots() -> list:
    out = []
    for snap in make_snapshots(n_gpus=2, n_procs=4, n_steps=3):
        devices = list(snap.devices)
        devices[1] = dataclasses.replace(
            devices[1], xid_errors=(FELL,), xid_counts=(XidCount(79, 1),), xid_sources=("nvml",)
        )
        devices[0] = dataclasses.replace(devices[0], xid_sources=())
        out.append(dataclasses.replace(snap, devices=tuple(devices)))
    return out


async def test_the_device_panel_shows_the_xid_and_the_unwatched_gpu() -> None:
    async with app_for(source=live_like_source(_snapshots())).run_test(size=(160, 50)) as pilot:
        app = await started(pilot)
        panel = app.screen.query_one(DevicePanel)
        await wait_for(pilot, lambda: "Xid 79" in panel.plain)
        text = panel.plain
        assert "Xid 79 (fell off the bus)" in text and "pid 4242" in text
        assert "\x1b" not in text
        assert "Xid errors not watched" in text
