"""repaint(): a widget's regions marked as refresh marks them, the screen told at
once; anything more pending goes through Textual's refresh."""

from __future__ import annotations

import pytest
from rich.text import Text
from textual.app import App, ComposeResult
from textual.geometry import Region

from gputui.tui.compositor import use_line_compositor
from gputui.tui.widgets import repaint as repaint_module
from gputui.tui.widgets.repaint import draw_now, repaint
from gputui.tui.widgets.text_panel import TextPanel


class Lines(TextPanel):
    def __init__(self) -> None:
        super().__init__(id="lines")
        self.rows = ["first", "second", "third"]

    def build_lines(self, width: int) -> list[Text]:
        return [Text(row) for row in self.rows]


class Host(App[None]):
    def compose(self) -> ComposeResult:
        yield Lines()

    def on_mount(self) -> None:
        assert use_line_compositor(self.screen)  # the monitor's: only written lines drawn


def _drawn(panel: Lines) -> list[Region]:
    """The crops the panel is asked to draw from now on."""
    crops: list[Region] = []
    original = panel.render_lines

    def record(crop: Region) -> list[object]:
        crops.append(crop)
        return original(crop)  # type: ignore[return-value]

    panel.render_lines = record  # type: ignore[method-assign, assignment]
    return crops


def test_this_textual_is_supported() -> None:
    # the monitor's panels take the direct way on the Textual the project pins
    assert repaint_module.supported()


async def test_repaint_marks_the_lines_and_tells_the_screen_without_a_message() -> None:
    app = Host()
    async with app.run_test(size=(40, 6)) as pilot:
        await pilot.pause()
        panel = app.query_one(Lines)
        panel.redraw()
        await pilot.pause()
        posted: list[object] = []
        original = panel.post_message

        def record(message: object) -> bool:
            posted.append(message)
            return original(message)  # type: ignore[arg-type]

        panel.post_message = record  # type: ignore[method-assign]
        panel.rows[1] = "changed"
        panel._lines = [Text(row) for row in panel.rows]
        repaint(panel, Region(0, 1, 40, 1))
        assert panel in app.screen._dirty_widgets  # type: ignore[attr-defined]
        assert not panel._repaint_required  # type: ignore[attr-defined]
        assert posted == []  # no prompt: the screen was told
        crops = _drawn(panel)
        await pilot.pause()
        # the screen drew the changed line, and only it
        assert [crop.y for crop in crops] == [1] and crops[0].height == 1
        assert panel.render_lines(Region(0, 1, 40, 1))[0].text.rstrip() == "changed"


async def test_a_pending_layout_goes_through_refresh() -> None:
    app = Host()
    async with app.run_test(size=(40, 6)) as pilot:
        await pilot.pause()
        panel = app.query_one(Lines)
        calls: list[tuple[object, ...]] = []
        original = panel.refresh

        def counted(*regions: Region, **kw: bool) -> Lines:
            calls.append(regions)
            return original(*regions, **kw)

        panel.refresh = counted  # type: ignore[method-assign]
        repaint(panel, Region(0, 0, 40, 1))
        assert calls == []  # the direct way
        await pilot.pause()
        panel._layout_required = True  # type: ignore[attr-defined]
        repaint(panel, Region(0, 0, 40, 1))
        assert calls == [(Region(0, 0, 40, 1),)]
        await pilot.pause()


async def test_without_what_it_relies_on_it_is_refresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(repaint_module, "supported", lambda: False)
    app = Host()
    async with app.run_test(size=(40, 6)) as pilot:
        await pilot.pause()
        panel = app.query_one(Lines)
        panel.rows[0] = "again"
        panel._lines = [Text(row) for row in panel.rows]
        repaint(panel, Region(0, 0, 40, 1))
        assert panel._repaint_required  # type: ignore[attr-defined]  # refresh's flag
        crops = _drawn(panel)
        await pilot.pause()
        assert [crop.y for crop in crops] == [0]


async def test_draw_now_draws_the_changed_line_at_once() -> None:
    app = Host()
    async with app.run_test(size=(40, 6)) as pilot:
        await pilot.pause()
        panel = app.query_one(Lines)
        crops = _drawn(panel)
        assert not draw_now(app.screen)  # nothing dirty: nothing to draw
        panel.rows[2] = "now"
        panel._lines = [Text(row) for row in panel.rows]
        repaint(panel, Region(0, 2, 40, 1))
        assert draw_now(app.screen)
        # drawn before the event loop turned once: no pause in between
        assert [(crop.y, crop.height) for crop in crops] == [(2, 1)]
        assert not app.screen._dirty_widgets  # type: ignore[attr-defined]
        await pilot.pause()
        assert [(crop.y, crop.height) for crop in crops] == [(2, 1)]  # and only once


async def test_draw_now_leaves_a_pending_layout_to_textual() -> None:
    app = Host()
    async with app.run_test(size=(40, 6)) as pilot:
        await pilot.pause()
        panel = app.query_one(Lines)
        repaint(panel, Region(0, 0, 40, 1))
        panel._layout_required = True  # type: ignore[attr-defined]  # its Layout on the way
        assert not draw_now(app.screen)
        assert panel in app.screen._dirty_widgets  # type: ignore[attr-defined]
        panel._layout_required = False  # type: ignore[attr-defined]
        app.screen._layout_required = True  # type: ignore[attr-defined]
        assert not draw_now(app.screen)
        app.screen._layout_required = False  # type: ignore[attr-defined]
        assert draw_now(app.screen)
        await pilot.pause()


def test_draw_now_on_a_screen_without_what_it_reads_is_textuals_way() -> None:
    import types

    drawn: list[bool] = []
    # a screen of another Textual: current, with a timer update, but none of the flags
    other = types.SimpleNamespace(is_current=True, _on_timer_update=lambda: drawn.append(True))
    assert draw_now(other) is False  # type: ignore[arg-type]
    assert drawn == []


def _prompts(app: Host) -> list[object]:
    """The prompts posted to the app's screen from now on."""
    from textual.messages import Prompt

    prompts: list[object] = []
    screen = app.screen
    original = screen.post_message

    def record(message: object) -> bool:
        if isinstance(message, Prompt):
            prompts.append(message)
        return original(message)  # type: ignore[arg-type]

    screen.post_message = record  # type: ignore[method-assign]
    return prompts


@pytest.mark.parametrize("layout_pending", [False, True])
async def test_a_held_prompt_goes_out_only_when_draw_now_did_not_draw(
    layout_pending: bool,
) -> None:
    app = Host()
    async with app.run_test(size=(40, 6)) as pilot:
        await pilot.pause()
        panel = app.query_one(Lines)
        prompts = _prompts(app)
        crops = _drawn(panel)
        with repaint_module.held_prompts():
            panel.rows[1] = "held"
            panel._lines = [Text(row) for row in panel.rows]
            repaint(panel, Region(0, 1, 40, 1))
            assert prompts == []  # held
            app.screen._layout_required = layout_pending  # type: ignore[attr-defined]
            assert draw_now(app.screen) is not layout_pending
            app.screen._layout_required = False  # type: ignore[attr-defined]
        # drawn: the screen is not woken for nothing; not drawn: prompted once
        assert len(prompts) == (1 if layout_pending else 0)
        await pilot.pause()
        # drawn once, by draw_now or by Textual woken by that prompt
        assert [(crop.y, crop.height) for crop in crops] == [(1, 1)]
        assert panel.render_lines(Region(0, 1, 40, 1))[0].text.rstrip() == "held"
        assert not repaint_module._held
