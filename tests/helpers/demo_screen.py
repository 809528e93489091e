"""The monitor's screen over the demo, headless, in the calling process: for the
tests that look, in a fresh interpreter, at what a screen loads or calls."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence


def run_demo_screen(keys: Sequence[str] = (), pressing: list[bool] | None = None) -> None:
    """Run the monitor over the demo until its first snapshot is drawn, then
    press ``keys`` in turn; ``pressing`` holds True while a key is being pressed
    (the test driver's own handling of it)."""
    from gputui.recording.replay import ReplaySource
    from gputui.tui.app import make_app

    async def run() -> None:
        app = make_app(ReplaySource.demo(), interval_s=3600.0)
        async with app.run_test(size=(120, 40)) as pilot:
            for _ in range(600):
                if app.session.snapshot_count >= 1:
                    break
                await pilot.pause(0.05)
            await pilot.pause()
            assert app.session.snapshot_count >= 1, "no snapshot drawn"
            for key in keys:
                if pressing is not None:
                    pressing.append(True)
                await pilot.press(key)
                if pressing is not None:
                    pressing.clear()
                await pilot.pause()

    asyncio.run(run())
