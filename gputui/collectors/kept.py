"""Values a collector makes from others, kept from one sample to the next.

A live sample makes each process's value in stages (NVML's numbers, then the
host's details, then its container, then the hook's mark).  A stage whose input
value and extra part are the very objects of the last sample makes nothing new:
it hands back the value it made then, so that an unchanged process is the same
object in the next snapshot (and the views, which read only the processes that
are new objects, pass over it)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from itertools import compress
from operator import and_, is_, not_
from typing import Generic, TypeVar

S = TypeVar("S")
P = TypeVar("P")
V = TypeVar("V")

#: KeptRun: more than one place in this many differs: found by identity instead
_MOVED = 5


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


class KeptRun(Generic[S, P, V]):
    """:class:`Kept` for a whole sample at once, the sources and their parts
    given in order: where both are the objects at the same place of the last
    sample, the value made then, found by comparisons in C; the others made
    one by one.  NVML lists a device's processes in the same order refresh
    after refresh, so on a node of thousands most places hold the same
    objects.  Where more than a fifth of the places differ (a process came or
    went and shifted the others), the values are found by their sources'
    identity instead, as :class:`Kept` does."""

    def __init__(self, make: Callable[[S, P], V]) -> None:
        self._make = make
        self._sources: tuple[S, ...] = ()
        self._parts: list[P] = []
        self._values: list[V] = []

    def values(self, sources: Sequence[S], parts: list[P]) -> tuple[V, ...]:
        make = self._make
        count = len(sources)
        last_sources, last_parts, values = self._sources, self._parts, self._values
        if len(last_sources) == count:
            kept = list(map(and_, map(is_, sources, last_sources), map(is_, parts, last_parts)))
            differ = count - sum(kept)
            if differ <= count // _MOVED:
                out = list(values)
                for i in compress(range(count), map(not_, kept)):
                    out[i] = make(sources[i], parts[i])
                return self._keep(sources, parts, out)
        known = {id(s): i for i, s in enumerate(last_sources)}
        out = []
        for source, part in zip(sources, parts, strict=True):
            at = known.get(id(source))
            if at is not None and last_parts[at] is part:
                out.append(values[at])
            else:
                out.append(make(source, part))
        return self._keep(sources, parts, out)

    def _keep(self, sources: Sequence[S], parts: list[P], out: list[V]) -> tuple[V, ...]:
        self._sources, self._parts, self._values = tuple(sources), parts, out
        return tuple(out)
