"""The hook's ring of finalised step records, addressed by sequence number."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Step records kept for late or slow viewers (>= 10,000 asked for).
HISTORY = 16384


class Ring:
    """Finalized step records addressed by a global sequence number.

    Items go in as compact tuples and become the wire's dicts only when read
    (``slice``, ``last``), once each: with no viewer, a step costs the I/O thread
    an append, not the building of a dict the training thread would wait for.
    """

    def __init__(self, capacity: int, convert: Callable[[Any], dict[str, Any]]) -> None:
        self.capacity = capacity
        self.convert = convert
        self.items: list[Any] = []
        self.base = 0  # sequence number of items[0]

    @property
    def end(self) -> int:
        return self.base + len(self.items)

    def append(self, item: Any) -> None:
        self.items.append(item)
        if len(self.items) >= 2 * self.capacity:
            cut = len(self.items) - self.capacity
            del self.items[:cut]
            self.base += cut

    @property
    def start(self) -> int:
        """Oldest sequence number still guaranteed (capacity-bounded view)."""
        return max(self.base, self.end - self.capacity)

    def slice(self, seq: int, count: int) -> list[dict[str, Any]]:
        lo = max(0, seq - self.base)
        return self._read(lo, min(len(self.items), lo + count))

    def last(self, count: int) -> list[dict[str, Any]]:
        return self._read(max(0, len(self.items) - count), len(self.items)) if count else []

    def _read(self, lo: int, hi: int) -> list[dict[str, Any]]:
        items = self.items
        out = []
        for k in range(lo, hi):
            item = items[k]
            if type(item) is tuple:
                item = items[k] = self.convert(item)
            out.append(item)
        return out
