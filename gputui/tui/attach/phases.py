"""How the attach views draw a step's phases: a colour each (the well-known
phases their own, a user's phases from a palette) and, in ASCII mode, a letter."""

from __future__ import annotations

from collections.abc import Sequence

PHASE_STYLES = {
    "data": "yellow",
    "forward": "green",
    "backward": "cyan",
    "comm": "blue",
    "optimizer": "magenta",
    "other": "bright_black",
}
USER_STYLES = ("bright_red", "bright_blue", "orange3", "bright_green", "plum2")


def phase_style(name: str, order: Sequence[str]) -> str:
    if name in PHASE_STYLES:
        return PHASE_STYLES[name]
    users = [p for p in order if p not in PHASE_STYLES]
    index = users.index(name) if name in users else 0
    return USER_STYLES[index % len(USER_STYLES)]


def phase_letter(name: str) -> str:
    """The ASCII-mode fill of a phase: its initial (``:`` for other)."""
    first = name[:1]
    if name == "other":
        return ":"
    return first if first.isascii() and first.isprintable() and first != " " else "?"
