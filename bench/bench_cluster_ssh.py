"""``gputui cluster --ssh`` on 16 nodes: loopback sshd servers, 1 s refreshes.

    .venv/bin/python bench/bench_cluster_ssh.py [--nodes 16] [--seconds 60] [--out FILE]

1. Starts one sshd per node on loopback (``tests/helpers/sshlab.py``: a
   temporary host key, user key and config), each node's ``gputui`` serving the
   embedded demo recording (``gputui serve --stdio --demo``, this tree).
2. Runs ``gputui cluster --ssh n01 ... n16 --interval 1`` in tmux (a real
   terminal, 160x50) and times, from its start, until the screen's status line
   counts every node's GPU (each demo node has one: its data arrived).
3. Over ``--seconds``: the CPU time (/proc, user + system) of the viewer's
   Python process, of its ssh clients, of each node's ``gputui serve`` and of
   each node's sshd session process, as percent of one core.
4. In this process, a ``SshClusterSource`` refreshed every second for
   ``--seconds``: the age of each node's newest data at each refresh (what a
   refresh shows is at most this old), and the time one refresh takes.
5. The control: one ``gputui serve --stdio --demo --interval 1`` on a plain
   pipe, without ssh, over the same seconds.

Needs Debian's openssh-server (/usr/sbin/sshd) and tmux.  Prints a JSON
document, and writes it to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers.sshlab import SshLab, missing  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` (all its threads), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK


def parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None


def children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and parent(int(entry)) == pid:
            out.append(int(entry))
    return out


def pct_over(pids: list[int], seconds: float) -> list[float]:
    """Each pid's CPU over ``seconds`` from now, percent of one core."""
    before = {p: cpu_s(p) for p in pids}
    start = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - start
    out = []
    for p in pids:
        a, b = before[p], cpu_s(p)
        if a is not None and b is not None:
            out.append(100.0 * (b - a) / wall)
    return out


def screen_text(session: str) -> str:
    done = subprocess.run(
        ["tmux", "capture-pane", "-t", session, "-p"], capture_output=True, text=True, check=False
    )
    return done.stdout


def viewer_run(lab: SshLab, hosts: list[str], seconds: float) -> dict[str, object]:
    session = f"gputui-ssh-bench-{os.getpid()}"
    env = f"PYTHONPATH={ROOT}"
    cmd = (
        f"env {env} {sys.executable} -m gputui cluster --interval 1 "
        f"--ssh-config {lab.root / 'ssh_config'} --ssh {' '.join(hosts)}"
    )
    start = time.monotonic()
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "50", cmd], check=True
    )
    try:
        pane = subprocess.run(
            ["tmux", "list-panes", "-t", session, "-F", "#{pane_pid}"],
            capture_output=True,
            text=True,
            check=True,
        )
        viewer = int(pane.stdout.split()[0])
        shown_s = None
        deadline = start + 180.0
        while time.monotonic() < deadline:
            # the status line counts the GPUs of the nodes whose data arrived (one
            # each): the node table itself may be taller than the screen
            if f"{len(hosts)} nodes, {len(hosts)} GPUs" in screen_text(session):
                shown_s = time.monotonic() - start
                break
            time.sleep(0.05)
        time.sleep(3.0)  # past the first seconds of every node
        clients = children(viewer)
        serves = [p for p in lab.serve_pids("node") if cpu_s(p) is not None]
        sessions = [q for q in (parent(p) for p in serves) if q is not None]
        pids = [viewer, *clients, *serves, *sessions]
        values = dict(zip(pids, pct_over(pids, seconds), strict=False))
        return {
            "every_node_shown_after_s": shown_s,
            "viewer_python_pct": values.get(viewer),
            "viewer_ssh_clients_pct_total": sum(values.get(p, 0.0) for p in clients),
            "ssh_clients": len(clients),
            "serve_pct": sorted(values[p] for p in serves if p in values),
            "sshd_session_pct": sorted(values[p] for p in sessions if p in values),
        }
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)


def ages_run(lab: SshLab, hosts: list[str], seconds: float) -> dict[str, object]:
    from gputui.cluster.ssh import SshOptions
    from gputui.cluster.ssh_source import SshClusterSource

    source = SshClusterSource(hosts, SshOptions(ssh_config=str(lab.root / "ssh_config")))
    try:
        source.wait_settled(120.0)
        time.sleep(2.0)
        ages: list[float] = []
        fetch_ms: list[float] = []
        down = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t = time.perf_counter()
            snapshot = source.fetch()
            fetch_ms.append((time.perf_counter() - t) * 1000)
            for n in snapshot.nodes:
                if n.age_s is None:
                    down += 1
                else:
                    ages.append(n.age_s)
            time.sleep(1.0)
        ages.sort()
        return {
            "refreshes": len(fetch_ms),
            "node_data_age_s_p50": statistics.median(ages),
            "node_data_age_s_p99": ages[int(0.99 * (len(ages) - 1))],
            "node_data_age_s_max": ages[-1],
            "nodes_without_data": down,
            "refresh_ms_p50": statistics.median(fetch_ms),
        }
    finally:
        source.close()


def serve_on_a_pipe(seconds: float, *extra: str) -> dict[str, object]:
    """One ``gputui serve --stdio`` without ssh: its CPU, and what it served."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputui", "serve", "--stdio", "--interval", "1", *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        hello = json.loads(proc.stdout.readline())
        first = json.loads(proc.stdout.readline())
        # drained on a thread, as ssh would
        import threading

        threading.Thread(target=proc.stdout.read, daemon=True).start()
        time.sleep(5.0)
        snapshot = first.get("snapshot", {})
        return {
            "args": list(extra),
            "source": hello.get("source", {}).get("label"),
            "gpus": len(snapshot.get("devices", [])),
            "processes": len(snapshot.get("processes", [])),
            "gpu_unavailable": first.get("gpu_unavailable"),
            "serve_pct": pct_over([proc.pid], seconds)[0],
        }
    finally:
        proc.stdin.close()
        proc.wait(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument(
        "--serve-live",
        action="store_true",
        help="only measure 'gputui serve --stdio' of this machine (a GPU node: no sshd needed)",
    )
    args = parser.parse_args()
    if args.serve_live:
        result = {
            "machine": platform.node(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "loadavg_before": os.getloadavg(),
            "serve_live_on_a_pipe": serve_on_a_pipe(args.seconds),
            "loadavg_after": os.getloadavg(),
        }
        return _write(result, args.out)
    why = missing() or (None if shutil.which("tmux") else "tmux is not installed")
    if why:
        print(f"bench_cluster_ssh: {why}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="gputui-ssh-bench-") as tmp:
        lab = SshLab(Path(tmp))
        try:
            hosts = [f"n{i:02d}" for i in range(1, args.nodes + 1)]
            bin_dir = lab.gputui_demo("node")
            for host in hosts:
                lab.start_sshd(host, [bin_dir])
                lab.alias(host, host)
            lab.client_config()
            result = {
                "machine": platform.node(),
                "cpus": os.cpu_count(),
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "loadavg_before": os.getloadavg(),
                "nodes": args.nodes,
                "seconds": args.seconds,
                "viewer": viewer_run(lab, hosts, args.seconds),
                "refreshes": ages_run(lab, hosts, args.seconds),
                "control_serve_demo_on_a_pipe": serve_on_a_pipe(args.seconds, "--demo"),
                "serve_live_on_a_pipe": serve_on_a_pipe(args.seconds),
                "loadavg_after": os.getloadavg(),
            }
        finally:
            lab.close()
    return _write(result, args.out)


def _write(result: dict[str, object], out: str | None) -> int:
    text = json.dumps(result, indent=1)
    print(text)
    if out:
        Path(out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
