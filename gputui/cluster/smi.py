"""A node without gputui, read through ``nvidia-smi --query-gpu`` over the same ssh.

The query names fields that map onto :class:`DeviceSnapshot` one for one; the
CSV (``noheader,nounits``) has one line per GPU per loop.  Every field came
from another machine: a number outside its field's range, ``[N/A]`` or
``[Not Supported]`` is N/A; a line with too few fields or an index that is not
a number is not nvidia-smi's.
"""

from __future__ import annotations

import math

from gputui.snapshot.model import UNIT_RANGES, DeviceSnapshot

#: (nvidia-smi field, DeviceSnapshot field, factor to the model's unit)
FIELDS: tuple[tuple[str, str, float], ...] = (
    ("index", "index", 1.0),
    ("uuid", "uuid", 1.0),
    ("name", "name", 1.0),
    ("utilization.gpu", "util_gpu_pct", 1.0),
    ("utilization.memory", "util_mem_pct", 1.0),
    ("memory.used", "mem_used_bytes", 1048576.0),  # MiB with nounits
    ("memory.total", "mem_total_bytes", 1048576.0),
    ("temperature.gpu", "temp_gpu_c", 1.0),
    ("power.draw", "power_w", 1.0),
    ("power.limit", "power_limit_w", 1.0),
)
#: the longest name or UUID kept
MAX_TEXT = 256


def smi_command(interval_s: float) -> str:
    """The remote command: the fields above, every ``interval_s`` (whole seconds,
    at least one: nvidia-smi's ``-l``)."""
    fields = ",".join(f for f, _, _ in FIELDS)
    loop = max(1, round(interval_s))
    return f"nvidia-smi --query-gpu={fields} --format=csv,noheader,nounits -l {loop}"


class NotSmi(ValueError):
    """A line that is not one of nvidia-smi's CSV rows."""


def _number(text: str, field: str, factor: float) -> float | None:
    try:
        value = float(text) * factor
    except ValueError:
        return None  # [N/A], [Not Supported], [Unknown Error]
    unit = next((u for u in sorted(UNIT_RANGES, key=len, reverse=True) if field.endswith(u)), "")
    lo, hi = UNIT_RANGES.get(unit, (0.0, 1e15))
    return value if math.isfinite(value) and lo <= value <= hi else None


def parse_line(line: str) -> DeviceSnapshot:
    """One CSV row as a DeviceSnapshot; NotSmi when it is not one."""
    parts = [p.strip() for p in line.split(",")]
    extra = len(parts) - len(FIELDS)
    if extra < 0:
        raise NotSmi(f"{len(parts)} fields, not {len(FIELDS)}")
    # a name with commas in it: the fields after it are counted from the end
    parts = [*parts[:2], ", ".join(parts[2 : 3 + extra]), *parts[3 + extra :]]
    if not parts[0].isdigit() or int(parts[0]) > 2**16:
        raise NotSmi("the index is not a number")
    values: dict[str, object] = {
        "index": int(parts[0]),
        "uuid": parts[1][:MAX_TEXT],
        "name": parts[2][:MAX_TEXT],
    }
    for text, (_, field, factor) in zip(parts[3:], FIELDS[3:], strict=True):
        value = _number(text, field, factor)
        values[field] = int(value) if value is not None and field.endswith("_bytes") else value
    return DeviceSnapshot(**values)  # type: ignore[arg-type]
