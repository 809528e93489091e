"""Plain-text formatting shared by every view: units, bars, truncation, and the
one sanitizer for text that comes from outside gputui.

Everything here returns ``str`` and knows nothing of Rich or Textual (the TUI
styles these strings in ``gputui.tui``).  ``None`` (and NaN) is always "N/A".

Untrusted text: command lines, user and host names, GPU and driver names, what
a hook says about itself, kernel and op names, error texts, file paths.  On a
shared GPU server other users choose those strings, and the person running
gputui may be root.  :func:`clean` makes any of them safe to write to a
terminal: no control character or escape sequence gets through, a newline or
tab shows as ``\\n`` / ``\\t`` and never splits a row, and the length is
capped.  Every display path calls it; JSON output keeps the exact strings.
"""

from __future__ import annotations

import os
import time
import unicodedata
from typing import TextIO

NA = "N/A"

#: the longest untrusted string shown anywhere (a command line, a kernel name)
MAX_TEXT = 1000

_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
#: Unicode categories that are invisible or control the terminal or the text's
#: direction: controls (C0, DEL, C1), formats (bidi overrides, zero-width marks),
#: line/paragraph separators, surrogates, private use and unassigned code points.
_UNSAFE = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


def clean(text: object, limit: int = MAX_TEXT) -> str:
    """``text`` as one safe line for a terminal, at most ``limit`` characters.

    Control characters (C0, DEL, C1 such as ``\\x9b``), escape sequences (their
    ESC becomes the four characters ``\\x1b``), bidi overrides, zero-width and
    other invisible characters are shown as visible escapes; a longer text is cut
    and ends with ``…``.  ``None`` is "N/A".
    """
    if text is None:
        return NA
    if not isinstance(text, str):
        text = str(text)
    if len(text) > limit:
        text = text[:limit]
        cut = True
    else:
        cut = False
    if not text.isascii() or not text.isprintable():
        text = "".join(_escape(ch) for ch in text)
        if len(text) > limit:
            text = text[:limit]
            cut = True
    if cut:
        text = text[: max(0, limit - 1)] + ellipsis()
    return text


def _escape(ch: str) -> str:
    if " " <= ch <= "~":
        return ch
    known = _ESCAPES.get(ch)
    if known is not None:
        return known
    if unicodedata.category(ch) not in _UNSAFE:
        return ch
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def clean_all(items: object, limit: int = MAX_TEXT) -> str:
    """A command line (argv list) or any sequence of strings, cleaned and joined
    with spaces; a plain string is cleaned as it is."""
    if isinstance(items, str) or items is None:
        return clean(items, limit)
    try:
        joined = " ".join(items)  # type: ignore[arg-type]
    except TypeError:
        joined = None
    if joined is not None and len(joined) <= limit and joined.isascii() and joined.isprintable():
        # every word is printable ASCII and short: cleaning each would change nothing
        return joined
    try:
        parts = [clean(item, limit) for item in items]  # type: ignore[attr-defined]
    except TypeError:
        return clean(items, limit)
    return clean(" ".join(parts), limit)


def command(argv: object, name: str | None = None, limit: int = MAX_TEXT) -> str:
    """A process's command line (its argv, else its name), cleaned: another user
    chose it."""
    if argv:
        return clean_all(argv, limit)
    return clean(name, limit)


# -- numbers with units ------------------------------------------------------------------
def _missing(value: float | None) -> bool:
    return value is None or value != value


def pct(value: float | None, width: int = 0) -> str:
    """A percentage without decimals: '88%'."""
    text = NA if _missing(value) else f"{value:.0f}%"
    return text.rjust(width) if width else text


def size(value: float | None, width: int = 0) -> str:
    """Bytes in binary units, as nvidia-smi counts them: '9.4GiB', '512MiB', '0B'."""
    if _missing(value):
        text = NA
    else:
        number = float(value)  # type: ignore[arg-type]
        unit = "B"
        for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
            if abs(number) < 1024 or unit == "PiB":
                break
            number /= 1024
        text = f"{number:.0f}{unit}" if unit == "B" or abs(number) >= 100 else f"{number:.1f}{unit}"
    return text.rjust(width) if width else text


def signed_size(value: float) -> str:
    """A change in bytes with its sign: '+4.0MiB', '-512KiB'."""
    return ("+" if value >= 0 else "-") + size(abs(value))


def size_pair(used: float | None, total: float | None) -> str:
    """Used and total bytes in the total's unit, compactly: '28/80GiB',
    '3.5/20GiB' (for narrow bars; ``size`` elsewhere)."""
    if _missing(used) or _missing(total):
        return f"{size(used)}/{size(total)}"
    scale = 1.0
    unit = "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(float(total)) < 1024 * scale or unit == "PiB":  # type: ignore[arg-type]
            break
        scale *= 1024
    a, b = used / scale, total / scale  # type: ignore[operator]
    left = f"{a:.0f}" if abs(a) >= 10 or a == int(a) else f"{a:.1f}"
    right = f"{b:.0f}" if abs(b) >= 10 or b == int(b) else f"{b:.1f}"
    return f"{left}/{right}{unit}"


def rate(value: float | None) -> str:
    """Bytes per second in decimal units, as link speeds are quoted: '1.2GB/s'."""
    if _missing(value):
        return NA
    number = float(value)  # type: ignore[arg-type]
    unit = "B/s"
    for unit in ("B/s", "KB/s", "MB/s", "GB/s", "TB/s"):
        if abs(number) < 1000 or unit == "TB/s":
            break
        number /= 1000
    return f"{number:.0f}{unit}" if abs(number) >= 100 or unit == "B/s" else f"{number:.1f}{unit}"


def duration(seconds: float | None) -> str:
    """Elapsed time, compact: 45s, 12:03, 3:04:05, 2d03h."""
    if _missing(seconds) or seconds < 0:  # type: ignore[operator]
        return NA
    s = int(seconds)  # type: ignore[arg-type]
    if s < 60:
        return f"{s}s"
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}:{minutes:02d}:{s:02d}"
    return f"{minutes}:{s:02d}"


def ms(
    seconds: float | None,
    unit: bool = True,
    *,
    decimals: int | None = None,
    space: bool = False,
    missing: str = "-",
) -> str:
    """A duration given in seconds, shown in milliseconds: the one formatter of
    step, phase and cost times.

    By default three significant digits: '0.25ms', '4.21ms', '45.2ms', '709ms';
    ten seconds and more as '12.3s'.  ``decimals=N`` shows a fixed N decimals,
    always in milliseconds (a column of like figures: '45.2ms', '709.0ms'; a
    cost: '38.2 ms').  ``unit=False`` leaves out 'ms' (table columns headed in
    ms), ``space`` puts a space before it, ``missing`` is what None (or NaN)
    shows.
    """
    if _missing(seconds):
        return missing
    value = float(seconds) * 1000.0  # type: ignore[arg-type]
    if decimals is not None:
        # to the picosecond first: a cost the hook measured in milliseconds,
        # divided by 1000 to come here, rounds as those milliseconds (511.5 / 1000
        # * 1000 is 511.4999...)
        text = f"{round(value, 9):.{decimals}f}"
    elif abs(value) >= 10000:
        return f"{value / 1000:.1f}" + (" s" if space else "s")
    elif abs(value) >= 100:
        text = f"{value:.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.2f}"
    if not unit:
        return text
    return text + (" ms" if space else "ms")


def per_step(count: float | None) -> str:
    """A count per step (calls, launches) as every report prints it: '173', '14',
    '2.3', '0.3'."""
    if _missing(count):
        return "-"
    value = float(count)  # type: ignore[arg-type]
    return f"{value:,.0f}" if value >= 10 else f"{value:.1f}".removesuffix(".0")


def us(micros: float | None) -> str:
    """A kernel or op time given in microseconds: '12.3us', '4.5ms', '120ms'."""
    if _missing(micros):
        return "-"
    value = float(micros)  # type: ignore[arg-type]
    if abs(value) >= 100_000:
        return f"{value / 1000:.0f}ms"
    if abs(value) >= 1000:
        return f"{value / 1000:.1f}ms"
    return f"{value:.1f}us"


def temp(value: float | None) -> str:
    return NA if _missing(value) else f"{value:.0f}C"


def watts(value: float | None) -> str:
    return NA if _missing(value) else f"{value:.0f}W"


def mhz(value: float | None) -> str:
    return NA if _missing(value) else f"{value:.0f}MHz"


# -- bars and truncation ------------------------------------------------------------------
_EIGHTHS = " ▏▎▍▌▋▊▉"


def bar(fraction: float | None, width: int, ascii_only: bool = False) -> str:
    """The filled part of a ``width``-cell bar for ``fraction`` (0..1), padded with
    spaces; '' for no width, dashes when the value is missing."""
    if width <= 0:
        return ""
    if _missing(fraction):
        return "-" * width
    frac = max(0.0, min(1.0, float(fraction)))  # type: ignore[arg-type]
    if ascii_only:
        full = round(frac * width)
        return "|" * full + " " * (width - full)
    eighths = round(frac * width * 8)
    full, part = divmod(eighths, 8)
    partial = _EIGHTHS[part] if part and full < width else ""
    return ("█" * full + partial).ljust(width)


#: ``--ascii``: the whole process draws for a plain terminal (``use_ascii``);
#: every cut text then ends with "~" unless a caller says otherwise
_ASCII_ONLY = False


def use_ascii(on: bool = True) -> None:
    """Cut texts end with "~", not "…", from now on (the ``--ascii`` option)."""
    global _ASCII_ONLY
    _ASCII_ONLY = on


def ellipsis(ascii_only: bool | None = None) -> str:
    return "~" if (_ASCII_ONLY if ascii_only is None else ascii_only) else "…"


def truncate(text: str, width: int, ascii_only: bool | None = None) -> str:
    """``text`` cut to ``width`` characters, ending with an ellipsis when cut."""
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    return text[: width - 1] + ellipsis(ascii_only)


def middle(text: str, width: int, ascii_only: bool | None = None) -> str:
    """``text`` cut in the middle to ``width`` characters (keeps both ends: a path's
    file name, a command's arguments)."""
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    if width <= 3:
        return text[:width]
    head = (width - 1) // 2
    tail = width - 1 - head
    return text[:head] + ellipsis(ascii_only) + text[-tail:]


# -- names and times ----------------------------------------------------------------------------
def clock(timestamp_s: float | None, with_date: bool = False) -> str:
    """A Unix time as local wall-clock time: '14:09:46' (or with the date)."""
    if _missing(timestamp_s):
        return NA
    try:
        return time.strftime(
            "%Y-%m-%d %H:%M:%S" if with_date else "%H:%M:%S",
            time.localtime(timestamp_s),  # type: ignore[arg-type]
        )
    except (OverflowError, OSError, ValueError):  # a hostile recording's 1e20
        return NA


def gpu_name(name: str | None) -> str:
    """A GPU's marketing name without the vendor prefix, cleaned: 'H100 80GB HBM3'."""
    text = clean(name or NA, 128)
    for prefix in ("NVIDIA ", "Tesla ", "GeForce "):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    return text


def terminal_columns(stream: TextIO) -> int | None:
    """``COLUMNS`` when set to a number, else the width of the terminal ``stream``
    writes to, else None (what ``shutil.get_terminal_size`` reads, without
    importing shutil and the compression modules it loads)."""
    return _terminal_size(stream, "COLUMNS", 0)


def terminal_lines(stream: TextIO) -> int | None:
    """``LINES`` when set to a number, else the height of the terminal ``stream``
    writes to, else None."""
    return _terminal_size(stream, "LINES", 1)


def _terminal_size(stream: TextIO, variable: str, axis: int) -> int | None:
    value = os.environ.get(variable, "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    try:
        if stream.isatty():
            return os.get_terminal_size(stream.fileno())[axis] or None
    except (AttributeError, ValueError, OSError):
        pass
    return None
