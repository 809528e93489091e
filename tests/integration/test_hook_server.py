"""The hook's server in this process (no torch job): transport edge cases."""

from __future__ import annotations

import os
import queue
import socket
import stat
import struct
import threading
import time

import pytest

import gputui.hook
from gputui.client.hook import AttachError, Disconnected, HookClient
from gputui.protocol import framing, paths
from gputui.protocol.schema import StepBatch, StepRecord, Synced
from tests.helpers.deadlines import WAIT_S
from tests.helpers.hookutil import events, indices_until_synced, steps


def _wait(pred, timeout: float = WAIT_S):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not (value := pred()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
    return value


def test_install_is_idempotent_and_socket_private(hook: gputui.hook.Hook) -> None:
    assert gputui.hook.install(batch_size=8) is hook
    assert hook.recorder.batch_size == 8
    assert hook.server is not None
    path = hook.server.path
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    assert paths.list_sockets() == {os.getpid(): path}


def test_the_socket_file_appears_only_once_it_listens(
    monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]
) -> None:
    """A viewer that finds the file can connect: never "connection refused"
    from a socket bound but not yet listening."""
    sock_dir = os.path.join(str(tmp_path), "sock")
    monkeypatch.setenv(paths.ENV_SOCKET_DIR, sock_dir)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    at_listen: list[list[str]] = []
    listen = socket.socket.listen

    def spy(self: socket.socket, *args: int) -> None:
        if self.family == socket.AF_UNIX:
            at_listen.append(sorted(os.listdir(sock_dir)))
        listen(self, *args)

    monkeypatch.setattr(socket.socket, "listen", spy)
    hook = gputui.hook.install()
    try:
        assert hook is not None and hook.server is not None
        assert at_listen == [[f"{os.getpid()}.sock.new"]]  # not under the name viewers find
        assert os.listdir(sock_dir) == [f"{os.getpid()}.sock"]
        assert paths.list_sockets() == {os.getpid(): hook.server.path}
        HookClient.connect(os.getpid()).close()
    finally:
        gputui.hook.uninstall()
    assert os.listdir(sock_dir) == []


def _history(n: int) -> list[StepRecord]:
    """The last ``n`` step records, as a viewer that subscribes now gets them."""
    client = HookClient.connect(os.getpid())
    client.subscribe(history=n)
    client.start()
    steps: list[StepRecord] = []
    for ev in events(client):
        if isinstance(ev, StepBatch):
            steps += ev.steps
        if isinstance(ev, Synced):
            break
    client.close()
    return steps


def test_phases_and_steps_in_process(hook: gputui.hook.Hook) -> None:
    gputui.hook.set_batch_size(4)
    gputui.hook.step()  # starts step 0
    t0 = time.perf_counter()
    with gputui.hook.phase("load"):
        time.sleep(0.03)
        with gputui.hook.phase("inner"):
            time.sleep(0.02)
    outer = time.perf_counter() - t0  # both phases, as this thread timed them
    gputui.hook.step()
    steps = _history(10)
    assert [s.index for s in steps] == [0]
    s = steps[0]
    assert s.phases["load"] >= 0.03 and s.phases["inner"] >= 0.02
    # "load" is exclusive: the time in "inner" is not counted in it too
    assert s.phases["load"] + s.phases["inner"] <= outer + 1e-6
    assert abs(sum(s.phases.values()) - s.wall) < 1e-5  # exclusive attribution adds up
    assert s.samples == 4


def test_a_step_too_long_for_one_edge_log_still_adds_up(hook: gputui.hook.Hook) -> None:
    from gputui.hook._recorder import LOG_MAX

    gputui.hook.step()  # starts step 0
    for _ in range(LOG_MAX):  # two log entries per edge: two segments and a rest
        with gputui.hook.phase("tiny"):
            pass
    with gputui.hook.phase("last"):
        time.sleep(0.01)
    gputui.hook.step()
    steps = _history(10)
    assert [s.index for s in steps] == [0]
    s = steps[0]
    assert set(s.phases) == {"tiny", "last", "other"}
    assert s.phases["last"] >= 0.01
    assert abs(sum(s.phases.values()) - s.wall) < 1e-5


def test_other_uid_refused(hook: gputui.hook.Hook, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "current_uid", lambda: os.geteuid() + 1)
    with pytest.raises(AttachError):
        HookClient.connect(os.getpid())
    assert hook.server is not None
    _wait(lambda: hook.server.refused == 1)  # type: ignore[union-attr]
    monkeypatch.undo()


@pytest.mark.parametrize(
    "junk",
    [
        b"\x00\x00\x00\x05hello",  # not JSON
        b"\xff\xff\xff\xff",  # oversized length
        struct.pack(">I", 100) + b"{" * 10,  # truncated, then the viewer goes away
        framing.encode("nonsense"),  # valid frame, unknown type: answered with an error
    ],
)
def test_garbage_leaves_hook_serving(hook: gputui.hook.Hook, junk: bytes) -> None:
    assert hook.server is not None
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.connect(hook.server.path)
    raw.settimeout(WAIT_S)
    reader = framing.FrameReader()
    assert _wait(lambda: reader.feed(raw.recv(65536)))[0]["type"] == "hello"
    raw.sendall(junk)
    if junk[:4] == b"\x00\x00\x00\x05" or junk[:4] == b"\xff\xff\xff\xff":
        _wait(lambda: raw.recv(65536) == b"")  # dropped by the hook
    raw.close()
    steps(3)
    client = HookClient.connect(os.getpid())
    client.subscribe(history=100)
    client.start()
    assert len(indices_until_synced(client)) >= 2
    client.close()


def test_viewer_dies_mid_stream(hook: gputui.hook.Hook) -> None:
    steps(20000)
    for _ in range(3):
        dying = HookClient.connect(os.getpid())
        dying.subscribe(history=20000)  # megabytes queued for it...
        dying.close()  # ...and it is gone before reading them
    steps(10)
    client = HookClient.connect(os.getpid())
    client.subscribe(history=5)
    client.start()
    assert len(indices_until_synced(client)) == 5
    client.close()


def test_slow_viewer_told_exactly_what_it_missed(hook: gputui.hook.Hook) -> None:
    synced = threading.Event()
    go = threading.Event()
    events: queue.Queue[object] = queue.Queue()

    def on_event(ev: object) -> None:
        events.put(ev)
        if isinstance(ev, Synced):
            synced.set()
            go.wait(WAIT_S)  # a viewer that stops reading

    slow = HookClient.connect(os.getpid())
    slow.subscribe(history=0)
    slow.start(on_event)
    assert synced.wait(WAIT_S)
    total = 60000  # far more than the ring (16384) plus socket buffers hold
    steps(total + 1)  # the first call starts step 0
    go.set()
    received = missed = 0
    last = -1
    while last < total - 1:
        ev = events.get(timeout=WAIT_S)
        if isinstance(ev, StepBatch):
            assert ev.steps[0].index == last + ev.missed + 1
            received += len(ev.steps)
            missed += ev.missed
            last = ev.steps[-1].index
    slow.close()
    assert missed > 0
    assert received + missed == total


def test_several_viewers_and_bye(hook: gputui.hook.Hook) -> None:
    steps(5)  # steps 0-3 complete
    assert hook.server is not None
    server = hook.server
    _wait(lambda: server.collector.steps_total >= 4)  # in the ring before anyone subscribes
    a = HookClient.connect(os.getpid())
    b = HookClient.connect(os.getpid())
    for c in (a, b):
        c.subscribe(history=100)
        c.start()
    assert indices_until_synced(a) == indices_until_synced(b) == [0, 1, 2, 3]
    assert hook.server is not None
    path = hook.server.path
    gputui.hook.uninstall()
    for c in (a, b):
        last = list(events(c))[-1]
        assert isinstance(last, Disconnected) and last.clean
        c.close()
    assert not os.path.exists(path)
    gputui.hook.install()  # the fixture's teardown uninstalls again


def test_ring_builds_each_record_once_when_read_and_keeps_sequence_numbers() -> None:
    from gputui.hook._ring import Ring

    built: list[int] = []

    def convert(item: tuple[int, ...]) -> dict[str, int]:
        built.append(item[0])
        return {"i": item[0]}

    ring = Ring(4, convert)
    for index in range(10):
        ring.append((index,))
    assert built == []  # nothing is built until read
    assert ring.start == 6 and ring.end == 10
    assert [r["i"] for r in ring.slice(6, 2)] == [6, 7]
    assert [r["i"] for r in ring.last(3)] == [7, 8, 9]
    assert [r["i"] for r in ring.slice(6, 10)] == [6, 7, 8, 9]
    assert built == [6, 7, 8, 9]  # 7 was read twice, built once


class _Clock:
    t = 1000.0

    def __call__(self) -> float:
        return self.t


class _GpuEvent:
    """A CUDA event stand-in: it 'completes' at the fake clock's time, doubled
    (GPU time is twice the wall time here, so the two cannot be confused)."""

    clock: _Clock

    def __init__(self, enable_timing: bool = False) -> None:
        self.at = 0.0

    def record(self, stream: object = None) -> None:
        self.at = 2 * self.clock.t

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: _GpuEvent) -> float:
        return (end.at - self.at) * 1000.0


def test_gpu_phase_times_reach_the_viewer(hook: gputui.hook.Hook) -> None:
    from types import SimpleNamespace

    clock = _Clock()
    _GpuEvent.clock = clock
    rec = hook.recorder
    rec.clock = clock
    rec.gpu_timing = True
    rec.torch = SimpleNamespace(
        cuda=SimpleNamespace(
            is_initialized=lambda: True,
            current_device=lambda: 0,
            is_current_stream_capturing=lambda: False,
            Event=_GpuEvent,
        )
    )
    rec.boundary()  # step 0 starts: a long step, so every step is GPU-timed
    for _ in range(3):
        for phase, seconds in (("data", 0.25), ("forward", 0.5), ("backward", 1.0)):
            rec.enter(phase)
            clock.t += seconds
            rec.exit(phase)
        rec.enter("optimizer")
        clock.t += 0.125
        rec.exit_boundary("optimizer")  # the optimizer's exit ends the step
    steps = _history(10)
    assert [s.index for s in steps] == [0, 1, 2]
    for s in steps:
        assert s.phases == {"data": 0.25, "forward": 0.5, "backward": 1.0, "optimizer": 0.125}
        assert s.gpu == {"data": 0.5, "forward": 1.0, "backward": 2.0, "optimizer": 0.25}
        assert s.gpu_total == 3.75
    # every event went back to the pool but the one that starts the next step
    assert len(rec.event_pool) == rec.events_alive - 1


def test_samples_of_plain_steps_are_counted_from_the_batches_looked_into(
    hook: gputui.hook.Hook, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset

    from gputui.hook import _recorder

    looked: list[int] = []
    first_dim = _recorder._first_dim

    def counting(batch: object) -> int:
        looked.append(1)
        return first_dim(batch)

    monkeypatch.setattr(_recorder, "_first_dim", counting)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(torch.randn(240, 4), torch.randn(240, 1)), batch_size=6)
    for x, y in loader:  # 40 short steps: most are plain
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    steps = _history(100)
    # step 0 starts at the first batch; the epoch's end (StopIteration) is in step 40
    assert [s.index for s in steps] == list(range(40))
    assert all(s.batches == 1 and s.samples == 6 and s.samples_inferred for s in steps)
    assert 1 <= len(looked) < 20  # only full steps look into their batch


def test_odd_phase_names_are_kept_apart_from_the_logs_own_tags(hook: gputui.hook.Hook) -> None:
    gputui.hook.step()  # starts step 0
    for name in ("", "\x00forward", "\x01end", 7):
        with gputui.hook.phase(name):  # type: ignore[arg-type]
            time.sleep(0.002)
    gputui.hook.step()
    steps = _history(10)
    assert [s.index for s in steps] == [0]
    assert {"unnamed", "forward", "end", "7"} <= set(steps[0].phases)
    assert hook.recorder.enabled and not hook.errors
