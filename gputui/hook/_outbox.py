"""Messages for viewers, queued by any thread and sent by the I/O thread."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any


class Outbox:
    """A queue of ``(viewer id or None for everyone, message object)``.

    The training thread and the capture worker post here; the I/O thread takes
    everything at once.  ``wake`` (set by the server once it runs) makes the I/O
    thread deliver without waiting for its next round."""

    def __init__(self) -> None:
        self.items: collections.deque[tuple[int | None, dict[str, Any]]] = collections.deque()
        self.wake: Callable[[], None] | None = None

    def post(self, target: int | None, obj: dict[str, Any]) -> None:
        self.items.append((target, obj))
        wake = self.wake
        if wake is not None:
            wake()

    def __bool__(self) -> bool:
        return bool(self.items)

    def take(self) -> list[tuple[int | None, dict[str, Any]]]:
        out = []
        while self.items:
            try:
                out.append(self.items.popleft())
            except IndexError:
                break
        return out
