"""The monitor with processes in Slurm jobs: the JOB column, its sort and
filter, and the detail screen's Slurm section."""

from __future__ import annotations

import dataclasses

from gputui.snapshot.model import SlurmJob
from gputui.tui.screens.detail import DetailPanel, ProcessDetailScreen
from gputui.tui.screens.monitor import MonitorScreen
from tests.helpers.synthetic import live_like_source, make_snapshots, wait_for
from tests.tui.test_tui_app import app_for, started, table

TRAIN = SlurmJob(4242, "0", name="train")
SWEEP = SlurmJob(38, "batch", name="sweep\x1b[31m", array_job_id=36, array_task_id=2)


def _snapshots() -> list:
    out = []
    for snap in make_snapshots(n_gpus=2, n_procs=4, n_steps=3):
        procs = list(snap.processes)
        procs[0] = dataclasses.replace(procs[0], slurm=TRAIN)
        procs[1] = dataclasses.replace(procs[1], slurm=SWEEP)
        out.append(dataclasses.replace(snap, processes=tuple(procs)))
    return out


async def test_job_column_sort_filter_and_detail() -> None:
    async with app_for(source=live_like_source(_snapshots())).run_test(size=(120, 40)) as pilot:
        app = await started(pilot)
        t = table(app)
        assert "job" in t.column_keys and "container" not in t.column_keys
        cells = {str(t.cell(k, "job")) for k in t.order}
        assert "4242.0 train" in cells and "" in cells
        assert not any("\x1b" in c for c in cells)
        t.post_message(t.HeaderSelected("job"))
        await pilot.pause()
        assert t.sort_spec.column == "job"
        assert str(t.cell(t.order[0], "job")).startswith("36_2.batch sweep")
        await pilot.press("slash", *"4242", "enter")
        await pilot.pause()
        assert len(t.order) == 1
        t.move_cursor(0)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ProcessDetailScreen))
        text = app.screen.query_one(DetailPanel).plain
        assert "Slurm" in text and "4242" in text and "a step of srun" in text
        await pilot.press("escape")
        assert isinstance(app.screen, MonitorScreen)


async def test_no_job_column_outside_slurm() -> None:
    async with app_for().run_test(size=(120, 40)) as pilot:
        app = await started(pilot)
        assert "job" not in table(app).column_keys
