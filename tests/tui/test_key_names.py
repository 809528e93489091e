"""Textual's key names answered from gputui's tables (gputui.tui.key_names):
the same answers as Textual's, without a search of Unicode's names."""

from __future__ import annotations

import string
import subprocess
import sys

import textual.app
import textual.keys
import textual.screen

from gputui.tui import key_names
from tests.helpers.deadlines import RUN_S


def test_every_character_in_the_table_is_textuals() -> None:
    for key, char in key_names.KEY_CHARACTERS.items():
        assert char == textual.keys.key_to_character.__wrapped__(key), key


def test_every_display_in_the_table_is_textuals() -> None:
    for key, shown in key_names.KEY_DISPLAYS.items():
        assert shown == textual.keys.format_key.__wrapped__(key), key
    for key in string.ascii_letters + string.digits:
        assert key_names._format_key(textual.keys.format_key)(key) == key
        assert textual.keys.format_key.__wrapped__(key) == key


def test_installed_they_answer_as_textual_for_any_key() -> None:
    assert key_names.install() is True
    assert key_names.install() is True  # once is enough
    keys = [*key_names.KEY_CHARACTERS, "ctrl+c", "shift+tab", "a", "?", "no_such_key", "escape,q"]
    for key in keys:
        assert textual.screen.key_to_character(key) == textual.keys.key_to_character(key), key
        assert textual.app.format_key(key) == textual.keys.format_key(key), key
    assert textual.screen.key_to_character is not textual.keys.key_to_character


#: the monitor's first frames with unicodedata.lookup counted
LOOKUPS = """
import sys, unicodedata
calls = []
real = unicodedata.lookup
pressing = []  # the test's own key presses look their keys up (Pilot.press): not counted


def counted(name):
    if not pressing:
        calls.append(name)
    return real(name)


unicodedata.lookup = counted
from gputui.tui import key_names
from tests.helpers.demo_screen import run_demo_screen
if sys.argv[1] == "control":
    key_names.install = lambda: False  # Textual's own answers
run_demo_screen(["question_mark", "escape"], pressing)  # the help screen: its keys too
print("LOOKUPS", len(calls))
"""


def lookups(mode: str) -> int:
    proc = subprocess.run(
        [sys.executable, "-c", LOOKUPS, mode], capture_output=True, text=True, timeout=RUN_S
    )
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("LOOKUPS "))
    return int(line.split()[1])


def test_the_monitor_and_its_help_search_no_unicode_name() -> None:
    assert lookups("control") > 0  # what Textual's own answers search
    assert lookups("installed") == 0
