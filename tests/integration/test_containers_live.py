"""Real processes: one in a cgroup made to look like a container's, attributed
by the live collector (root with a writable cgroup v2 hierarchy), and one in a
new PID namespace whose host pid is mapped to its pid there (root, unshare(1));
skipped with the reason otherwise."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gputui.host.attribution import ContainerAttributor
from gputui.host.collector import HostCollector
from gputui.host.runtime_api import RuntimeNames
from gputui.nvml.collector import NvmlCollector
from gputui.sources.live import LiveSource
from tests.helpers.cgroups import process_in, writable
from tests.helpers.fake_nvml import FakeNvml, FakeProcess, h100

MOUNT, WHY = writable("cgroup2")
needs_cgroup2 = pytest.mark.skipif(MOUNT is None, reason=WHY)


@needs_cgroup2
def test_a_docker_scope_is_attributed_by_the_live_source() -> None:
    assert MOUNT is not None
    cid = secrets.token_hex(32)
    scope = MOUNT / f"gputui-test-{secrets.token_hex(4)}" / f"docker-{cid}.scope"
    with process_in(MOUNT, scope) as pid:
        assert f"/docker-{cid}.scope" in Path(f"/proc/{pid}/cgroup").read_text()
        # no runtime sockets: the id alone, and why
        attributor = ContainerAttributor(names=RuntimeNames({}))
        source = LiveSource(
            gpu=NvmlCollector(
                FakeNvml([h100(processes=[FakeProcess(pid), FakeProcess(os.getpid())])])
            ),
            host=HostCollector(),
            containers=attributor,
        )
        try:
            snapshot = source.sample()
        finally:
            source.close()
        by_pid = {p.pid: p for p in snapshot.processes}
        placed = by_pid[pid].container
        assert placed is not None
        assert (placed.runtime, placed.id, placed.pod) == ("docker", cid, None)
        assert placed.note is not None and "ids only" in placed.note
        # the control: this test's own process is in no container
        assert by_pid[os.getpid()].container is None


@needs_cgroup2
def test_a_kubepods_path_is_attributed() -> None:
    assert MOUNT is not None
    cid = secrets.token_hex(32)
    uid = "0125ec2f-b64a-4868-8f5b-94b56cbab864"
    pod = f"kubepods-besteffort-pod{uid.replace('-', '_')}.slice"
    path = (
        MOUNT
        / f"gputui-test-{secrets.token_hex(4)}"
        / "kubepods.slice"
        / "kubepods-besteffort.slice"
        / pod
        / f"cri-containerd-{cid}.scope"
    )
    with process_in(MOUNT, path) as pid:
        info = ContainerAttributor(names=RuntimeNames({})).lookup(pid)
        assert info is not None and info.pod is not None
        assert (info.runtime, info.id, info.pod.uid, info.pod.qos) == (
            "containerd",
            cid,
            uid,
            "besteffort",
        )
        # the pod's name is read from the process's own /etc/hostname (here this
        # machine's), unless it is the node's hostname (a pod on the host's network)
        try:
            own = Path(f"/proc/{pid}/root/etc/hostname").read_text().strip() or None
        except OSError:
            own = None
        assert info.pod.name == (None if own == socket.gethostname() else own)


#: run in a new PID (and mount) namespace: a procfs of that namespace beside the
#: host's /proc, as gputui sees them in a container with the host's /proc mounted
IN_NAMESPACE = r"""
import json, os, subprocess, sys, tempfile
sys.path.insert(0, sys.argv[1])
from gputui.host.pid_namespace import PidMapper, ns_pids
from gputui.snapshot.model import ProcessSnapshot

outside = int(sys.argv[2])
here = tempfile.mkdtemp()
subprocess.run(["mount", "-t", "proc", "proc", here], check=True)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
try:
    me = int(os.readlink("/proc/self"))  # this process's pid on the host
    def parent(pid):
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("PPid:"):
                return int(line.split()[1])
    host_pid = next(
        int(d) for d in os.listdir("/proc")
        if d.isdigit() and parent(d) == me and (ns_pids("/proc", d) or [])[1:] == [child.pid]
    )
    proc = lambda pid: ProcessSnapshot(pid=pid, gpu_index=0, gpu_uuid="GPU-0", type="compute")
    mapper = PidMapper(here, "/proc")
    host_view = PidMapper(here, os.path.join(here, "absent"))
    mapped, other = mapper.map([proc(host_pid), proc(outside)])
    (unmapped,) = host_view.map([proc(host_pid)])
    print(json.dumps({
        "mode": mapper.mode, "unmapped_mode": host_view.mode,
        "child": child.pid, "host_pid": host_pid,
        "mapped": [mapped.pid, mapped.host_pid, mapped.pid_is_host],
        "other": [other.pid, other.pid_is_host],
        "unmapped": [unmapped.pid, unmapped.pid_is_host],
    }))
finally:
    child.kill()
    child.wait()
    subprocess.run(["umount", here])
    os.rmdir(here)
"""


def test_host_pids_mapped_from_a_pid_namespace() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (a new PID namespace and a procfs mount)")
    import json
    import shutil

    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare(1) here")
    repo = str(Path(__file__).resolve().parents[2])
    command = [unshare, "-m", "-p", "-f", "--propagation", "private", sys.executable]
    done = subprocess.run(
        [*command, "-c", IN_NAMESPACE, repo, str(os.getpid())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0 and "unshare" in done.stderr and not done.stdout:
        pytest.skip(f"no new PID namespace here: {done.stderr.strip()[:200]}")
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["mode"] == "mapped" and seen["unmapped_mode"] == "unmapped"
    # NVML's (host) pid of the child becomes its pid in the namespace
    assert seen["mapped"] == [seen["child"], seen["host_pid"], False]
    assert seen["child"] != seen["host_pid"]
    # a process outside the namespace stays a host pid; so does every one without the host's /proc
    assert seen["other"] == [os.getpid(), True]
    assert seen["unmapped"] == [seen["host_pid"], True]
