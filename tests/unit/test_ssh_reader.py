"""The SSH source's readers with a stand-in ``ssh`` that runs the command here.

The stand-in records its arguments and runs the remote command with ``sh -c``
under a PATH chosen by host name, so every path of the reader (serve, the
nvidia-smi fallback, a node with neither, garbage, an overlong line, ssh's own
failure and the retries after it) runs without sshd; tests/integration/
test_cluster_ssh.py does the same through a real sshd.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gputui.cluster import ssh, wire
from gputui.cluster.ssh import MODE_SMI, NO_TOOLS, HostError, HostView, SshOptions, check_host
from gputui.cluster.ssh_source import SshClusterSource
from gputui.cluster.ssh_view import build_snapshot
from gputui.reports.cluster import render, to_json
from tests.helpers.deadlines import START_S, WAIT_S

REPO = Path(__file__).resolve().parents[2]
#: a node that does not answer; ssh says so with an escape sequence in its line
GONE = "gone"

FAKE_SSH = """\
import json, os, sys
args = sys.argv[1:]
host, command = args[args.index("--") + 1 :]
with open(os.path.join(ROOT, "calls.jsonl"), "a") as fh:
    fh.write(json.dumps(args) + "\\n")
paths = json.load(open(os.path.join(ROOT, "paths.json")))
if host not in paths:
    sys.stderr.write("ssh: connect to host %s port 22: Connection refused\\x1b[31m\\n" % host)
    sys.exit(255)
os.environ["PATH"] = paths[host] + ":/usr/bin:/bin"
os.execvp("sh", ["sh", "-c", command])
"""


def script(path: Path, text: str) -> None:
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)


@pytest.fixture()
def fake(tmp_path: Path) -> Iterator[Path]:
    ssh_path = tmp_path / "ssh"
    ssh_path.write_text(f"#!{sys.executable}\nROOT = {str(tmp_path)!r}\n" + FAKE_SSH)
    ssh_path.chmod(0o755)
    dirs = {}
    for name in ("demo", "smi", "bare", "old", "junk", "huge", "stall"):
        dirs[name] = tmp_path / name
        dirs[name].mkdir()
    script(
        dirs["demo"] / "gputui",
        f'PYTHONPATH="{REPO}" exec "{sys.executable}" -m gputui "$@" --demo\n',
    )
    script(
        dirs["smi"] / "nvidia-smi",
        "while :; do echo '0, GPU-a, Fake, 50, 1, 10, 20, 30, 40, 50'; sleep 1; done\n",
    )
    script(
        dirs["old"] / "gputui",
        "echo \"gputui: error: argument command: invalid choice: 'serve'\" >&2; exit 2\n",
    )
    script(dirs["old"] / "nvidia-smi", "echo '0, GPU-b, Old, 5, 1, 10, 20, 30, 40, 50'; sleep 60\n")
    # one snapshot, then silence with the connection open
    script(
        dirs["stall"] / "gputui",
        f'PYTHONPATH="{REPO}" "{sys.executable}" -m gputui "$@" --demo | head -n 2; sleep 600\n',
    )
    script(dirs["junk"] / "gputui", "echo 'Last login: never'; sleep 60\n")
    script(dirs["huge"] / "gputui", "head -c 5000 /dev/zero | tr '\\0' x; sleep 60\n")
    (tmp_path / "paths.json").write_text(json.dumps({k: str(v) for k, v in dirs.items()}))
    yield tmp_path


def source_for(fake: Path, hosts: tuple[str, ...], **kw: object) -> SshClusterSource:
    options = SshOptions(
        interval_s=1.0, connect_timeout_s=7.5, ssh=str(fake / "ssh"), ssh_config="cfg", **kw
    )  # type: ignore[arg-type]
    return SshClusterSource(hosts, options)


def wait_views(
    source: SshClusterSource, ok: Callable[[dict[str, HostView]], bool]
) -> dict[str, HostView]:
    deadline = time.monotonic() + START_S
    while True:
        views = {r.host: r.view() for r in source.readers}
        if ok(views) or time.monotonic() > deadline:
            return views
        time.sleep(0.05)


def test_each_kind_of_node(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire, "MAX_LINE_BYTES", 4096)
    hosts = ("demo", "smi", "bare", "old", "junk", "huge", GONE)
    source = source_for(fake, hosts)
    try:
        views = wait_views(
            source,
            lambda v: (
                v["demo"].state == "up"
                and v["smi"].state == "up"
                and v["old"].state == "up"
                and v["bare"].gpu_unavailable is not None
                and v["junk"].state == "protocol error"
                and v["huge"].state == "protocol error"
                and v[GONE].state == "down"
            ),
        )
        assert views["demo"].mode == ssh.MODE_GPUTUI and views["demo"].snapshot is not None
        assert views["demo"].snapshot.devices and views["demo"].remote_host
        assert views["smi"].mode == MODE_SMI and views["old"].mode == MODE_SMI
        assert views["smi"].snapshot is not None
        assert views["smi"].snapshot.devices[0].mem_used_bytes == 10 * 2**20
        assert views["bare"].gpu_unavailable == NO_TOOLS and views["bare"].answered
        assert "Last login" in (views["junk"].reason or "")
        assert "longer than the limit" in (views["huge"].reason or "")
        assert "Connection refused" in (views[GONE].reason or "")
        # what is shown is cleaned; the JSON keeps the exact text
        snapshot = build_snapshot(list(views.values()), time.time())
        text = "\n".join(render(snapshot, 120))
        assert "\x1b" not in text and "Connection refused\\x1b[31m" in text
        doc = to_json(snapshot)
        assert doc["schema"] == 2
        gone = next(n for n in doc["nodes"] if n["hostname"] == GONE)
        assert gone["note"].endswith("Connection refused\x1b[31m")
        # retried after the failure, the delay growing
        calls = wait_views(source, lambda v: _calls(fake, GONE) >= 2)
        assert calls and _calls(fake, GONE) >= 2
    finally:
        source.close()
    args = json.loads((fake / "calls.jsonl").read_text().splitlines()[0])
    assert args[:2] == ["-T", "-o"] and "BatchMode=yes" in args and "ConnectTimeout=8" in args
    assert args[args.index("-F") + 1] == "cfg" and args[-3] == "--"


def _calls(fake: Path, host: str) -> int:
    lines = (fake / "calls.jsonl").read_text().splitlines()
    return sum(1 for line in lines if json.loads(line)[-2] == host)


def test_a_silent_node_is_slow_then_cut_off_and_called_again(fake: Path) -> None:
    source = source_for(fake, ("stall",))
    try:
        views = wait_views(source, lambda v: v["stall"].state == "slow")
        assert views["stall"].state == "slow" and "no data for" in (views["stall"].reason or "")
        views = wait_views(source, lambda v: v["stall"].state == "down")
        assert "cut off" in (views["stall"].reason or "")
        wait_views(source, lambda v: _calls(fake, "stall") >= 2)
        assert _calls(fake, "stall") >= 2
    finally:
        source.close()


def test_the_screen_never_waits_for_a_silent_node(fake: Path) -> None:
    source = source_for(fake, ("demo",), remote_gputui="sleep 600; gputui")
    try:
        start = time.monotonic()
        snapshot = source.fetch()
        assert time.monotonic() - start < WAIT_S  # a copy of the values, no I/O
        assert snapshot.nodes[0].state == "connecting" and snapshot.nodes[0].up is None
    finally:
        source.close()


@pytest.mark.parametrize(
    "host",
    ["-oProxyCommand=touch /tmp/x", "a b", "a\nb", "", "x" * 300],
    ids=["option", "space", "newline", "empty", "long"],
)
def test_hosts_that_could_be_options_are_refused(host: str) -> None:
    with pytest.raises(HostError):
        check_host(host)
    assert check_host("user@gpu-node-1.example") == "user@gpu-node-1.example"


@pytest.mark.parametrize(
    "argv, said",
    [
        (["cluster", "--once"], "say where to read"),
        (["cluster", "--prometheus", "http://p:9090", "--ssh", "a"], "not allowed with"),
        (["cluster", "--prometheus", "http://p:9090", "--hosts-file", "f"], "not both"),
        (["cluster", "--ssh", "a", "--selector", "x=1", "--once"], "read Prometheus"),
        (["cluster", "--ssh", "a", "--json"], "--json needs --once"),
        (["cluster", "--ssh", "a", "--ssh-config", "/nonexistent", "--once"], "no such ssh config"),
        (["cluster", "--hosts-file", "/nonexistent", "--once"], "cannot read /nonexistent"),
        (["cluster", "--ssh", "a", "-oProxyCommand=x", "--once"], "unrecognized"),
    ],
    ids=["nothing", "both", "both-file", "selector", "json", "config", "hosts-file", "option"],
)
def test_cluster_ssh_bad_input_is_one_line_and_exit_2(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from gputui.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1


def test_hosts_file(tmp_path: Path) -> None:
    from gputui.commands.cluster import read_hosts_file
    from gputui.errors import GputuiError

    good = tmp_path / "nodes"
    good.write_text("# the rack\nnode1  # first\n\n  gpu@node2 extra words\n")
    assert read_hosts_file(str(good)) == ["node1", "gpu@node2"]
    bad = tmp_path / "bad"
    bad.write_text("node1\n-oProxyCommand=x\n")
    with pytest.raises(GputuiError, match="line 2"):
        read_hosts_file(str(bad))
    empty = tmp_path / "empty"
    empty.write_text("# nothing\n")
    with pytest.raises(GputuiError, match="names no host"):
        read_hosts_file(str(empty))
