"""Container and pod attribution on fake /proc trees and fake runtime sockets."""

from __future__ import annotations

import dataclasses
import json
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gputui.host.attribution import HOSTNAME_FILE, NAMESPACE_FILE, ContainerAttributor
from gputui.host.runtime_api import RuntimeNames, http_get_json, names_from_answer
from gputui.snapshot.model import ProcessSnapshot
from tests.helpers.fake_proc import FakeProc

ID = "5dace3de0735f73d2b5048f12d41a71741a02e49668de921fdae62f7e65dc498"
UID = "7d4424e6-bb13-42f4-a47a-45a4828bf54d"
POD_SLICE = (
    f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice"
)


class FakeRuntime:
    """An HTTP/1.0 server on a Unix socket: ``answer(path)`` gives the raw reply."""

    def __init__(self, path: str, answer: Callable[[str], bytes | None]) -> None:
        self.path = path
        self.requests: list[str] = []
        self._answer = answer
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(path)
        self._sock.listen(8)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                request_path = data.split(b" ")[1].decode() if b" " in data else ""
                self.requests.append(request_path)
                reply = self._answer(request_path)
                if reply is None:  # never answer: the client's timeout ends it
                    conn.recv(1)
                    continue
                conn.sendall(reply)

    def close(self) -> None:
        self._sock.close()


def ok(doc: object) -> bytes:
    body = json.dumps(doc).encode()
    return b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + body


@pytest.fixture
def sockdir() -> Iterator[Path]:
    # Unix socket paths are limited to 108 bytes: a short directory
    path = Path(tempfile.mkdtemp(prefix="gt-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _names(
    sockdir: Path, runtime: str, request: str, answer: Callable[[str], bytes | None]
) -> tuple[RuntimeNames, FakeRuntime]:
    server = FakeRuntime(str(sockdir / f"{runtime}.sock"), answer)
    return RuntimeNames({runtime: ((server.path,), request)}, timeout_s=0.5), server


def _proc(pid: int, start: float = 1.0) -> ProcessSnapshot:
    return ProcessSnapshot(
        pid=pid, gpu_index=0, gpu_uuid="GPU-0", type="compute", start_time_s=start
    )


def test_docker_name_asked_once(tmp_path: Path, sockdir: Path) -> None:
    proc = FakeProc(tmp_path / "proc", 1)
    proc.add(100, cgroup=f"0::/system.slice/docker-{ID}.scope\n")
    proc.add(101, cgroup=f"0::/system.slice/docker-{ID}.scope\n")
    proc.add(102, cgroup="0::/user.slice/user-1000.slice/session-3.scope\n")
    names, server = _names(
        sockdir,
        "docker",
        "/containers/{id}/json",
        lambda p: ok({"Name": "/trainer", "Config": {"Labels": {}}}),
    )
    attributor = ContainerAttributor(proc.path, names, node_hostname="node")
    for _ in range(3):
        a, b, host = attributor.attribute((_proc(100), _proc(101), _proc(102)))
        assert a.container is not None and a.container.name == "trainer"
        assert a.container.runtime == "docker" and a.container.id == ID and a.container.note is None
        assert b.container == a.container
        assert host.container is None
    # one request for the container, whatever the processes and refreshes
    assert server.requests == [f"/containers/{ID}/json"]
    server.close()


def test_cri_o_labels_give_the_pod(tmp_path: Path, sockdir: Path) -> None:
    proc = FakeProc(tmp_path / "proc", 1)
    proc.add(100, cgroup=f"0::{POD_SLICE}/crio-{ID}.scope\n")
    answer = {
        "name": "k8s_train_trainer-0_ml_uid_0",
        "labels": {
            "io.kubernetes.container.name": "train",
            "io.kubernetes.pod.name": "trainer-0",
            "io.kubernetes.pod.namespace": "ml",
        },
    }
    names, server = _names(sockdir, "cri-o", "/containers/{id}", lambda p: ok(answer))
    (p,) = ContainerAttributor(proc.path, names, node_hostname="node").attribute((_proc(100),))
    c = p.container
    assert c is not None
    assert c.pod is not None
    assert (c.runtime, c.name, c.pod.name, c.pod.namespace, c.pod.uid, c.pod.qos) == (
        "cri-o",
        "train",
        "trainer-0",
        "ml",
        UID,
        "burstable",
    )
    assert server.requests == [f"/containers/{ID}"]
    server.close()


def test_containerd_pod_names_from_the_process_files(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path / "proc", 1)
    files = {HOSTNAME_FILE: "trainer-7f9c\n", NAMESPACE_FILE: "research"}
    proc.add(100, cgroup=f"0::{POD_SLICE}/cri-containerd-{ID}.scope\n", files=files)
    (p,) = ContainerAttributor(proc.path, RuntimeNames({}), node_hostname="node").attribute(
        (_proc(100),)
    )
    c = p.container
    assert c is not None
    assert c.pod is not None
    assert (c.runtime, c.id, c.name, c.pod.name, c.pod.namespace) == (
        "containerd",
        ID,
        None,
        "trainer-7f9c",
        "research",
    )
    assert c.note == "containerd has no HTTP API: ids only"


def test_unreadable_files_say_so(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path / "proc", 1)
    # a pod on the host's network: its hostname is the node's, not the pod's name
    proc.add(
        100, cgroup=f"0::{POD_SLICE}/cri-containerd-{ID}.scope\n", files={HOSTNAME_FILE: "node\n"}
    )
    (p,) = ContainerAttributor(proc.path, RuntimeNames({}), node_hostname="node").attribute(
        (_proc(100),)
    )
    c = p.container
    assert c is not None and c.pod is not None
    assert c.pod.name is None and c.pod.namespace is None and c.pod.uid == UID
    assert c.note is not None
    assert "pod name:" in c.note and "namespace:" in c.note


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (b"HTTP/1.0 404 Not Found\r\n\r\nno such container", "gave no answer"),
        (b"HTTP/1.0 200 OK\r\n\r\n{not json", "gave no answer"),
        (b"garbage", "gave no answer"),
        (None, "did not answer"),
        (ok([1, 2]), "gave no container"),
    ],
    ids=["404", "bad-json", "garbage", "silent", "not-an-object"],
)
def test_a_bad_runtime_leaves_the_ids(
    tmp_path: Path, sockdir: Path, reply: bytes | None, said: str
) -> None:
    proc = FakeProc(tmp_path / "proc", 1)
    proc.add(100, cgroup=f"0::/system.slice/docker-{ID}.scope\n")
    names, server = _names(sockdir, "docker", "/containers/{id}/json", lambda p: reply)
    (p,) = ContainerAttributor(proc.path, names, node_hostname="node").attribute((_proc(100),))
    assert p.container is not None and p.container.id == ID and p.container.name is None
    assert p.container.note is not None and said in p.container.note
    server.close()


def test_a_silent_runtime_is_not_asked_about_every_container(sockdir: Path) -> None:
    names, server = _names(sockdir, "docker", "/containers/{id}/json", lambda p: None)
    first = names.lookup("docker", ID)
    second = names.lookup("docker", "cd" * 32)
    assert first[3] is not None and "did not answer" in first[3]
    assert second[3] == first[3]
    assert len(server.requests) == 1  # one timeout, not one per container
    server.close()


def test_missing_and_forbidden_sockets(tmp_path: Path, sockdir: Path) -> None:
    missing = RuntimeNames({"docker": ((str(sockdir / "absent.sock"),), "/containers/{id}/json")})
    assert "no docker API socket" in (missing.lookup("docker", ID)[3] or "")
    # a path that is not a socket: connecting fails, said plainly
    plain = sockdir / "plain"
    plain.write_text("")
    refused = RuntimeNames({"docker": ((str(plain),), "/containers/{id}/json")})
    assert "docker" in (refused.lookup("docker", ID)[3] or "")


def test_chunked_answer(sockdir: Path) -> None:
    body = json.dumps({"Name": "/a"}).encode()
    reply = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n" % len(body)
        + body
        + b"\r\n0\r\n\r\n"
    )
    server = FakeRuntime(str(sockdir / "c.sock"), lambda p: reply)
    assert http_get_json(server.path, "/x", 1.0) == {"Name": "/a"}
    server.close()


def test_names_from_docker_labels_of_a_pod() -> None:
    doc = {
        "Name": "/k8s_train_trainer-0_ml_x_0",
        "Config": {
            "Labels": {
                "io.kubernetes.container.name": "train",
                "io.kubernetes.pod.name": "p",
                "io.kubernetes.pod.namespace": 7,
            }
        },
    }
    assert names_from_answer("docker", doc) == ("train", "p", None, None)


def test_cached_per_pid_and_start_time(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path / "proc", 1)
    proc.add(100, cgroup=f"0::/system.slice/docker-{ID}.scope\n")
    attributor = ContainerAttributor(proc.path, RuntimeNames({}), node_hostname="node")
    (p,) = attributor.attribute((_proc(100, start=1.0),))
    assert p.container is not None and p.container.id == ID
    # the pid now names another process, on the host
    proc.add(100, cgroup="0::/user.slice\n")
    (same,) = attributor.attribute((_proc(100, start=1.0),))
    assert same.container == p.container  # cached: the same process
    (reused,) = attributor.attribute((_proc(100, start=50.0),))
    assert reused.container is None


def test_host_pids_and_vanished_processes(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path / "proc", 1)
    proc.add(100, cgroup=f"0::/system.slice/docker-{ID}.scope\n")
    attributor = ContainerAttributor(proc.path, RuntimeNames({}), node_hostname="node")
    host = dataclasses.replace(_proc(100), host_pid=100)  # a host pid
    gone = _proc(555)
    assert attributor.attribute((host, gone)) == (host, gone)


def test_one_parse_per_cgroup_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a node's thousands of processes live in a few cgroups: each text is parsed once
    from gputui.host import attribution

    parsed: list[str] = []
    original = attribution.parse_cgroup

    def counting(text: str) -> Any:
        parsed.append(text)
        return original(text)

    monkeypatch.setattr(attribution, "parse_cgroup", counting)
    proc = FakeProc(tmp_path / "proc", 1)
    for pid in range(100, 110):
        proc.add(pid, cgroup=f"0::/system.slice/docker-{ID}.scope\n")
    proc.add(110, cgroup="0::/user.slice\n")
    attributor = ContainerAttributor(proc.path, RuntimeNames({}), node_hostname="node")
    rows = attributor.attribute(tuple(_proc(pid) for pid in range(100, 111)))
    assert [p.container is not None and p.container.id == ID for p in rows] == [True] * 10 + [False]
    assert len(parsed) == 2


def test_a_process_placed_as_before_is_the_value_made_before(tmp_path: Path) -> None:
    """The same input value and container: the output of the last refresh (the
    views read only the processes that are new objects); another input, a new
    value."""
    proc = FakeProc(tmp_path / "proc", 1)
    proc.add(100, cgroup=f"0::/system.slice/docker-{ID}.scope\n")
    attributor = ContainerAttributor(proc.path, RuntimeNames({}), node_hostname="node")
    given = _proc(100)
    (first,) = attributor.attribute((given,))
    (again,) = attributor.attribute((given,))
    assert again is first and first.container is not None
    changed = dataclasses.replace(given, gpu_mem_bytes=7)
    (other,) = attributor.attribute((changed,))
    assert other is not first and other.gpu_mem_bytes == 7 and other.container == first.container


def test_containers_carried_from_the_last_list_equal_a_fresh_look_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refresh after refresh, most places hold the process objects of the last
    list: their containers are carried over, the others looked up.  Every list's
    containers equal those a new attributor finds for it, through pid reuse,
    processes without a start time and host pids."""
    import random

    from gputui.host import attribution

    rng = random.Random(7)
    proc = FakeProc(tmp_path / "proc", 1)
    groups = [f"0::/system.slice/docker-{ID}.scope\n", "0::/user.slice\n", f"0::{POD_SLICE}\n"]
    starts: dict[int, float] = {}

    def fresh(pid: int) -> ProcessSnapshot:
        starts[pid] = starts.get(pid, 0.0) + 1.0  # a new process: a new start time
        proc.add(pid, cgroup=rng.choice(groups))
        return _proc(pid, start=starts[pid])

    processes = [fresh(pid) for pid in range(100, 160)]
    attributor = ContainerAttributor(proc.path, RuntimeNames({}), node_hostname="node")
    whole: list[int] = []  # the steps at which it looked the whole list up
    full = attribution.ContainerAttributor._infos
    step = 0

    def counting(self: Any, given: Any) -> Any:
        if self is attributor:
            whole.append(step)
        return full(self, given)

    monkeypatch.setattr(attribution.ContainerAttributor, "_infos", counting)
    odd: list[int] = []  # places of a process read at every refresh
    for step in range(40):
        changes = rng.choice([0, 1, 3, 8]) if step else 0
        for at in rng.sample(range(len(processes)), changes):
            if rng.random() < 0.5:  # new numbers, the same process
                processes[at] = dataclasses.replace(processes[at], gpu_mem_bytes=step)
            else:  # the pid reused by another process
                processes[at] = fresh(processes[at].pid)
        if step == 20:  # one without a start time, one of another PID namespace
            odd = [3, 4]
            processes[3] = dataclasses.replace(processes[3], start_time_s=None)
            processes[4] = dataclasses.replace(processes[4], host_pid=processes[4].pid)
        if step == 25:
            for at in odd:
                processes[at] = fresh(processes[at].pid)
        if step == 30:  # a list of another length
            processes.append(fresh(160))
        given = tuple(processes)
        got = [p.container for p in attributor.attribute(given)]
        new = ContainerAttributor(proc.path, RuntimeNames({}), node_hostname="node")
        assert got == [p.container for p in new.attribute(given)], step
    # whole at the first list, while a process is read every time, and at the new length
    assert {0, 20, 21, 22, 23, 24, 25, 30} <= set(whole)
    assert len(whole) < 20  # the other refreshes carried the containers over
