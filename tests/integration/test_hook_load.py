"""The hook's server under load, in this process: more viewers than it serves,
a viewer that never reads, a viewer whose request breaks the handler."""

from __future__ import annotations

import os
import select
import socket
import time
from typing import Any

import pytest

import gputui.hook
from gputui.client.hook import AttachError, HookClient
from gputui.hook import _server
from gputui.protocol import framing
from gputui.protocol.schema import Status, StepBatch
from tests.helpers.deadlines import WAIT_S
from tests.helpers.hookutil import events, indices_until_synced, steps, wait_for, wait_steps


def _raw_subscriber(path: str, history: int = 0) -> socket.socket:
    """A viewer that says hello, subscribes, and then never reads again."""
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.connect(path)
    raw.settimeout(WAIT_S)
    reader = framing.FrameReader()
    assert wait_for(lambda: reader.feed(raw.recv(65536)), what="hello")[0]["type"] == "hello"
    raw.sendall(framing.encode("subscribe", history=history, memory=True))
    return raw


def test_more_viewers_than_the_limit_are_refused_with_a_reason(hook: Any) -> None:
    server = hook.server
    steps(11)  # 10 finished steps
    wait_steps(hook, 10)
    admitted: list[HookClient] = []
    refusals: list[str] = []
    try:
        for _ in range(50):
            try:
                admitted.append(HookClient.connect(os.getpid(), timeout=WAIT_S))
            except AttachError as exc:
                refusals.append(str(exc))
        assert len(admitted) == _server.MAX_VIEWERS
        assert len(refusals) == 50 - _server.MAX_VIEWERS
        for text in refusals:
            assert "refused the connection: too many viewers" in text, text
            assert "\n" not in text
        for client in admitted:  # every admitted one gets the data
            client.subscribe(history=100)
            client.start()
        for client in admitted:
            assert indices_until_synced(client) == list(range(10))
        assert server.refused == len(refusals)
    finally:
        for client in admitted:
            client.close()
    # the slots are given back when the viewers go
    wait_for(lambda: not server.viewers, what="the viewers to be dropped")
    HookClient.connect(os.getpid()).close()


def test_a_viewer_that_never_reads_costs_only_itself(hook: Any) -> None:
    server = hook.server
    stuck = _raw_subscriber(server.path)
    viewer = wait_for(
        lambda: next((v for v in list(server.viewers.values()) if v.subscribed), None),
        what="the subscription",
    )
    healthy = HookClient.connect(os.getpid())
    healthy.subscribe(history=0)
    healthy.start()
    assert indices_until_synced(healthy) == []
    total = 60_000  # far beyond the ring (16,384) and the socket buffers
    for _ in range(total // 5_000):
        steps(5_000)
        # its queue stays bounded: unsent steps wait in the shared ring, not here
        assert len(viewer.out) < _server.LOW_WATER + 512 * 1024
    received = missed = 0
    while received + missed < total - 1:  # the first call started step 0
        ev = healthy.get(timeout=WAIT_S)
        assert ev is not None, (received, missed)
        if isinstance(ev, StepBatch):
            received += len(ev.steps)
            missed += ev.missed
    healthy.close()
    assert received + missed == total - 1
    assert hook.recorder.enabled and not hook.errors
    # the stuck one reads at last: told exactly what it missed
    got = missed_stuck = 0
    reader = framing.FrameReader()
    last = -1
    while last < total - 2:
        for msg in reader.feed(stuck.recv(1 << 20)):
            if msg["type"] == "steps":
                got += len(msg["steps"])
                missed_stuck += msg["missed"]
                last = msg["steps"][-1]["i"]
    stuck.close()
    assert missed_stuck > 0 and got + missed_stuck == total - 1


def test_a_viewer_that_stops_reading_replies_is_dropped_and_counted(
    hook: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_server, "MAX_OUT", 64 * 1024)
    server = hook.server
    stuck = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stuck.connect(server.path)
    # pings whose pongs it never reads: its unread replies pass the limit
    ping = framing.encode("ping")
    stuck.setblocking(False)
    deadline = time.monotonic() + WAIT_S
    while server.stuck_viewers == 0 and time.monotonic() < deadline:
        try:
            stuck.send(ping * 64)
        except BlockingIOError:
            select.select([], [stuck], [], 0.05)
        except OSError:
            break  # dropped: the hook closed its end
    wait_for(lambda: server.stuck_viewers == 1, what="the stuck viewer to be dropped")
    stuck.close()
    client = HookClient.connect(os.getpid())  # the others are served as before
    status = Status.from_wire(hook.status())
    assert status.stuck_viewers == 1
    client.close()


def test_a_request_that_breaks_the_handler_costs_only_that_viewer(
    hook: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object) -> None:
        raise RuntimeError("handler bug")

    monkeypatch.setattr(hook.capture, "request", broken)
    victim = HookClient.connect(os.getpid())
    victim.start()
    victim.request_capture(steps=2)
    last = list(events(victim))[-1]
    victim.close()
    assert type(last).__name__ == "Disconnected"
    # the I/O thread lives on: a new viewer is served and steps still flow
    steps(4)
    wait_for(lambda: server_alive(hook), what="the server")
    client = HookClient.connect(os.getpid())
    client.subscribe(history=10)
    client.start()
    assert len(indices_until_synced(client)) == 3
    client.close()
    assert any("serving a viewer" in e and "handler bug" in e for e in hook.errors.values())


def server_alive(hook: Any) -> bool:
    server = hook.server
    return server is not None and server.thread.is_alive()


def test_deep_nesting_from_a_viewer_drops_that_viewer_only(hook: Any) -> None:
    server = hook.server
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.connect(server.path)
    raw.settimeout(WAIT_S)
    payload = b"[" * 200_000
    raw.sendall(len(payload).to_bytes(4, "big") + payload)
    deadline = time.monotonic() + WAIT_S
    while raw.recv(65536):  # hello, then the hook closes the connection
        assert time.monotonic() < deadline
    raw.close()
    assert server.thread.is_alive() and server.bad_frames == 1
    HookClient.connect(os.getpid()).close()


def test_the_last_steps_reach_a_viewer_before_the_bye(
    hook: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Steps made since the I/O thread's last round are sent before the bye, so
    a viewer's count is exact up to the job's end (given the time: a loaded
    machine may not schedule the viewer's reader within the hook's second)."""
    from gputui.hook import _server

    monkeypatch.setattr(_server, "BYE_SEND_S", WAIT_S)
    client = HookClient.connect(os.getpid())
    client.subscribe(history=0)
    client.start()
    assert indices_until_synced(client) == []
    steps(3_001)  # 3,000 steps end; no round has run since (5 a second)
    gputui.hook.uninstall()
    indices: list[int] = []
    missed = 0
    got = list(events(client))
    client.close()
    for ev in got:
        if isinstance(ev, StepBatch):
            indices += [s.index for s in ev.steps]
            missed += ev.missed
    assert type(got[-1]).__name__ == "Disconnected" and got[-1].clean  # type: ignore[union-attr]
    assert len(indices) + missed == 3_000 and indices[-1] == 2_999
    gputui.hook.install()  # the fixture's teardown uninstalls again
