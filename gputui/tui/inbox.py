"""Values from the poller thread to the screen's event loop, in order.

A message posted to a Textual app from another thread wakes the loop, goes
through the app's queue and dispatch (its handlers looked up by name along the
class's ancestry), and is followed by an ``Idle`` event dispatched the same way:
on the H100 host that was about a tenth of a millisecond of the screen's thread
for each sample, as much as drawing a changed line.  An :class:`Inbox` hands its
items to one function on the loop instead (``loop.call_soon_threadsafe``), in
the app's context, in the order they were put, with what Textual's queue gave
the monitor's messages:

- a newer item that ``replaces`` the one still waiting takes its place (a slow
  terminal draws the newest snapshot, never a backlog), and at most
  :data:`MAX_WAITING` wait, the oldest dropped first (a loop held up for
  minutes while the poller alternates failures and snapshots);
- an exception in the function goes to the app's own handler (the traceback
  shown, the app ended), as an exception in a message handler does;
- an item put before :meth:`Inbox.open` or after :meth:`Inbox.close`, or once
  the loop is closed, is dropped (``put`` says False), as a message posted to
  an app that is not running is.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

_T = TypeVar("_T")

#: items waiting at most; one more drops the oldest
MAX_WAITING = 64


class Inbox(Generic[_T]):
    def __init__(
        self,
        take: Callable[[_T], None],
        on_error: Callable[[Exception], None],
        replaces: Callable[[_T, _T], bool] = lambda new, waiting: False,
    ) -> None:
        self._take = take
        self._on_error = on_error
        self._replaces = replaces
        self._lock = threading.Lock()
        #: items put and not taken yet; a drain is scheduled while it is not empty
        self._items: list[_T] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._context: contextvars.Context | None = None

    def open(self) -> None:
        """Deliver to the running loop from now on, in the caller's context (call
        it on the loop's thread, in the app: Textual finds its app there)."""
        self._loop = asyncio.get_running_loop()
        self._context = contextvars.copy_context()

    def close(self) -> None:
        """Drop what is put from now on (and what is still waiting)."""
        with self._lock:
            self._loop = None
            self._items.clear()

    def put(self, item: _T) -> bool:
        """Hand ``item`` to the loop (from any thread); False if it was dropped."""
        with self._lock:
            loop = self._loop
            if loop is None:
                return False
            items = self._items
            if items and self._replaces(item, items[-1]):
                items[-1] = item
                return True
            items.append(item)
            if len(items) > MAX_WAITING:
                del items[0]
            if len(items) > 1:
                return True  # a drain is on its way and takes this one too
        try:
            loop.call_soon_threadsafe(self._drain, context=self._context)
        except RuntimeError:  # the loop is closed: the app is gone
            with self._lock:
                self._items.clear()
            return False
        return True

    def _drain(self) -> None:
        with self._lock:
            if self._loop is None:
                return
            items, self._items = self._items, []
        for item in items:
            try:
                self._take(item)
            except Exception as error:
                self._on_error(error)
                return
