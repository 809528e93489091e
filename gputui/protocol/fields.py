"""Checked reads of one JSON object's fields, for the typed messages.

Every reader takes the object, the key and ``where`` (the message and path, for
the error) and returns a value of the right type inside its range, or raises
:class:`SchemaError` naming the field.  Unknown keys are never looked at (a newer
hook may send more); a missing optional key takes its default.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


class SchemaError(ValueError):
    """A message that does not fit the protocol's schema.

    ``field`` is the dotted path of the offending value (``steps[3].wall``);
    the message says what was expected.  Viewers show it as one line and skip
    the message (or refuse the connection, for a hello)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


MISSING: Any = object()

#: Unix seconds later than this are not a time a job can report (year 5138).
MAX_TIME_S = 1e11
#: Durations and byte counts beyond these are not believable.
MAX_SECONDS = 1e8
MAX_COUNT = 2**63 - 1
MAX_PID = 2**31 - 1
#: Default length limits for strings and lists from the wire.
MAX_STR = 4096
MAX_ITEMS = 10_000


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def get(obj: Mapping[str, Any], key: str, where: str, default: Any) -> Any:
    if key in obj:
        return obj[key]
    if default is MISSING:
        raise SchemaError(f"{where}.{key}", "missing")
    return default


def integer(
    obj: Mapping[str, Any],
    key: str,
    where: str,
    lo: int = 0,
    hi: int = MAX_COUNT,
    default: Any = MISSING,
) -> Any:
    """An int in [lo, hi] (None only when the default is None and it is absent
    or null)."""
    value = get(obj, key, where, default)
    if value is None and default is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SchemaError(f"{where}.{key}", f"expected an integer, got {_describe(value)}")
    if not lo <= value <= hi:
        raise SchemaError(f"{where}.{key}", f"{value} is outside {lo}..{hi}")
    return value


def number(
    obj: Mapping[str, Any],
    key: str,
    where: str,
    lo: float = 0.0,
    hi: float = MAX_SECONDS,
    default: Any = MISSING,
) -> Any:
    """A finite float in [lo, hi]; ints are accepted, bools are not."""
    value = get(obj, key, where, default)
    if value is None and default is None:
        return None
    return check_number(value, f"{where}.{key}", lo, hi)


def check_number(value: Any, where: str, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SchemaError(where, f"expected a number, got {_describe(value)}")
    try:
        out = float(value)
    except OverflowError:
        raise SchemaError(where, "number too large") from None
    if not math.isfinite(out) or not lo <= out <= hi:
        raise SchemaError(where, f"{_describe(value)} is outside {lo:g}..{hi:g}")
    return out


def text(
    obj: Mapping[str, Any], key: str, where: str, limit: int = MAX_STR, default: Any = MISSING
) -> Any:
    """A string of at most ``limit`` characters (None when absent/null and the
    default is None).  The text is not sanitised here: display code does that."""
    value = get(obj, key, where, default)
    if value is None and default is None:
        return None
    if not isinstance(value, str):
        raise SchemaError(f"{where}.{key}", f"expected a string, got {_describe(value)}")
    if len(value) > limit:
        raise SchemaError(f"{where}.{key}", f"string of {len(value)} characters (limit {limit})")
    return value


def flag(obj: Mapping[str, Any], key: str, where: str, default: bool = False) -> bool:
    value = get(obj, key, where, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise SchemaError(f"{where}.{key}", f"expected true or false, got {_describe(value)}")
    return value


def texts(
    obj: Mapping[str, Any],
    key: str,
    where: str,
    max_items: int = 1000,
    limit: int = MAX_STR,
) -> tuple[str, ...]:
    """A list of strings (absent or null: empty)."""
    value = obj.get(key)
    if value is None:
        return ()
    if not isinstance(value, list):
        raise SchemaError(f"{where}.{key}", f"expected a list, got {_describe(value)}")
    if len(value) > max_items:
        raise SchemaError(f"{where}.{key}", f"{len(value)} items (limit {max_items})")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise SchemaError(f"{where}.{key}[{i}]", f"expected a string, got {_describe(item)}")
        if len(item) > limit:
            raise SchemaError(f"{where}.{key}[{i}]", f"string of {len(item)} characters")
    return tuple(value)


def seconds_map(
    obj: Mapping[str, Any],
    key: str,
    where: str,
    max_items: int = 1024,
    default: Any = MISSING,
) -> Any:
    """A ``{name: seconds}`` object (phase times): names are strings of at most
    256 characters, values finite and non-negative."""
    value = get(obj, key, where, default)
    if value is None and default is None:
        return None
    if not isinstance(value, dict):
        raise SchemaError(f"{where}.{key}", f"expected an object, got {_describe(value)}")
    if len(value) > max_items:
        raise SchemaError(f"{where}.{key}", f"{len(value)} entries (limit {max_items})")
    out: dict[str, float] = {}
    for name, seconds in value.items():
        if len(name) > 256:
            raise SchemaError(f"{where}.{key}", f"name of {len(name)} characters")
        if type(seconds) is float and 0.0 <= seconds <= MAX_SECONDS:
            out[name] = seconds  # the common case, checked without a call
        else:
            # the name is the sender's text: quoted unless printable, so the field
            # stays one line
            label = name if name.isprintable() else repr(name[:40])
            out[name] = check_number(seconds, f"{where}.{key}.{label}", 0.0, MAX_SECONDS)
    return out


def child(obj: Mapping[str, Any], key: str, where: str) -> dict[str, Any] | None:
    """A nested object (None when absent or null)."""
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise SchemaError(f"{where}.{key}", f"expected an object, got {_describe(value)}")
    return value


def items(obj: Mapping[str, Any], key: str, where: str, max_items: int = MAX_ITEMS) -> list[Any]:
    """A list (absent or null: empty)."""
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise SchemaError(f"{where}.{key}", f"expected a list, got {_describe(value)}")
    if len(value) > max_items:
        raise SchemaError(f"{where}.{key}", f"{len(value)} items (limit {max_items})")
    return value


def ident(obj: Mapping[str, Any], key: str, where: str) -> str | None:
    """A request or capture id: a short string (an int is taken as its digits)."""
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 10**18:
        return str(value)
    if isinstance(value, str) and len(value) <= 200:
        return value
    raise SchemaError(f"{where}.{key}", f"expected a short string id, got {_describe(value)}")


def typed(obj: Any, kind: str) -> Mapping[str, Any]:
    """``obj`` as a JSON object, or a SchemaError naming ``kind``."""
    if not isinstance(obj, Mapping):
        raise SchemaError(kind, "expected a JSON object")
    return obj
