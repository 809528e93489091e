"""Values a collector makes from others, kept from one sample to the next.

A live sample makes each process's value in stages (NVML's numbers, then the
host's details, then its container, then the hook's mark).  A stage whose input
value and extra part are the very objects of the last sample makes nothing new:
it hands back the value it made then, so that an unchanged process is the same
object in the next snapshot (and the views, which read only the processes that
are new objects, pass over it)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

S = TypeVar("S")
P = TypeVar("P")
V = TypeVar("V")


class Kept(Generic[S, P, V]):
    """``make(source, part)`` per key, kept while ``source`` and ``part`` are
    the objects it was made from.  Call :meth:`value` for each key of a sample,
    then :meth:`done`: the keys a sample did not ask for are forgotten.

    ``id(source)`` serves as the key where one source makes one value: an entry
    holds its source, so no other live object has that id meanwhile."""

    def __init__(self, make: Callable[[S, P], V]) -> None:
        self._make = make
        self._last: dict[Hashable, tuple[S, P, V]] = {}
        self._now: dict[Hashable, tuple[S, P, V]] = {}

    def value(self, key: Hashable, source: S, part: P) -> V:
        known = self._last.get(key)
        if known is not None and known[0] is source and known[1] is part:
            value = known[2]
        else:
            value = self._make(source, part)
        self._now[key] = (source, part, value)
        return value

    def done(self) -> None:
        self._last, self._now = self._now, {}
