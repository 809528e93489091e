"""The attach screen's phase table before any step: it says where steps come
from, wrapped to the panel's width (it was cut at the panel's edge)."""

from __future__ import annotations

import pytest
from rich.cells import cell_len

from gputui.tui.attach.phase_table import PhaseTable


@pytest.mark.parametrize("width", [30, 40, 60])
def test_no_steps_says_where_steps_come_from_within_the_width(width: int) -> None:
    text = PhaseTable().build(width).plain
    _head, *hint = text.split("\n")
    assert all(cell_len(line) <= width for line in hint)
    words = " ".join(" ".join(hint).split())
    assert words.startswith("no steps yet: a step ends at an optimizer's step()")
    assert "gputui.hook.step()" in words
