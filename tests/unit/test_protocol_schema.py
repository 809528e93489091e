"""The typed wire schema: round trips, rejections that name the field, and the
hostile frames the viewer must turn into one line instead of a traceback."""

from __future__ import annotations

import gzip
import json
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from gputui import cli
from gputui.client.hook import (
    AttachError,
    Disconnected,
    HookClient,
    Invalid,
    parse_event,
)
from gputui.protocol import framing, messages
from gputui.protocol.capture import CaptureResult, CaptureStatus, CpuOpRow, GpuTime, KernelRow
from gputui.protocol.fields import SchemaError
from gputui.protocol.schema import (
    DeviceInfo,
    Hello,
    MemoryBatch,
    MemorySample,
    Status,
    StepBatch,
    StepFlag,
    StepRecord,
)
from gputui.protocol.wire import decode
from tests.helpers.deadlines import WAIT_S

DATA = Path(__file__).resolve().parents[2] / "gputui" / "data"


def hello(**extra: Any) -> dict[str, Any]:
    base = Hello(pid=1234, argv=("python", "train.py"), device=DeviceInfo(0, "H100", 80, "GPU-x"))
    obj = base.to_wire()
    obj.update(extra)
    return obj


SAMPLES: list[Any] = [
    Hello(
        pid=42,
        argv=("python", "x.py"),
        rank=1,
        world_size=2,
        run_id="r",
        master="h:1",
        device=DeviceInfo(0, "GPU", 1 << 30, "GPU-abc"),
        status=Status(t=1.0, steps=3, last_step=2, errors=("e",), coarse_reasons=("c",)),
    ),
    Status(t=2.0, steps=10, recent_step_s=0.01, dropped=1),
    StepBatch(
        (
            StepRecord(0, 1.0, 0.5, {"forward": 0.2, "other": 0.3}),
            StepRecord(
                1, 2.0, 0.5, {"data": 0.5}, {"data": 0.1}, 0.1, 8, True, 1, StepFlag.PROFILED
            ),
        ),
        missed=3,
        backlog=True,
    ),
    MemoryBatch((MemorySample(1.0, 0, 10, 20, 5, 15, 25, 1, 0),)),
    CaptureStatus(messages.CAPTURE_RECORDING, "c1", step=5, steps=3),
    CaptureResult(
        id="c1",
        first_step=5,
        last_step=7,
        kernels=(KernelRow("k", "gemm", 2, 10.0, 5.0, 4.0, 6.0, 1.0),),
        cpu_ops=(CpuOpRow("aten::mm", 1, 3.0, 4.0, 3.0, 1.0),),
        by_class={"gemm": 10.0},
        gpu_time=GpuTime(0, 20.0, 10.0, 10.0, 10.0),
        trace_path="/tmp/t.json",
    ),
    CaptureResult(id="c2", cast_parents=(("aten::linear", 5), ("", 2))),
]


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip(msg: Any) -> None:
    wire = json.loads(json.dumps(msg.to_wire()))
    assert decode(wire) == msg


@pytest.mark.parametrize(
    ("obj", "field", "problem"),
    [
        (hello(pid="x"), "hello.pid", "expected an integer"),
        (hello(pid=0), "hello.pid", "outside"),
        (hello(argv="python"), "hello.argv", "expected a list"),
        (hello(device={"index": -1}), "hello.device.index", "outside"),
        (hello(steps=-5), "hello.steps", "outside"),
        (hello(started=float("inf")), "hello.started", "outside"),
        ({"v": 1, "type": "steps", "steps": [{"i": 0, "wall": "x"}]}, "steps.steps[0].wall", ""),
        ({"v": 1, "type": "steps", "steps": [{"i": 0, "wall": 1.0, "phases": []}]}, "", "object"),
        ({"v": 1, "type": "steps", "steps": [{"wall": 1.0}]}, "steps.steps[0].i", "missing"),
        ({"v": 1, "type": "steps", "steps": "many"}, "steps.steps", "expected a list"),
        ({"v": 1, "type": "memory", "samples": [{"allocated": 10**30}]}, "allocated", "outside"),
        ({"v": 1, "type": "capture_result", "kernels": [{"name": 5}]}, "kernels[0].name", ""),
        ({"v": 1, "type": "capture_status", "state": None}, "capture_status.state", ""),
        ({"v": 1, "type": "status", "gpu_timing": []}, "status.gpu_timing", "object"),
        ({"v": 1, "type": "capture", "steps": 500}, "capture.steps", "outside 1..200"),
    ],
)
def test_rejections_name_the_field(obj: dict[str, Any], field: str, problem: str) -> None:
    with pytest.raises(SchemaError) as err:
        decode(obj)
    assert field in str(err.value) and problem in str(err.value)


def test_a_capture_from_an_older_hook_says_nothing_of_its_casts() -> None:
    """``cast_parents`` is new on the wire: absent, it reads as none."""
    wire = CaptureResult(id="c3", cast_parents=(("aten::linear", 5),)).to_wire()
    assert wire["cast_parents"] == {"aten::linear": 5}
    del wire["cast_parents"]
    assert decode(json.loads(json.dumps(wire))).cast_parents == ()


def test_unknown_types_and_keys_are_ignored() -> None:
    assert decode({"v": 1, "type": "from_the_future", "x": 1}) is None
    status = decode({"v": 1, "type": "status", "steps": 3, "brand_new": {"a": 1}})
    assert isinstance(status, Status) and status.steps == 3


def test_a_bad_stream_message_becomes_an_invalid_event() -> None:
    event = parse_event({"v": 1, "type": "steps", "steps": [{"i": "zero", "wall": 1.0}]})
    assert isinstance(event, Invalid) and "steps.steps[0].i" in event.error


def test_both_embedded_recordings_decode_whole() -> None:
    lines = gzip.open(DATA / "attach_demo.jsonl.gz", "rt").read().splitlines()
    assert isinstance(decode(json.loads(lines[1])), Hello)
    kinds = set()
    for line in lines[2:]:
        msg = json.loads(line)["msg"]
        event = parse_event(msg)
        assert event is not None and not isinstance(event, Invalid), msg.get("type")
        kinds.add(type(event).__name__)
    assert {"StepBatch", "Status", "MemoryBatch", "CaptureResult", "CaptureStatus"} <= kinds


class FakeHook:
    """A socket that answers a viewer with the frames a test gives it."""

    def __init__(self, sock_dir: Path, pid: int, frames: list[bytes], hold_s: float = 5.0) -> None:
        self.path = sock_dir / f"{pid}.sock"
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.path))
        self.listener.listen(1)
        self.frames = frames
        self.hold = threading.Event()
        self.hold_s = hold_s
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            for frame in self.frames:
                conn.sendall(frame)
            self.hold.wait(self.hold_s)

    def close(self) -> None:
        self.hold.set()
        self.listener.close()


@pytest.fixture
def sock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import os
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="gts-", dir="/tmp"))
    os.chmod(path, 0o700)
    monkeypatch.setenv("GPUTUI_SOCKET_DIR", str(path))
    yield path
    for item in path.iterdir():
        item.unlink()
    path.rmdir()


def our_pid() -> int:
    import os

    return os.getpid()  # a live process of ours, so the viewer tries its socket


@pytest.mark.parametrize(
    ("frames", "message"),
    [
        ([framing.encode_obj(hello(pid="x"))], "sent an invalid hello (hello.pid: expected an"),
        ([framing.encode("steps", steps=[], missed=0)], "sent a 'steps' frame where a hello"),
        ([b"\x00\x00\x00\x05{bad}"], "did not say hello (frame is not UTF-8 JSON"),
        ([], "did not say hello within 0.5 s"),
    ],
)
def test_hostile_hellos_are_one_line(sock_dir: Path, frames: list[bytes], message: str) -> None:
    fake = FakeHook(sock_dir, our_pid(), frames)
    try:
        with pytest.raises(AttachError) as err:
            # the wait is what is tested only where nothing is sent; what is sent
            # may be late on a loaded machine
            HookClient.connect(our_pid(), timeout=WAIT_S if frames else 0.5)
        assert message in str(err.value) and "\n" not in str(err.value)
    finally:
        fake.close()


def test_attach_once_on_a_hostile_hello_exits_2(
    sock_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeHook(sock_dir, our_pid(), [framing.encode_obj(hello(pid="x"))])
    try:
        assert cli.main(["attach", str(our_pid()), "--once", "--timeout", str(WAIT_S)]) == 2
    finally:
        fake.close()
    err = capsys.readouterr().err
    assert "invalid hello" in err and len(err.strip().splitlines()) == 1


def test_a_malformed_steps_frame_is_skipped_and_reported(
    sock_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    frames = [
        framing.encode_obj(hello()),
        framing.encode("steps", steps=[{"i": 0, "wall": 0.1, "phases": {"forward": "slow"}}]),
        # step 5: past the warm-up steps every report leaves out
        framing.encode("steps", steps=[StepRecord(5, 1.0, 0.2, {"forward": 0.2}).to_wire()]),
        framing.encode("synced", steps=1),
    ]
    fake = FakeHook(sock_dir, our_pid(), frames)
    try:
        assert cli.main(["attach", str(our_pid()), "--once", "--timeout", str(WAIT_S)]) == 0
    finally:
        fake.close()
    out = capsys.readouterr().out
    assert "skipped an invalid steps message: steps.steps[0].phases.forward" in out
    assert "steps 5..5 (1)" in out


def test_a_bad_frame_right_after_the_hello_ends_the_session_with_its_reason(
    sock_dir: Path,
) -> None:
    """Not "connecting" forever, not "no hello": the hello is read, then the
    session ends saying the hook sent bad data."""
    fake = FakeHook(sock_dir, our_pid(), [framing.encode_obj(hello()) + b"\x00\x00\x00\x05{bad}"])
    try:
        client = HookClient.connect(our_pid(), timeout=WAIT_S)
        assert client.hello.pid == 1234
        client.start()
        event = client.get(timeout=WAIT_S)
        assert isinstance(event, Disconnected) and "bad data from the hook" in event.reason
        client.close()
    finally:
        fake.close()
