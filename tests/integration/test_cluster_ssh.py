"""``gputui cluster --ssh`` against real sshd servers on loopback.

One sshd per kind of node (``tests/helpers/sshlab.py``): three aliases of one
server whose ``gputui`` serves the demo recording, a node whose sshd is killed
while it is read, a node without gputui but with a fake ``nvidia-smi``, a node
whose ``gputui`` prints a greeting instead of the protocol, and an alias of a
port where nothing listens.  Skipped, saying why, where sshd is not installed
(``apt-get install openssh-server``; .ci/run installs it where it can).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gputui.cluster.ssh import MODE_SMI, SshOptions
from gputui.cluster.ssh_source import SshClusterSource
from gputui.cluster.view import ClusterSnapshot, Node
from tests.helpers.deadlines import RUN_S, START_S, WAIT_S
from tests.helpers.sshlab import SshLab, free_port, missing

pytestmark = pytest.mark.skipif(missing() is not None, reason=str(missing()))

DEMO_NODES = ("node-a", "node-b", "node-c")
ALL = (*DEMO_NODES, "doomed", "smi-only", "junk", "nobody")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshLab]:
    lab = SshLab(tmp_path_factory.mktemp("sshlab"))
    try:
        lab.start_sshd("demo", [lab.gputui_demo("demo")])
        lab.start_sshd("doomed", [lab.gputui_demo("doomed")])
        lab.start_sshd("smi", [lab.fake_smi("smi")])
        lab.start_sshd("junk", [lab.gputui_garbage("junk")])
        lab.start_sshd("live", [lab.gputui_demo("live", demo=False)])
        for alias in DEMO_NODES:
            lab.alias(alias, "demo")
        lab.alias("doomed", "doomed")
        lab.alias("smi-only", "smi")
        lab.alias("junk", "junk")
        lab.alias("this-machine", "live")
        lab.aliases["nobody"] = free_port()  # nothing listens there
        lab.client_config()
        yield lab
    finally:
        lab.close()


def wait_until(
    source: SshClusterSource, ok: Callable[[ClusterSnapshot], bool], timeout_s: float
) -> ClusterSnapshot:
    deadline = time.monotonic() + timeout_s
    while True:
        snapshot = source.fetch()
        if ok(snapshot) or time.monotonic() > deadline:
            return snapshot
        time.sleep(0.1)


def node(snapshot: ClusterSnapshot, host: str) -> Node:
    return next(n for n in snapshot.nodes if n.hostname == host)


def states(snapshot: ClusterSnapshot) -> dict[str, str | None]:
    return {n.hostname: n.state for n in snapshot.nodes}


def run_once(lab: SshLab, *extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]), COLUMNS="120")
    config = str(lab.root / "ssh_config")
    return subprocess.run(
        [sys.executable, "-m", "gputui", "cluster", "--ssh-config", config, "--once", *extra],
        capture_output=True,
        text=True,
        timeout=RUN_S,
        env=env,
    )


def test_once_prints_every_node_and_one_line_per_failed_host(lab: SshLab) -> None:
    done = run_once(lab, "--ssh", "node-a", "smi-only", "junk", "nobody")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    # the demo node with its GPU and its processes, the nvidia-smi node marked
    assert "node-a: up (gputui serve)" in out and "H100 80GB HBM3" in out
    assert "python3 bench/jobs/train_transform" in out
    assert "smi-only: up (nvidia-smi only)" in out and "Fake GPU" in out
    assert "junk: protocol error" in out and "Welcome to node 7!" in out
    assert "nobody: down" in out and "refused" in out
    failed = done.stderr.splitlines()
    assert len(failed) == 2, failed
    assert failed[0].startswith("gputui cluster: junk: ")
    assert failed[1].startswith("gputui cluster: nobody: ") and "refused" in failed[1]


def test_once_json_and_exit_status_when_no_node_answers(lab: SshLab) -> None:
    done = run_once(lab, "--json", "--ssh", "node-b", "smi-only", "nobody")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["schema"] == 2 and doc["url"] == "ssh"
    nodes = {n["hostname"]: n for n in doc["nodes"]}
    assert nodes["node-b"]["state"] == "up" and nodes["node-b"]["gpu_count"] == 1
    process = nodes["node-b"]["processes"][0]
    assert process["pid"] == 471 and "cmdline" in process  # the snapshot's own fields
    smi = nodes["smi-only"]
    assert smi["source"] == MODE_SMI
    # the fake nvidia-smi's numbers, in the view's units (MiB -> bytes, % -> ratio)
    gpu0 = smi["gpus"][0]
    assert gpu0["mem_used_bytes"] == 1024 * 2**20 and gpu0["util_ratio"] == 0.37
    assert smi["gpus"][1]["power_w"] is None  # [Not Supported]
    assert nodes["nobody"]["up"] is False and "refused" in nodes["nobody"]["note"]

    none = run_once(lab, "--ssh", "nobody", "junk")
    assert none.returncode == 2
    assert none.stderr.splitlines()[-1] == "gputui cluster: no node answered"


def test_a_killed_node_is_marked_down_and_the_others_go_on(lab: SshLab) -> None:
    options = SshOptions(
        interval_s=1.0, connect_timeout_s=10.0, ssh_config=str(lab.root / "ssh_config")
    )
    source = SshClusterSource(ALL, options)
    try:
        live = (*DEMO_NODES, "doomed", "smi-only")
        snapshot = wait_until(
            source,
            lambda s: (
                all(node(s, h).state == "up" for h in live)
                and node(s, "junk").state == "protocol error"
                and node(s, "nobody").state == "down"
            ),
            START_S,
        )
        assert [states(snapshot)[h] for h in live] == ["up"] * len(live), states(snapshot)
        assert node(snapshot, "smi-only").source == MODE_SMI
        assert node(snapshot, "nobody").up is False
        assert lab.serve_pids("doomed")

        lab.kill_server("doomed")
        before = node(snapshot, "node-a").age_s
        after = wait_until(source, lambda s: node(s, "doomed").state == "down", WAIT_S)
        doomed = node(after, "doomed")
        assert doomed.state == "down" and doomed.up is False and doomed.note, states(after)
        # the others keep answering: node-a's data is newer than at the kill
        fresh = wait_until(source, lambda s: (node(s, "node-a").age_s or 99) < 3.0, WAIT_S)
        assert before is not None
        assert all(node(fresh, h).state == "up" for h in (*DEMO_NODES, "smi-only")), states(fresh)
        # retried, and refused: the listener is gone
        refused = wait_until(source, lambda s: "refused" in (node(s, "doomed").note or ""), WAIT_S)
        assert "refused" in (node(refused, "doomed").note or "")
    finally:
        source.close()
    # every remote gputui saw its standard input end and left
    pids = lab.serve_pids("demo")
    assert pids
    deadline = time.monotonic() + WAIT_S
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if _alive(p)]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_a_node_without_a_driver_is_reachable_with_no_gpu_and_why(lab: SshLab) -> None:
    try:
        import pynvml

        pynvml.nvmlInit()
        pytest.skip("this machine has an NVIDIA driver")
    except pytest.skip.Exception:
        raise
    except Exception:
        pass
    done = run_once(lab, "--json", "--ssh", "this-machine")
    assert done.returncode == 0, done.stderr
    (live,) = json.loads(done.stdout)["nodes"]
    assert live["up"] is True and live["state"] == "up" and live["gpu_count"] == 0
    assert live["note"].startswith("no GPU: ") and "NVIDIA" in live["note"]


async def test_screen_shows_nodes_processes_and_reasons(lab: SshLab) -> None:
    from gputui.tui.cluster.keyed_table import KeyedTable
    from gputui.tui.cluster.screen import ClusterScreen, make_cluster_app
    from tests.helpers.synthetic import wait_for

    options = SshOptions(
        interval_s=1.0, connect_timeout_s=10.0, ssh_config=str(lab.root / "ssh_config")
    )
    source = SshClusterSource(("node-c", "junk"), options)
    app: Any = make_cluster_app(source, interval_s=1.0)
    try:
        async with app.run_test(size=(160, 40)) as pilot:
            screen = app.screen
            assert isinstance(screen, ClusterScreen)
            nodes = screen.query_one("#cl-nodes", KeyedTable)
            procs = screen.query_one("#cl-procs", KeyedTable)

            def shown() -> bool:
                rows = [nodes.row_plain(i) for i in range(len(nodes.keys))]
                return (
                    len(rows) == 2
                    and " up " in rows[0]
                    and "ERROR" in rows[1]
                    and len(procs.keys) > 0
                )

            await wait_for(pilot, shown, timeout_s=START_S)
            assert "a line that is not JSON" in nodes.row_plain(1)
            assert "python3" in procs.row_plain(0)
    finally:
        source.close()
