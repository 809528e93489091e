"""Every range an option's --help states is the range its type accepts.

The help is read as a user reads it (``--help``, unwrapped); for each option
whose help says ``LO-HI``, LO and HI must be accepted and anything just
outside refused.  Every ``--interval``, and every option of a checked-range
type, must state its range.
"""

from __future__ import annotations

import argparse
import re

import pytest

from gputui import cli

RANGE = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)-(\d[\d,]*(?:\.\d+)?)(?![\w.])")
#: the argument types of gputui.commands.args that check a range
RANGE_TYPES = {"seconds", "integer", "speed"}


def parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    out = [("gputui", cli.build_monitor_parser())]
    out += [(f"gputui {name}", cli.build_subcommand_parser(name)[1]) for name in cli.SUBCOMMANDS]
    return out


def option_help(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each option's help as ``--help`` prints it (wide enough not to wrap)."""
    text = parser.format_help()
    blocks = re.split(r"\n(?=  -)", text.split("options:", 1)[1])
    out: dict[str, str] = {}
    for block in blocks:
        words = " ".join(block.split())
        first = re.match(r"((?:-[\w-]+(?: [A-Z_]+)?(?:, )?)+)\s*(.*)", words)
        if first is None:
            continue
        for flag in re.findall(r"-[\w-]+", first.group(1)):
            out[flag] = first.group(2)
    return out


def options() -> list[tuple[str, argparse.Action, str]]:
    out = []
    for prog, parser in parsers():
        helps = option_help(parser)
        for action in parser._actions:
            if action.option_strings and action.option_strings[-1] in helps:
                out.append((prog, action, helps[action.option_strings[-1]]))
    return out


def _refused(convert: object, text: str) -> bool:
    try:
        convert(text)  # type: ignore[operator]
    except (argparse.ArgumentTypeError, ValueError, TypeError):
        return True
    return False


@pytest.fixture(autouse=True)
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")


def test_the_help_is_read() -> None:
    found = {(prog, a.option_strings[-1]) for prog, a, _ in options()}
    assert ("gputui", "--interval") in found and ("gputui exporter", "--interval") in found
    assert ("gputui attach", "--memory-entries") in found


def test_every_interval_states_its_range() -> None:
    intervals = [(prog, text) for prog, a, text in options() if "--interval" in a.option_strings]
    assert {prog for prog, _ in intervals} >= {
        "gputui",
        "gputui record",
        "gputui exporter",
        "gputui cluster",
    }
    assert [prog for prog, text in intervals if not RANGE.search(text)] == []


def test_every_checked_range_is_stated() -> None:
    missing = [
        f"{prog} {a.option_strings[-1]}"
        for prog, a, text in options()
        if getattr(a.type, "__name__", None) in RANGE_TYPES and not RANGE.search(text)
    ]
    assert missing == []


@pytest.mark.parametrize(
    ("prog", "action", "text"),
    [
        pytest.param(prog, a, text, id=f"{prog} {a.option_strings[-1]}")
        for prog, a, text in options()
        if RANGE.search(text)
    ],
)
def test_the_stated_range_is_the_accepted_range(
    prog: str, action: argparse.Action, text: str
) -> None:
    flag = action.option_strings[-1]
    lo_text, hi_text = (b.replace(",", "") for b in RANGE.findall(text)[0])
    convert = action.type
    assert convert is not None, f"{prog} {flag}: a stated range, but no type checks it"
    assert not _refused(convert, lo_text), f"{prog} {flag} refuses {lo_text} ({text})"
    assert not _refused(convert, hi_text), f"{prog} {flag} refuses {hi_text} ({text})"
    lo, hi = float(lo_text), float(hi_text)
    step = 0.001 * max(1.0, abs(lo)), 0.001 * max(1.0, abs(hi))
    for outside in (lo - 1, lo - step[0], hi + 1, hi + step[1]):
        shown = f"{outside:.6g}" if outside != int(outside) else str(int(outside))
        assert _refused(convert, shown), f"{prog} {flag} accepts {shown} ({text})"
