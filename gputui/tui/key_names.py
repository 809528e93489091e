"""Textual's answers about key names, without Unicode's name database.

To build the footer and to route a key, Textual asks which character a key
name stands for (``key_to_character("question_mark")``) and how to show it
(``format_key("slash")``).  It answers with ``unicodedata.lookup``, a search of
Unicode's character names.  The search reads the pages of the names database
that lie on its way, and a name that is no character's ("slash", "f1", "s")
reads the most: the monitor's first frame made about 0.7 MB of that table
resident, a screen that never shows a Unicode name.

This module answers for the names of the keys gputui's screens and Textual's
widgets bind, from tables written here, and asks Textual for any other name.
Each answer in the tables is Textual's own, as the tests check against Textual's
functions.  :func:`install` puts the two functions where Textual's screens and
apps call them; it leaves Textual as it is where it does not have them there.
"""

from __future__ import annotations

from collections.abc import Callable

import textual.app
import textual.keys
import textual.screen

#: key name -> the character it stands for (None: none), as Textual's
#: ``key_to_character`` says
KEY_CHARACTERS: dict[str, str | None] = {
    "tab": "\t",
    "escape": "\x1b",
    "enter": None,
    "backspace": "\x08",
    "delete": "\x7f",
    "insert": None,
    "space": " ",
    "up": None,
    "down": None,
    "left": None,
    "right": None,
    "home": None,
    "end": None,
    "pageup": None,
    "pagedown": None,
    **{f"f{n}": None for n in range(1, 13)},
    "minus": None,
    "plus": None,
    "slash": None,
    "backslash": None,
    "underscore": None,
    "at": None,
    "equals_sign": "=",
    "question_mark": "?",
    "exclamation_mark": "!",
    "quotation_mark": '"',
    "number_sign": "#",
    "dollar_sign": "$",
    "percent_sign": "%",
    "ampersand": "&",
    "apostrophe": "'",
    "left_parenthesis": "(",
    "right_parenthesis": ")",
    "asterisk": "*",
    "comma": ",",
    "full_stop": ".",
    "colon": ":",
    "semicolon": ";",
    "less_than_sign": "<",
    "greater_than_sign": ">",
    "left_square_bracket": "[",
    "right_square_bracket": "]",
    "circumflex_accent": "^",
    "grave_accent": "`",
    "left_curly_bracket": "{",
    "vertical_line": "|",
    "right_curly_bracket": "}",
    "tilde": "~",
}

#: key name -> what shows it, as Textual's ``format_key`` says (a letter or a
#: digit shows as itself)
KEY_DISPLAYS: dict[str, str] = {
    # a punctuation mark shows as itself; the names below as they say
    **{name: char for name, char in KEY_CHARACTERS.items() if char and char.isprintable()},
    "tab": "tab",
    "escape": "esc",
    "enter": "⏎",
    "backspace": "⌫",
    "delete": "del",
    "insert": "insert",
    "space": "space",
    "up": "↑",
    "down": "↓",
    "left": "←",
    "right": "→",
    "home": "home",
    "end": "end",
    "pageup": "pgup",
    "pagedown": "pgdn",
    **{f"f{n}": f"f{n}" for n in range(1, 13)},
    "minus": "-",
    "plus": "+",
    "slash": "/",
    "backslash": "\\",
    "underscore": "_",
    "at": "@",
}

_ASK = object()


def _key_to_character(textual: Callable[[str], str | None]) -> Callable[[str], str | None]:
    def key_to_character(key: str) -> str | None:
        known = KEY_CHARACTERS.get(key, _ASK)
        return textual(key) if known is _ASK else known  # type: ignore[return-value]

    key_to_character.__wrapped__ = textual  # type: ignore[attr-defined]
    return key_to_character


def _format_key(textual: Callable[[str], str]) -> Callable[[str], str]:
    def format_key(key: str) -> str:
        if len(key) == 1 and key.isascii() and key.isalnum():
            return key
        shown = KEY_DISPLAYS.get(key)
        return textual(key) if shown is None else shown

    format_key.__wrapped__ = textual  # type: ignore[attr-defined]
    return format_key


def install() -> bool:
    """Answer Textual's screens and apps from the tables; True if done (or
    done before)."""
    done = True
    for module, name, made in (
        (textual.screen, "key_to_character", _key_to_character),
        (textual.app, "format_key", _format_key),
    ):
        current = getattr(module, name, None)
        original = getattr(textual.keys, name, None)
        if current is None or original is None:
            done = False
        elif current is original:
            setattr(module, name, made(original))
        elif getattr(current, "__wrapped__", None) is not original:
            done = False  # someone else's: left as it is
    return done
