"""Plain-text formatting of values shared by every view.  ``None`` is N/A."""

from __future__ import annotations

NA = "N/A"

THROTTLE_LABELS = {
    "gpu_idle": "idle",
    "applications_clocks_setting": "app clocks",
    "sw_power_cap": "POWER CAP",
    "hw_slowdown": "HW SLOWDOWN",
    "sync_boost": "sync boost",
    "sw_thermal_slowdown": "THERMAL",
    "hw_thermal_slowdown": "HW THERMAL",
    "hw_power_brake_slowdown": "POWER BRAKE",
    "display_clock_setting": "display clocks",
}

#: throttle reasons that cost performance (the others are informational)
SEVERE_THROTTLES = frozenset(
    {
        "sw_power_cap",
        "hw_slowdown",
        "sw_thermal_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
    }
)


def pct(value: float | None, width: int = 0) -> str:
    text = NA if value is None or value != value else f"{value:.0f}%"
    return text.rjust(width) if width else text


def bytes_(value: float | None, width: int = 0) -> str:
    """1536 MiB -> '1.5GiB'; binary units as nvidia-smi uses."""
    if value is None:
        text = NA
    else:
        size = float(value)
        for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
            if abs(size) < 1024 or unit == "TiB":
                break
            size /= 1024
        text = f"{size:.0f}{unit}" if unit in ("B", "KiB") or size >= 100 else f"{size:.1f}{unit}"
    return text.rjust(width) if width else text


def rate(value: float | None) -> str:
    """Bytes per second, decimal units as link speeds are quoted."""
    if value is None:
        return NA
    size = float(value)
    for unit in ("B/s", "KB/s", "MB/s", "GB/s"):
        if abs(size) < 1000 or unit == "GB/s":
            break
        size /= 1000
    return f"{size:.0f}{unit}" if size >= 100 or unit == "B/s" else f"{size:.1f}{unit}"


def duration(seconds: float | None) -> str:
    """Compact elapsed time: 45s, 12:03, 3:04:05, 2d03h."""
    if seconds is None or seconds < 0 or seconds != seconds:
        return NA
    s = int(seconds)
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


def temp(value: float | None) -> str:
    return NA if value is None else f"{value:.0f}C"


def watts(value: float | None) -> str:
    return NA if value is None else f"{value:.0f}W"


def mhz(value: int | None) -> str:
    return NA if value is None else f"{value}MHz"


def throttles(reasons: tuple[str, ...] | None) -> str:
    """Only the reasons that cost performance, or '' when none."""
    if not reasons:
        return ""
    return ",".join(THROTTLE_LABELS.get(r, r) for r in reasons if r in SEVERE_THROTTLES)


def bar(value: float | None, width: int, ascii_only: bool = False) -> str:
    """A fixed-width bar for a percentage."""
    if width <= 0:
        return ""
    if value is None:
        return NA.center(width, " ")
    frac = max(0.0, min(1.0, value / 100.0))
    if ascii_only:
        full = round(frac * width)
        return "#" * full + "." * (width - full)
    eighths = round(frac * width * 8)
    full, part = divmod(eighths, 8)
    partial = " ▏▎▍▌▋▊▉"[part] if part and full < width else ""
    return ("█" * full + partial).ljust(width)


def middle_truncate(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    if width <= 3:
        return text[:width]
    head = (width - 1) // 2
    tail = width - 1 - head
    return text[:head] + "…" + text[-tail:]
