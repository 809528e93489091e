"""Values a collector makes from others, kept from one sample to the next.

A live sample makes each process's value in stages (NVML's numbers, then the
host's details, then its container, then the hook's mark).  A stage whose input
value and extra part are the very objects of the last sample makes nothing new:
it hands back the value it made then, so that an unchanged process is the same
object in the next snapshot (and the views, which read only the processes that
are new objects, pass over it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import compress
from operator import and_, is_, not_
from typing import Generic, TypeVar

S = TypeVar("S")
P = TypeVar("P")
V = TypeVar("V")

#: more than one place in this many differs: the values are found by identity
_MOVED = 5


class KeptRun(Generic[S, P, V]):
    """``make(source, part)`` for each source of a sample and its part, given
    in order: where both are the objects at the same place of the last sample,
    the value made then, found by comparisons in C; the others made one by
    one.  NVML lists a device's processes in the same order refresh after
    refresh, so on a node of thousands most places hold the same objects.
    Where more than a fifth of the places differ (a process came or went and
    shifted the others), a value is kept where its source and part are the
    objects of the last sample at any place (by the source's identity: the
    last sample's sources are held, so no other live object has their ids).
    Only the last sample is remembered."""

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
