"""Text formatting shared by the panels: numbers, bars, sparklines (Rich only).

Every function takes ``ascii_only`` where it would otherwise draw block or box
characters, so a plain terminal (or a serial console over SSH) stays readable.
``None`` is always shown as "N/A" (or "-" where space is tight).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from rich.text import Text

# shared with the one-shot report (explicit re-exports)
from gputui.fmt import NA as NA
from gputui.fmt import duration as duration

_EIGHTHS = " ▏▎▍▌▋▊▉█"
_SPARK = "▁▂▃▄▅▆▇█"
_SPARK_ASCII = "_.-~=+*#"


def level_style(pct: float | None) -> str:
    """Colour for a 0..100 load value: calm, busy, hot."""
    if pct is None:
        return "dim"
    if pct >= 90:
        return "red"
    if pct >= 60:
        return "yellow"
    return "green"


def pct(value: float | None, width: int = 4) -> str:
    return (NA if value is None else f"{value:.0f}%").rjust(width)


def size(value: float | None, unit: str | None = None) -> str:
    """Bytes as a short human number: 41.2G, 512M."""
    if value is None:
        return NA
    for suffix, scale in (("T", 2**40), ("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if unit == suffix or (unit is None and abs(value) >= scale):
            number = value / scale
            return f"{number:.1f}{suffix}" if number < 100 else f"{number:.0f}{suffix}"
    return f"{value:.0f}B"


def rate(value: float | None) -> str:
    """Bytes per second, decimal (as link speeds are quoted): 1.2GB/s."""
    if value is None:
        return NA
    for suffix, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("KB/s", 1e3)):
        if value >= scale:
            return f"{value / scale:.1f}{suffix}"
    return f"{value:.0f}B/s"


def clock(timestamp_s: float | None, with_date: bool = False) -> str:
    if timestamp_s is None:
        return NA
    fmt = "%Y-%m-%d %H:%M:%S" if with_date else "%H:%M:%S"
    return time.strftime(fmt, time.localtime(timestamp_s))


def bar(
    fraction: float | None,
    width: int,
    ascii_only: bool = False,
    style: str | None = None,
    label: str = "",
) -> Text:
    """A horizontal bar ``width`` cells wide, with ``label`` written over its right end."""
    width = max(1, width)
    text = Text()
    if fraction is None:
        text.append(label.rjust(width)[-width:] if label else "-" * width, style="dim")
        return text
    fraction = max(0.0, min(1.0, fraction))
    if ascii_only:
        full = round(fraction * width)
        cells = "|" * full + " " * (width - full)
    else:
        eighths = round(fraction * width * 8)
        full, part = divmod(eighths, 8)
        cells = "█" * full + (_EIGHTHS[part] if full < width and part else "")
        cells = cells.ljust(width)
    colour = style or level_style(fraction * 100)
    if label and len(label) < width:
        # Write the label over the empty end of the bar so the number sits inside it.
        start = width - len(label)
        filled = cells[:start]
        text.append(filled, style=colour)
        text.append(label, style="bold")
        return text
    text.append(cells, style=colour)
    return text


def sparkline(
    values: Sequence[float | None],
    width: int,
    maximum: float | None = 100.0,
    ascii_only: bool = False,
    style: str = "cyan",
) -> Text:
    """The last values squeezed into ``width`` cells (max per bucket), right aligned."""
    chars = _SPARK_ASCII if ascii_only else _SPARK
    width = max(1, width)
    buckets = bucketize(values, width)
    top = maximum
    if top is None:
        present = [v for v in buckets if v is not None]
        top = max(present) if present else 1.0
    top = top or 1.0
    text = Text(" " * (width - len(buckets)))
    cells = []
    for value in buckets:
        if value is None:
            cells.append(" ")
            continue
        level = max(0.0, min(1.0, value / top))
        cells.append(chars[min(len(chars) - 1, int(level * (len(chars) - 1) + 0.5))])
    text.append("".join(cells), style=style)
    return text


def bucketize(values: Sequence[float | None], width: int) -> list[float | None]:
    """At most ``width`` points: each the max of its share of ``values`` (peaks survive)."""
    n = len(values)
    if n <= width:
        return list(values)
    out: list[float | None] = []
    for i in range(width):
        lo = i * n // width
        hi = (i + 1) * n // width
        present = [v for v in values[lo:hi] if v is not None]
        out.append(max(present) if present else None)
    return out


def short_gpu_name(name: str) -> str:
    for prefix in ("NVIDIA ", "Tesla ", "GeForce "):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    return name


def truncate(text: str, width: int) -> str:
    if width <= 0:
        return ""
    return text if len(text) <= width else text[: max(0, width - 1)] + "~"
