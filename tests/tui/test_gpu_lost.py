"""A GPU that falls off the bus in the middle of a live monitor session: the
monitor keeps running, marks that GPU lost and says so, and the other GPUs keep
updating (NVML through the fake binding, the real collector, source and app)."""

from __future__ import annotations

from gputui.host.collector import HostCollector
from gputui.nvml.collector import NvmlCollector
from gputui.sources.live import LiveSource
from gputui.tui.app import make_app
from gputui.tui.widgets.devices import DevicePanel
from gputui.tui.widgets.panels import HeaderPanel
from tests.helpers.fake_nvml import GPU_IS_LOST, FakeNvml, a100, h100


async def test_a_gpu_lost_mid_session_is_marked_and_the_others_update() -> None:
    fake = FakeNvml([h100(), a100()])
    source = LiveSource(gpu=NvmlCollector(fake), host=HostCollector())
    app = make_app(source, interval_s=3600.0, autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        app.advance(2)
        await pilot.pause()
        panel = app.screen.query_one(DevicePanel)
        assert "LOST" not in panel.plain and "97%" in panel.plain

        fake.fail("nvmlDeviceGetPowerUsage", GPU_IS_LOST, device=1)
        fake.devices[0].util_gpu = 12  # the healthy GPU moves on
        app.advance(1)
        await pilot.pause()
        text = panel.plain
        assert "GPU 1  NVIDIA A100-SXM4-40GB  LOST: not answering" in text
        assert "GPU 0" in text and "12%" in text and "97%" not in text
        header = app.screen.query_one(HeaderPanel).plain
        assert "GPU 1" in header and "lost" in header

        fake.devices[0].util_gpu = 55  # and keeps moving; the lost one stays lost
        app.advance(3)
        await pilot.pause()
        text = panel.plain
        assert "55%" in text and "LOST: not answering" in text
        assert app.session.snapshot_count == 6 and app.is_running
        lost = [d for d in app.session.current.snapshot.devices if d.lost]  # type: ignore[union-attr]
        assert [d.index for d in lost] == [1]


async def test_the_sampler_thread_survives_a_lost_gpu() -> None:
    """The same through the sampler thread the real monitor runs."""
    from tests.helpers.synthetic import wait_for

    fake = FakeNvml([h100(), a100()])
    source = LiveSource(gpu=NvmlCollector(fake), host=HostCollector())
    app = make_app(source, interval_s=0.05)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.session.snapshot_count >= 2)
        fake.fail("nvmlDeviceGetUtilizationRates", GPU_IS_LOST, device=0)
        seen = app.session.snapshot_count
        await wait_for(pilot, lambda: app.session.snapshot_count >= seen + 3)
        devices = app.session.current.snapshot.devices  # type: ignore[union-attr]
        assert [d.lost for d in devices] == [True, False]
        assert app.session.current.poll_error is None
        assert "GPU 0" in app.screen.query_one(HeaderPanel).plain
