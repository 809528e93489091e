"""Repaint a widget's lines without the round trip through its own message queue.

``Widget.refresh(*regions)`` marks the regions dirty, then prompts the widget:
its message loop wakes, goes idle, and only then posts an ``Update`` to the
screen, whose loop wakes in turn to schedule the drawing.  A monitor whose
panels each change a few lines a second paid two messages and two wake-ups per
panel per refresh before any line was drawn.  :func:`repaint` marks the regions
exactly as ``refresh`` does and puts the widget among the screen's dirty
widgets itself (what the screen's ``Update`` handler does), then prompts the
screen once: one wake-up for all the panels of a refresh.

Where the widget has more pending than a repaint (a layout, a scroll, a style
refresh, a repaint already asked for), is not mounted or has no screen, or
where this Textual lacks what this relies on, it is ``widget.refresh`` as
before.  ``tests/tui/test_tui_compositor.py`` feeds every update of the monitor
to a model terminal and compares it with a whole drawing of the screen.
:func:`draw_now` goes one step further for the monitor: the dirty widgets are
drawn at once, in the same turn of the event loop as the snapshot.  Around its
snapshot's repaints the monitor holds the screen's prompt
(:func:`held_prompts`): a screen that ``draw_now`` drew is not prompted at all
(its prompt would only wake it to find nothing to draw, one more message and an
``Idle`` event a second), and one that it did not draw is prompted once at the
end, as ``repaint`` would have.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

from textual.geometry import Region
from textual.screen import Screen
from textual.widget import Widget

#: what repaint reads and sets on a widget (Textual 8's)
_WIDGET_NEEDS = (
    "_set_dirty",
    "_layout_cache",
    "_rich_style_cache",
    "clear_cached_dimensions",
    "_repaint_required",
    "_layout_required",
    "_scroll_required",
    "_refresh_styles_required",
    "_is_mounted",
    "_closing",
)


@functools.cache
def supported() -> bool:
    """This Textual has what :func:`repaint` relies on."""
    probe = Widget()
    return all(hasattr(probe, name) for name in _WIDGET_NEEDS) and hasattr(Screen, "_on_update")


def repaint(widget: Widget, *regions: Region) -> None:
    """``widget.refresh(*regions)`` (the whole widget when none), the screen told
    at once (see the module's notes)."""
    if not supported() or not _plain_repaint(widget):
        widget.refresh(*regions)
        return
    try:
        screen = widget.screen
    except Exception:  # no screen (NoScreen) or being torn down: Textual's way
        widget.refresh(*regions)
        return
    dirty = getattr(screen, "_dirty_widgets", None)
    compositor = getattr(screen, "_compositor", None)
    if dirty is None or compositor is None or screen not in compositor:
        widget.refresh(*regions)
        return
    widget._layout_cache.clear()
    widget._set_dirty(*regions)
    widget.clear_cached_dimensions()
    widget._rich_style_cache.clear()
    if widget.display:
        dirty.add(widget)
        if _held:
            _held[-1].add(screen)  # prompted at the end of the hold, unless drawn
        else:
            screen.check_idle()


#: the screens repainted inside each :func:`held_prompts` under way, innermost last
_held: list[set[Screen[object]]] = []


@contextlib.contextmanager
def held_prompts() -> Iterator[None]:
    """Repaints inside prompt no screen; on the way out, each screen they
    repainted and :func:`draw_now` did not draw meanwhile is prompted once (its
    dirty widgets drawn by Textual, as after a plain ``repaint``).  On the
    event loop's thread, as every repaint."""
    screens: set[Screen[object]] = set()
    _held.append(screens)
    try:
        yield
    finally:
        _held.pop()  # holds nest: this one is the innermost
        for screen in screens:
            screen.check_idle()


def _plain_repaint(widget: Widget) -> bool:
    """The widget is mounted and has nothing pending but what a repaint does."""
    return bool(
        widget._is_mounted
        and not widget._closing
        and not widget._repaint_required
        and not widget._layout_required
        and not widget._scroll_required
        and not widget._refresh_styles_required
    )


#: what draw_now reads on a screen (Textual 8's)
_SCREEN_NEEDS = (
    "_on_timer_update",
    "_layout_required",
    "_scroll_required",
    "_repaint_required",
    "_recompose_required",
    "_dirty_widgets",
    "_compositor",
)


def draw_now(screen: Screen[object]) -> bool:
    """Draw the lines of ``screen``'s dirty widgets now, as its update timer
    would a moment later; False (Textual's way) when more than a repaint is
    pending.

    The monitor calls it once a snapshot is on its panels.  Textual's way, the
    screen's prompt wakes it, its idle handler resumes its update timer, and the
    timer's task sleeps to its next tick before the same drawing: three turns
    of the event loop between the data and the terminal."""
    if not supported() or not all(hasattr(screen, name) for name in _SCREEN_NEEDS):
        return False  # a Textual whose screen differs: its own way, never a crash
    if (
        not screen.is_current
        or screen.app._batch_count
        or screen._layout_required
        or screen._scroll_required
        or screen._repaint_required
        or screen._recompose_required
        or not screen._dirty_widgets
    ):
        return False
    # a widget asked for a layout whose message has not reached the screen yet:
    # Textual's update, a moment later, draws once with the new layout
    if any(widget._layout_required for widget in screen._compositor.visible_widgets):
        return False
    screen._on_timer_update()
    if _held:
        _held[-1].discard(screen)  # drawn: no prompt to wake it for nothing
    return True
