"""What every ``--json`` document shares: no NaN or infinity (they are not
JSON), and one way to print it."""

from __future__ import annotations

import json
import math
from typing import Any


def finite(value: Any) -> Any:
    """A JSON-safe copy: NaN and infinities (an empty distribution's mean, a
    rate over no time) become null; tuples become lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def message_body(msg: Any) -> dict[str, Any] | None:
    """A hook message as a ``--json`` document shows it: its wire object without
    the protocol's ``v`` and ``type``; None for None."""
    if msg is None:
        return None
    doc: dict[str, Any] = msg.to_wire()
    doc.pop("v", None)
    doc.pop("type", None)
    return doc


def print_json(doc: Any, indent: int = 2) -> None:
    """``doc`` on standard output (a NaN left in it is a bug: it raises)."""
    print(json.dumps(doc, indent=indent, allow_nan=False))
