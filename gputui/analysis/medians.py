"""The medians the rules take, without the ``statistics`` module: importing it
(with ``fractions``, ``decimal`` and ``random``) costs a few milliseconds of
every ``gputui analyze``, and the rules need only these two."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def median(values: Iterable[Any]) -> Any:
    """The middle value (the mean of the two middle ones for an even count), as
    :func:`statistics.median`; ValueError for no values."""
    data = sorted(values)
    n = len(data)
    if not n:
        raise ValueError("no median of no values")
    mid = n // 2
    return data[mid] if n % 2 else (data[mid - 1] + data[mid]) / 2


def median_low(values: Iterable[Any]) -> Any:
    """The lower of the two middle values for an even count, as
    :func:`statistics.median_low`: always one of the values."""
    data = sorted(values)
    n = len(data)
    if not n:
        raise ValueError("no median of no values")
    mid = n // 2
    return data[mid] if n % 2 else data[mid - 1]
