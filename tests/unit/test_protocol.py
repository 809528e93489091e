from __future__ import annotations

import json
import os
import socket
import stat
import struct
import subprocess
import sys

import pytest

from gputui.protocol import framing, messages, paths


def test_roundtrip_byte_by_byte() -> None:
    frames = framing.encode("steps", steps=[{"i": 1, "wall": 0.5}]) + framing.encode("status")
    reader = framing.FrameReader()
    got = []
    for b in frames:
        got += reader.feed(bytes([b]))
    assert [m["type"] for m in got] == ["steps", "status"]
    assert got[0]["v"] == messages.PROTOCOL_VERSION
    assert got[0]["steps"] == [{"i": 1, "wall": 0.5}]
    assert reader.pending == 0


def test_oversized_header_rejected_before_payload() -> None:
    reader = framing.FrameReader()
    with pytest.raises(framing.FrameError):
        reader.feed(struct.pack(">I", framing.MAX_FRAME + 1))


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b"[1, 2]",
        json.dumps({"v": 1}).encode(),
        json.dumps({"type": "x"}).encode(),
        b"\xff\xfe",
    ],
)
def test_bad_payloads_rejected(payload: bytes) -> None:
    with pytest.raises(framing.FrameError):
        framing.FrameReader().feed(struct.pack(">I", len(payload)) + payload)


def test_truncated_frame_is_pending() -> None:
    frame = framing.encode("hello", pid=1)
    reader = framing.FrameReader()
    assert reader.feed(frame[:-3]) == []
    assert reader.pending == len(frame) - 3


def test_encode_refuses_too_large() -> None:
    with pytest.raises(framing.FrameError):
        framing.encode("steps", blob="x" * (framing.MAX_FRAME + 10))


def test_encode_rejects_nan() -> None:
    with pytest.raises(ValueError):
        framing.encode("status", x=float("nan"))


@pytest.fixture
def sock_dir(tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch) -> str:
    path = os.path.join(str(tmp_path), "s")
    monkeypatch.setenv(paths.ENV_SOCKET_DIR, path)
    return path


def test_socket_path_creates_private_dir(sock_dir: str) -> None:
    path = paths.socket_path(123, create_dir=True)
    assert path == os.path.join(sock_dir, "123.sock")
    st = os.stat(sock_dir)
    assert stat.S_IMODE(st.st_mode) == 0o700
    assert st.st_uid == os.getuid()


def test_refuses_group_readable_dir(sock_dir: str) -> None:
    os.mkdir(sock_dir, 0o700)
    os.chmod(sock_dir, 0o750)
    with pytest.raises(paths.SocketDirError, match="mode 750"):
        paths.socket_path(1, create_dir=True)


def test_refuses_symlinked_dir(sock_dir: str, tmp_path: os.PathLike[str]) -> None:
    target = os.path.join(str(tmp_path), "real")
    os.mkdir(target, 0o700)
    os.symlink(target, sock_dir)
    with pytest.raises(paths.SocketDirError, match="not a directory"):
        paths.ensure_private_dir(sock_dir)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_refuses_dir_owned_by_someone_else(sock_dir: str) -> None:
    os.mkdir(sock_dir, 0o700)
    os.chown(sock_dir, os.getuid() + 4242, -1)
    with pytest.raises(paths.SocketDirError, match="owned by uid"):
        paths.ensure_private_dir(sock_dir)
    # ...and nothing in it is listed.
    assert paths.list_sockets() == {}


def test_candidate_dirs_without_override(
    monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]
) -> None:
    monkeypatch.delenv(paths.ENV_SOCKET_DIR, raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert paths.socket_dirs() == [
        os.path.join(str(tmp_path), "gputui"),
        f"/tmp/gputui-{os.getuid()}",
    ]
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert paths.socket_dirs() == [f"/tmp/gputui-{os.getuid()}"]


def _bound_socket(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    return s


def test_list_sockets_cleans_stale(sock_dir: str) -> None:
    paths.ensure_private_dir(sock_dir)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = _bound_socket(os.path.join(sock_dir, f"{os.getpid()}.sock"))
    stale = _bound_socket(os.path.join(sock_dir, f"{dead.pid}.sock"))
    open(os.path.join(sock_dir, "notes.txt"), "w").close()
    try:
        assert paths.hooked_pids() == {os.getpid(), dead.pid}  # cheap: no cleanup
        assert paths.list_sockets() == {os.getpid(): os.path.join(sock_dir, f"{os.getpid()}.sock")}
        assert not os.path.exists(os.path.join(sock_dir, f"{dead.pid}.sock"))
        assert paths.find_socket(os.getpid()) is not None
        assert paths.find_socket(dead.pid) is None
    finally:
        live.close()
        stale.close()


def test_peer_uid_of_socketpair() -> None:
    a, b = socket.socketpair()
    try:
        assert paths.peer_uid(a) in (os.geteuid(), None)
    finally:
        a.close()
        b.close()


def test_good_frames_before_a_bad_one_are_delivered_then_the_error() -> None:
    """A hello and a bad frame in one read: the hello is taken, the error comes
    next, and the stream stays broken (it cannot be resynchronised)."""
    reader = framing.FrameReader()
    bad = struct.pack(">I", 5) + b"{bad}"
    msgs = reader.feed(framing.encode("hello", pid=1) + bad)
    assert [m["type"] for m in msgs] == ["hello"]
    with pytest.raises(framing.FrameError, match="not UTF-8 JSON"):
        reader.raise_pending()
    with pytest.raises(framing.FrameError):
        reader.feed(framing.encode("steps", steps=[]))
