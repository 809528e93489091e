"""Argument types shared by the sub-commands and the monitor's own options.

Each turns one command-line word into a value or raises
``argparse.ArgumentTypeError`` with a short reason; the parser reports it as one
line with exit status 2 (``gputui.cli``).  Ranges are checked here, before any
work is done, so that a bad value never reaches a socket or a device.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gputui import fmt
from gputui.errors import GputuiError

#: a pid as Linux can have one (pid_max is at most 2^22)
MAX_PID = 2**22


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}")
    return value


def plain_number(value: float) -> str:
    """``value`` as the help texts write a range's ends: ``0.1``, ``31622400``
    (never ``3.16224e+07``)."""
    if value == int(value):
        return str(int(value))
    return f"{value:.6f}".rstrip("0")


def seconds(lo: float, hi: float) -> Callable[[str], float]:
    """A number of seconds in [lo, hi]."""

    def parse(text: str) -> float:
        value = _number(text, "a number of seconds")
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(
                f"must be between {plain_number(lo)} and {plain_number(hi)} s, got {text}"
            )
        return value

    parse.__name__ = "seconds"
    return parse


def integer(
    lo: int,
    hi: int,
    what: str = "an integer",
    outside: str = "must be between {lo} and {hi}, got {text}",
) -> Callable[[str], int]:
    """An integer in [lo, hi]; ``outside`` says one out of range (``{text}``,
    ``{lo}``, ``{hi}``)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(outside.format(text=text, lo=lo, hi=hi))
        return value

    parse.__name__ = "integer"
    return parse


def speed(text: str) -> float:
    """A replay speed: 0.01 .. 1000."""
    value = _number(text, "a number")
    if not 0.01 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"must be between 0.01 and 1000, got {text}")
    return value


#: a process id: 1 .. 2^22
pid = integer(1, MAX_PID, "a process id", "not a process id: {text} ({lo}..{hi})")


#: the sampling interval: at least 0.1 s (GPM needs that between readings), at
#: most 30 s (what the + key reaches)
interval = seconds(0.1, 30.0)


# -- flags several commands share, said once ----------------------------------------------------
#: the monitor's embedded recordings (``--demo NAME`` of the monitor, ``record``,
#: ``exporter`` and ``serve``: gputui.recording.replay's DEMO_RESOURCES), the
#: default first
MONITOR_DEMOS = {
    "h100": "one H100, a transformer's training and a second process",
    "ddp": "two H100s, DDP with NCCL",
}


def add_demo(
    group: Any, demos: Mapping[str, str], checked: bool = True, verb: str = "play"
) -> None:
    """``--demo [NAME]``: one of the embedded recordings ``demos`` (name: what it
    shows), the first without a name.  ``checked=False``: the command checks the
    name itself (one with a positional argument: ``--demo 123`` is a pid).
    ``verb``: what the command does with it (play, serve, re-record)."""
    names = list(demos)
    listed = "; ".join(f"{name}: {what}" for name, what in demos.items())
    group.add_argument(
        "--demo",
        nargs="?",
        const=names[0],
        choices=names if checked else None,
        metavar="NAME",
        help=f"{verb} an embedded recording of a real session ({listed}; default {names[0]})",
    )


def add_speed(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--speed",
        type=speed,
        default=1.0,
        metavar="X",
        help="replay speed, 0.01-1000 (default 1)",
    )


def add_interval(parser: argparse.ArgumentParser) -> None:
    """The monitor's and the exporter's sampling interval (the range the type checks)."""
    parser.add_argument(
        "--interval",
        type=interval,
        default=None,
        metavar="S",
        help="sampling interval in seconds, 0.1-30 (default 1, or a recording's own)",
    )


def add_seconds(
    parser: Any, flag: str, lo: float, hi: float, says: str, default: float | None = None
) -> None:
    """An option of S seconds in [lo, hi] (``says``: its help, with the range and
    the default the command takes where it is left out)."""
    parser.add_argument(flag, type=seconds(lo, hi), default=default, metavar="S", help=says)


def add_switches(parser: Any, *switches: tuple[str, str]) -> None:
    """On/off options, ``(flag, help)`` each, in the order given (off by default)."""
    for flag, says in switches:
        parser.add_argument(flag, action="store_true", help=says)


def add_ascii(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ascii", action="store_true", help="draw with ASCII characters only (plain terminals)"
    )


def try_demo(message: str, command: str) -> str:
    """A driver's error (``...; try 'gputui --demo'``) with the demo of the
    sub-command that met it suggested instead: ``try 'gputui exporter --demo'``."""
    from gputui.nvml.startup import TRY_DEMO

    return message.replace(TRY_DEMO, f"try '{command}'")


# -- files a command will write -----------------------------------------------------------------
def check_writable(prog: str, path: str, what: str = "recording") -> None:
    """Raise (exit status 2, one line) unless ``path`` can be created or overwritten.

    Checked before any screen opens or any job is connected to: a recording that
    cannot be written is said at once, not found out once the session is over.
    The file itself is created only when the first thing is written to it."""
    problem = _why_not_writable(Path(path))
    if problem is not None:
        raise GputuiError(f"{prog}: cannot write {what} {fmt.clean(path)}: {problem}")


def _why_not_writable(path: Path) -> str | None:
    if path.is_dir():
        return "it is a directory"
    if path.exists():  # overwritten: a regular file, or a device such as /dev/null
        return None if os.access(path, os.W_OK) else "permission denied"
    if path.is_symlink():
        return "a link to nothing"
    parent = path.parent
    if not parent.exists():
        return f"no directory {fmt.clean(str(parent))}"
    if not parent.is_dir():
        return f"{fmt.clean(str(parent))} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"permission denied in {fmt.clean(str(parent))}"
    return None


class ExamplesFormatter(argparse.HelpFormatter):
    """Paragraphs wrapped to the terminal; a text of several lines (a list of
    examples, of sub-commands) laid out line by line to the terminal's width
    (``reports.text.help_block``: an example's description under its column,
    or under the example where the width leaves no room)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            from gputui.reports.text import help_block

            lines = help_block(text, max(20, width - len(indent)))
            return "".join(indent + line + "\n" for line in lines)
        return super()._fill_text(text, width, indent)


def command(
    sub: Any, name: str, summary: str, description: str, examples: str | None = None
) -> argparse.ArgumentParser:
    """Add sub-command ``name``: ``summary`` is its line in ``gputui --help``,
    ``description`` heads its own help (wrapped), ``examples`` ends it (kept as
    written when it has several lines)."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=summary,
        description=description,
        epilog=examples,
        formatter_class=ExamplesFormatter,
    )
    return parser
