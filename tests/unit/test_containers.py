"""The cgroup parser over real ``/proc/PID/cgroup`` contents of each runtime
(tests/data/cgroups, each file citing where it was published)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputui.host.containers import parse_cgroup, parse_path
from gputui.snapshot.model import ContainerInfo, PodInfo

DATA = Path(__file__).resolve().parent.parent / "data" / "cgroups"
FIXTURES = sorted(DATA.glob("*.cgroup"))


def _load(path: Path) -> tuple[str, dict[str, str] | None]:
    """The file's cgroup lines, and what it expects (None: no container)."""
    lines, expect, source = [], None, None
    for line in path.read_text().splitlines():
        if line.startswith("# expect:"):
            words = line.removeprefix("# expect:").split()
            expect = None if words == ["none"] else dict(w.split("=", 1) for w in words)
        elif line.startswith("# source:"):
            source = line
        elif not line.startswith("#"):
            lines.append(line)
    assert source is not None, f"{path.name} cites no source"
    return "\n".join(lines) + "\n", expect


def test_every_runtime_and_qos_has_a_fixture() -> None:
    expected = [_load(p)[1] for p in FIXTURES]
    runtimes = {e["runtime"] for e in expected if e}
    assert {"docker", "containerd", "cri-o", "podman", "kubernetes"} <= runtimes
    assert {"guaranteed", "burstable", "besteffort"} <= {e.get("qos") for e in expected if e}
    assert any(e is None for e in expected)
    # both cgroup versions
    texts = [_load(p)[0] for p in FIXTURES]
    assert any(t.startswith("0::") for t in texts) and any(":memory:" in t for t in texts)


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_fixture(path: Path) -> None:
    text, expect = _load(path)
    found = parse_cgroup(text)
    if expect is None:
        assert found is None
        return
    assert found is not None
    assert found.runtime == expect["runtime"]
    assert found.id == expect.get("id")
    assert (found.pod and found.pod.uid) == expect.get("pod_uid")
    assert (found.pod and found.pod.qos) == expect.get("qos")
    # names never come from the path
    assert found.name is None
    assert found.pod is None or (found.pod.name is None and found.pod.namespace is None)


ID = "ab" * 32
UID = "0125ec2f-b64a-4868-8f5b-94b56cbab864"


#: layouts the fixtures lack, by name: (cgroup path, what it names)
LAYOUTS = {
    "cgroupfs-guaranteed": (
        f"/kubepods/pod{UID}/{ID}",
        ContainerInfo("kubernetes", ID, pod=PodInfo(UID, qos="guaranteed")),
    ),
    "cgroupfs-crio": (
        f"/kubepods/besteffort/pod{UID}/crio-{ID}",
        ContainerInfo("cri-o", ID, pod=PodInfo(UID, qos="besteffort")),
    ),
    "pod-slice-only": (
        f"/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice",
        ContainerInfo("kubernetes", None, pod=PodInfo(UID, qos="guaranteed")),
    ),
    "docker-scope": (f"/system.slice/docker-{ID}.scope", ContainerInfo("docker", ID)),
    "docker-in-docker": (f"/docker/{ID}/docker/{'cd' * 32}", ContainerInfo("docker", "cd" * 32)),
}


@pytest.mark.parametrize(("path", "expected"), list(LAYOUTS.values()), ids=list(LAYOUTS))
def test_layouts(path: str, expected: ContainerInfo) -> None:
    assert parse_path(path) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "garbage",
        "0::",
        "0::/\n",
        f"0::/user.slice/pod{UID}\n",  # not under kubepods
        f"0::/system.slice/docker-{ID[:-1]}.scope\n",  # 63 hex digits
        f"0::/system.slice/docker-{ID.upper()}.scope\n",
        "0::/docker/not-hex-at-all\n",
        f"0::/machine.slice/libpod-conmon-{ID}.scope\n",
        "1:name=systemd:/\x00\n\n::::\n",
    ],
    ids=lambda t: repr(t)[:40],
)
def test_no_container(text: str) -> None:
    assert parse_cgroup(text) is None


def test_line_with_most_information_wins() -> None:
    text = (
        f"2:memory:/kubepods/burstable/pod{UID}\n"
        f"1:name=systemd:/kubepods/burstable/pod{UID}/{ID}\n"
        "0::/system.slice/containerd.service\n"
    )
    found = parse_cgroup(text)
    assert found == ContainerInfo("kubernetes", ID, pod=PodInfo(UID, qos="burstable"))
