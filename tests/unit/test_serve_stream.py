"""``gputui serve --stdio``'s stream: the protocol both ways, the serve loop's
ends (standard input closed, a broken pipe), the node without a driver, and
the nvidia-smi rows of a node without gputui."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from gputui.cluster import smi, wire
from gputui.cluster.serve import JOBS_REFRESH_S, HostOnlySource, JobsCache, serve
from gputui.recording.replay import read_demo
from gputui.snapshot.model import SCHEMA_VERSION
from tests.helpers.deadlines import RUN_S, WAIT_S

REPO = Path(__file__).resolve().parents[2]


def serve_once(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """``gputui serve --stdio ARGS`` with its input closed: a hello and one snapshot."""
    return subprocess.run(
        [sys.executable, "-m", "gputui", "serve", "--stdio", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=env or dict(os.environ, PYTHONPATH=str(REPO)),
        timeout=RUN_S,
    )


def first_frame(
    done: subprocess.CompletedProcess[bytes],
) -> tuple[wire.ServeHello, wire.ServeFrame]:
    assert done.returncode == 0, done.stderr
    hello, line = done.stdout.splitlines()
    frame = wire.decode_frame(line)
    assert frame is not None
    return wire.decode_hello(hello), frame


class ListSource:
    label = "test"
    is_recording = True
    natural_interval_s = None

    def __init__(self, snapshots: list[Any]) -> None:
        self.snapshots = snapshots
        self.calls = 0

    def sample(self) -> Any:
        self.calls += 1
        return self.snapshots[(self.calls - 1) % len(self.snapshots)]

    def close(self) -> None:
        pass


def test_every_snapshot_field_travels_and_decodes_the_same() -> None:
    _, snapshots = read_demo()
    source = ListSource(snapshots[:3])
    out = io.BytesIO()
    stop = threading.Event()
    jobs = [{"pid": 5, "rank": 1, "world_size": 2, "job_id": "run-1", "command": ["python"]}]
    cache = JobsCache(lambda: {5}, lambda: jobs)

    class Stopping(io.BytesIO):
        def write(self, data: Any) -> int:
            if data.count(b"\n") and out.getvalue().count(b"\n") >= 3:
                stop.set()
            return out.write(data)

    serve(source, Stopping(), None, 0.01, "node\x1b[2J", "9.9", jobs=cache, stop=stop)
    lines = out.getvalue().splitlines()
    hello = wire.decode_hello(lines[0])
    assert (hello.version, hello.host, hello.gputui_version) == (wire.VERSION, "node\x1b[2J", "9.9")
    frames = [wire.decode_frame(line) for line in lines[1:]]
    assert [f.snapshot for f in frames if f] == snapshots[: len(frames)]
    first = frames[0]
    assert first is not None and first.gpu_unavailable is None
    assert first.ranks[0].job_id == "run-1" and first.ranks[0].rank == 1
    # the snapshot is the codec's form, whole: a field the model gains travels too
    doc = json.loads(lines[1])
    assert doc["snapshot"]["schema"] == SCHEMA_VERSION
    assert set(doc["snapshot"]["processes"][0]) == {
        f.name for f in dataclasses.fields(snapshots[0].processes[0])
    }


def test_serve_ends_with_its_standard_input_and_on_a_broken_pipe() -> None:
    _, snapshots = read_demo()
    read_fd, write_fd = os.pipe()
    out = io.BytesIO()
    done: list[int] = []
    with os.fdopen(read_fd, "rb") as stdin:
        thread = threading.Thread(
            target=lambda: done.append(serve(ListSource(snapshots), out, stdin, 3600.0, "n", "v"))
        )
        thread.start()
        os.close(write_fd)
        thread.join(WAIT_S)
    assert done == [0] and out.getvalue().count(b"\n") == 2

    class Broken(io.BytesIO):
        def write(self, data: Any) -> int:
            raise BrokenPipeError

    assert serve(ListSource(snapshots), Broken(), None, 0.01, "n", "v") == 0


def test_serve_demo_process_exits_when_stdin_closes_and_opens_no_socket() -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputui", "serve", "--stdio", "--demo", "--interval", "0.2"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        hello = wire.decode_hello(proc.stdout.readline())
        frame = wire.decode_frame(proc.stdout.readline())
        assert hello.is_recording and frame is not None and frame.snapshot.devices
        # no listening socket: the process has no socket inode at all
        fds = os.listdir(f"/proc/{proc.pid}/fd")
        links = [os.readlink(f"/proc/{proc.pid}/fd/{fd}") for fd in fds]
        assert not [link for link in links if link.startswith("socket:")]
        proc.stdin.close()
        assert proc.wait(RUN_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_node_without_a_driver_serves_its_host_and_the_reason() -> None:
    try:
        import pynvml

        pynvml.nvmlInit()
        pytest.skip("this machine has an NVIDIA driver")
    except Exception:
        pass
    _, frame = first_frame(serve_once())
    assert frame.gpu_unavailable
    assert "NVIDIA" in frame.gpu_unavailable or "NVML" in frame.gpu_unavailable
    assert frame.snapshot.devices == () and frame.snapshot.host.mem_total_bytes
    source = HostOnlySource("no driver")
    assert source.sample().error == "no driver"


def test_hooked_jobs_are_read_when_the_pids_change_or_now_and_then() -> None:
    now = [0.0]
    pids: set[int] = set()
    reads: list[int] = []

    def read() -> list[dict[str, Any]]:
        reads.append(1)
        return [{"pid": p} for p in sorted(pids)]

    cache = JobsCache(lambda: set(pids), read, clock=lambda: now[0])
    assert cache.jobs() == [] and not reads  # no hooked process: no connection
    pids.add(7)
    assert cache.jobs() == [{"pid": 7}] and len(reads) == 1
    now[0] += 1.0
    cache.jobs()
    assert len(reads) == 1  # same pids, not yet due
    now[0] += JOBS_REFRESH_S
    cache.jobs()
    assert len(reads) == 2
    pids.add(8)
    assert cache.jobs() == [{"pid": 7}, {"pid": 8}] and len(reads) == 3


@pytest.mark.parametrize(
    "line, why",
    [
        (b"Welcome!", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"type": "gputui-serve"}', "no protocol version"),
        (b'{"type": "gputui-serve", "version": 99}', "version 99"),
        (b'{"type": "other", "version": 1}', "not a gputui serve hello"),
    ],
    ids=["text", "list", "no-version", "newer", "other"],
)
def test_hellos_that_are_refused(line: bytes, why: str) -> None:
    with pytest.raises(wire.ProtocolError, match=why):
        wire.decode_hello(line)


def test_frames_are_checked_and_newer_messages_skipped() -> None:
    with pytest.raises(wire.ProtocolError, match="does not decode"):
        wire.decode_frame(b'{"type": "snapshot", "snapshot": {"timestamp_s": "x"}}')
    with pytest.raises(wire.ProtocolError, match="without a type"):
        wire.decode_frame(b'{"snapshot": {}}')
    assert wire.decode_frame(b'{"type": "from-the-future", "x": 1}') is None
    with pytest.raises(wire.ProtocolError, match="bytes"):
        wire.decode_frame(b" " * (wire.MAX_LINE_BYTES + 1))
    ranks = wire.decode_ranks(
        [
            {"pid": 1, "job_id": "j", "ranks": [{"pid": 2, "rank": 0}, {"pid": "x"}, 5]},
            {"pid": 3, "error": "no hello"},
            "junk",
            {"pid": 4, "device": {"index": 2}, "recent_step_s": -1, "command": ["a", 3]},
        ]
    )
    assert [(r.job_id, r.pid, r.gpu, r.recent_step_s, r.command) for r in ranks] == [
        ("j", 2, None, None, ()),
        ("pid 4", 4, 2, None, ("a",)),
    ]


def test_nvidia_smi_rows() -> None:
    assert "-l 2" in smi.smi_command(2.4) and "-l 1" in smi.smi_command(0.5)
    fields = smi.smi_command(1).split("=", 1)[1].split()[0].split(",")
    assert fields == [f for f, _, _ in smi.FIELDS]
    d = smi.parse_line("3, GPU-x, NVIDIA A100-SXM4-80GB, 37, 5, 1024, 81920, 45, 123.45, 400.00")
    assert (d.index, d.uuid, d.name, d.util_gpu_pct, d.mem_used_bytes) == (
        3,
        "GPU-x",
        "NVIDIA A100-SXM4-80GB",
        37.0,
        1024 * 2**20,
    )
    assert (d.mem_total_bytes, d.temp_gpu_c, d.power_w, d.power_limit_w) == (
        81920 * 2**20,
        45.0,
        123.45,
        400.0,
    )
    odd = smi.parse_line("0, GPU-y, Odd, Name, [N/A], 999, 1, 2, -500, [Not Supported], 1")
    assert odd.name == "Odd, Name" and odd.util_gpu_pct is None
    assert odd.util_mem_pct is None and odd.temp_gpu_c is None and odd.power_w is None
    for junk in ("No devices were found", "x, y, z, 1, 2, 3, 4, 5, 6, 7"):
        with pytest.raises(smi.NotSmi):
            smi.parse_line(junk)


def test_serve_replays_a_recording_and_refuses_a_bad_one(tmp_path: Path) -> None:
    sample = REPO / "tests" / "samples" / "monitor-v1.jsonl.gz"
    hello, frame = first_frame(serve_once("--replay", str(sample)))
    assert hello.label == "recording: monitor-v1.jsonl.gz" and frame.snapshot.devices
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(b"not a recording")
    done = serve_once("--replay", str(bad))
    assert done.returncode == 2 and done.stdout == b""
    assert len(done.stderr.splitlines()) == 1 and b"gputui serve" in done.stderr
