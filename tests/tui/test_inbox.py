"""Inbox: items from another thread reach one function on the loop, in order, in
the opener's context; a newer item may replace the one waiting."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from gputui.tui.inbox import MAX_WAITING, Inbox

WHO = contextvars.ContextVar("WHO", default="nobody")


def _replaces(new: object, waiting: object) -> bool:
    return isinstance(new, int) and isinstance(waiting, int)


async def _until(condition, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_items_from_a_thread_arrive_in_order_on_the_loop_in_the_openers_context() -> None:
    taken: list[tuple[object, str, int]] = []
    inbox: Inbox[object] = Inbox(
        lambda item: taken.append((item, WHO.get(), threading.get_ident())), _raise
    )
    WHO.set("the app")
    inbox.open()
    WHO.set("someone else")  # the context as it was at open() is the one used
    # as many as may wait: none dropped, however late the loop drains them
    items = [f"item {i}" for i in range(MAX_WAITING)]

    def feed() -> None:
        for item in items:
            assert inbox.put(item)

    thread = threading.Thread(target=feed)
    thread.start()
    thread.join(timeout=10)
    await _until(lambda: len(taken) == len(items))
    assert [item for item, _, _ in taken] == items
    assert {who for _, who, _ in taken} == {"the app"}
    assert {ident for _, _, ident in taken} == {threading.get_ident()}


async def test_a_newer_item_replaces_the_one_waiting_and_nothing_else() -> None:
    taken: list[object] = []
    inbox: Inbox[object] = Inbox(taken.append, _raise, _replaces)
    inbox.open()
    # all put before the loop turns: one drain takes what is waiting then
    for item in (1, 2, "failed", 3, 4, 5, "failed again", 6):
        assert inbox.put(item)
    assert taken == []
    await _until(lambda: bool(taken))
    assert taken == [2, "failed", 5, "failed again", 6]


async def test_put_before_open_or_after_close_is_dropped() -> None:
    taken: list[object] = []
    inbox: Inbox[object] = Inbox(taken.append, _raise)
    assert not inbox.put("early")
    inbox.open()
    assert inbox.put("waiting")
    inbox.close()  # what waits is dropped too
    assert not inbox.put("late")
    await asyncio.sleep(0.05)
    assert taken == []


def test_put_after_the_loop_closed_is_dropped() -> None:
    inbox: Inbox[object] = Inbox(lambda item: None, _raise)

    async def opened() -> None:
        inbox.open()

    loop = asyncio.new_event_loop()
    loop.run_until_complete(opened())
    loop.close()
    assert not inbox.put("after")  # no RuntimeError out of the poller thread
    assert not inbox._items


async def test_an_error_goes_to_the_handler_and_the_rest_of_that_drain_is_dropped() -> None:
    errors: list[Exception] = []
    taken: list[object] = []

    def take(item: object) -> None:
        if item == "bad":
            raise ValueError("bad item")
        taken.append(item)

    inbox: Inbox[object] = Inbox(take, errors.append)
    inbox.open()
    for item in ("good", "bad", "after"):
        inbox.put(item)
    await _until(lambda: bool(errors))
    assert taken == ["good"] and [str(e) for e in errors] == ["bad item"]


def _raise(error: Exception) -> None:
    raise error


@pytest.mark.parametrize("count", [3])
async def test_the_monitor_takes_the_pollers_failure_and_recovery_in_order(count: int) -> None:
    """A failure then a good snapshot, both waiting: the error is shown, then
    cleared by the snapshot (never the reverse)."""
    from gputui.recording.replay import ReplaySource
    from gputui.tui.app import make_app

    app = make_app(ReplaySource.demo(), 3600.0, autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        session = app.session
        errors: list[str | None] = []
        original = session.take_failure

        def failed(error: str) -> None:
            original(error)
            errors.append(session.current.poll_error)

        session.take_failure = failed  # type: ignore[method-assign]
        before = session.snapshot_count
        for _ in range(count):
            # what the poller's thread calls, in the order it would
            session._poll_failed(OSError("NVML went away"))
            session._polled(session.source.sample())
        await _until(lambda: session.snapshot_count == before + count)
        assert len(errors) == count and all("NVML went away" in (e or "") for e in errors)
        assert session.current.poll_error is None  # the last word was the good snapshot
        # readings in a row: the newest replaces the one waiting, and is drawn
        before = session.snapshot_count
        snapshots = [session.source.sample() for _ in range(3)]
        for snapshot in snapshots:
            session._polled(snapshot)
        await _until(lambda: session.snapshot_count > before)
        await pilot.pause()
        assert session.snapshot_count == before + 1
        assert session.current.snapshot is snapshots[-1]


async def test_at_most_max_waiting_items_wait_the_oldest_dropped() -> None:
    taken: list[object] = []
    inbox: Inbox[object] = Inbox(taken.append, _raise)
    inbox.open()
    items = [f"item {i}" for i in range(MAX_WAITING + 10)]
    for item in items:
        assert inbox.put(item)
    await _until(lambda: bool(taken))
    assert taken == items[-MAX_WAITING:]


def test_a_newer_failure_replaces_a_waiting_one_and_nothing_else() -> None:
    from gputui.session.monitor import Reading
    from gputui.snapshot.model import HostSnapshot, Snapshot
    from gputui.tui.messages import PollFailed, SnapshotReady

    older, newer = PollFailed("first"), PollFailed("second")
    ready = SnapshotReady(Reading(Snapshot(timestamp_s=0.0, host=HostSnapshot()), 0.0))
    assert newer.can_replace(older)
    assert not newer.can_replace(ready)
    assert not ready.can_replace(older)
