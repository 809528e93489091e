"""A real Prometheus (Debian's ``prometheus`` package) scraping real exporters.

One Prometheus on loopback scrapes, every second: an exporter playing the demo
recording as ``node-a``, one replaying a synthetic 4-GPU recording as ``node-b``,
and a live exporter on this driverless machine (``node-c``: GPU series off) that
follows a hooked CPU training job whose data loading dominates its steps.  The
tests then check PromQL results, every query of the Grafana dashboard, and
``gputui cluster --once --json`` against what the exporters serve.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from gputui.snapshot.model import SlurmJob, Snapshot, XidCount, XidEvent
from tests.helpers.deadlines import RUN_S
from tests.helpers.hookutil import isolated_dirs, make_env, start_job, wait_for
from tests.helpers.promutil import (
    REPO,
    exporters,
    http_get,
    prometheus,
    prometheus_binary,
    query,
    wait_for_series,
)
from tests.helpers.synthetic import make_snapshots, write_recording

pytestmark = [
    pytest.mark.skipif(
        prometheus_binary() is None,
        reason="the prometheus binary is not installed "
        "(apt-get install prometheus; .ci/run does it)",
    ),
    pytest.mark.slow,
]

DASHBOARD = REPO / "docs" / "grafana-dashboard.json"


class Lab:
    def __init__(self, url: str, targets: list[str], job: Any, env: dict[str, str]) -> None:
        self.url = url
        self.targets = targets
        self.job = job
        self.env = env

    def served(self, index: int) -> str:
        body = http_get(f"http://{self.targets[index]}/metrics")
        assert body is not None
        return body.decode()


#: node-b's GPU 0 is shared by two Slurm jobs: its gauges have a series per job
SHARED_JOBS = (SlurmJob(101, "0", name="a"), SlurmJob(102, "batch", name="b"))


#: node-b's GPU 1 reported Xid 79 twice; its others are watched and have none
XID_79 = XidEvent(79, 1.7e9, None, None, "GPU has fallen off the bus.", "kernel log")


def _with_jobs(snapshots: list[Snapshot]) -> list[Snapshot]:
    out = []
    for snap in snapshots:
        on_gpu0 = [i for i, p in enumerate(snap.processes) if p.gpu_index == 0]
        processes = list(snap.processes)
        for i, job in zip(on_gpu0, SHARED_JOBS, strict=False):
            processes[i] = dataclasses.replace(processes[i], slurm=job)
        devices = [dataclasses.replace(d, xid_sources=("nvml",)) for d in snap.devices]
        devices[1] = dataclasses.replace(
            devices[1], xid_errors=(XID_79, XID_79), xid_counts=(XidCount(79, 2),)
        )
        out.append(dataclasses.replace(snap, processes=tuple(processes), devices=tuple(devices)))
    return out


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    tmp = tmp_path_factory.mktemp("prom")
    snapshots = _with_jobs(make_snapshots(n_gpus=4, n_procs=8, n_steps=60))
    recording = write_recording(tmp / "b.jsonl.gz", snapshots)
    with isolated_dirs() as (sock_dir, cache_dir):
        env = make_env(sock_dir, cache_dir)
        job = start_job(env, tmp, ["--steps", "0", "--data-sleep", "0.03"], via_run=True)
        try:
            specs = [
                ("node-a", ["--demo"]),
                ("node-b", ["--replay", str(recording)]),
                ("node-c", []),
            ]
            with exporters(specs, env=env) as targets, prometheus(targets, tmp) as url:
                yield Lab(url, targets, job, env)
        finally:
            job.stop()


def value_of(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name}{labels} not served")


def test_promql_sees_every_exporter_with_its_hostname(lab: Lab) -> None:
    info = wait_for_series(lab.url, "gputui_gpu_info", 5)
    hosts = sorted((s["metric"]["hostname"], s["metric"]["gpu"]) for s in info)
    assert hosts == [
        ("node-a", "0"),
        ("node-b", "0"),
        ("node-b", "1"),
        ("node-b", "2"),
        ("node-b", "3"),
    ]
    # a value that does not change: what Prometheus holds is what the exporter serves
    (total,) = query(lab.url, 'gputui_gpu_memory_total_bytes{hostname="node-b",gpu="3"}')
    served = value_of(lab.served(1), "gputui_gpu_memory_total_bytes", gpu="3")
    assert float(total["value"][1]) == served
    # the power-capped GPU accumulates clock-event seconds, and rate() reads them
    capped = wait_for_series(
        lab.url,
        "rate(gputui_gpu_clock_event_seconds_total"
        '{hostname="node-b",reason="sw_power_cap"}[10s]) > 0.5',
        1,
    )
    assert {s["metric"]["gpu"] for s in capped} >= {"0"}
    # the driverless node says so in its health series
    (enabled,) = query(
        lab.url, 'gputui_exporter_collector_enabled{hostname="node-c",collector="gpu"}'
    )
    assert enabled["value"][1] == "0"


def test_a_gpu_shared_by_two_slurm_jobs_has_a_series_per_job(lab: Lab) -> None:
    util = wait_for_series(
        lab.url, 'gputui_gpu_utilization_ratio{hostname="node-b",gpu="0",hpc_job!=""}', 2
    )
    assert sorted(s["metric"]["hpc_job"] for s in util) == ["101", "102"]
    # a GPU without a job: one series, no label; its identity: one series a GPU
    (other,) = query(lab.url, 'gputui_gpu_utilization_ratio{hostname="node-b",gpu="1"}')
    assert "hpc_job" not in other["metric"]
    lost = query(lab.url, 'gputui_gpu_lost{hostname="node-b",gpu="0"}')
    assert len(lost) == 1 and "hpc_job" not in lost[0]["metric"]


def test_hooked_cpu_job_data_phase_dominates(lab: Lab) -> None:
    wait_for_series(lab.url, 'gputui_train_info{hostname="node-c"}', 1)
    shares = wait_for_series(
        lab.url,
        'rate(gputui_train_phase_seconds_total{hostname="node-c"}[20s]) '
        "/ ignoring(phase) group_left "
        'sum without (phase) (rate(gputui_train_phase_seconds_total{hostname="node-c"}[20s]))',
        3,
    )
    by_phase = {s["metric"]["phase"]: float(s["value"][1]) for s in shares}
    assert by_phase["data"] > 0.5, by_phase
    assert by_phase["data"] == max(by_phase.values())
    (info,) = query(lab.url, 'gputui_train_info{hostname="node-c"}')
    assert info["metric"]["pid"] == str(lab.job.pid)
    assert info["metric"]["job_id"] == f"node-c/{lab.job.pid}"


def _dashboard_exprs() -> list[tuple[str, str]]:
    doc = json.loads(DASHBOARD.read_text())
    out = []
    for panel in doc["panels"]:
        for target in panel.get("targets", []):
            out.append((panel["title"], target["expr"]))
    return out


def test_every_dashboard_query_runs(lab: Lab) -> None:
    wait_for_series(lab.url, "rate(gputui_train_steps_total[10s]) > 0", 1)
    exprs = _dashboard_exprs()
    assert len(exprs) >= 12
    empty = []
    for title, expr in exprs:
        promql = expr.replace("$hostname", ".*").replace("$namespace", ".*")
        promql = promql.replace("$__rate_interval", "10s")
        assert "$" not in promql, title
        if not query(lab.url, promql):  # status "success" is checked by query()
            empty.append(title)
    # CPU jobs have no CUDA memory, nobody asked for a capture with FLOPs, and no
    # process here runs in a container: only the device-memory, MFU and pods'
    # panels may be empty here
    assert set(empty) <= {
        "Device memory held by tensors",
        "Allocator retries and OOMs",
        "GPU memory by pod (per-process series, --processes)",
        "Model FLOP utilisation (MFU)",
        "Model FLOPs per second",
    }, empty


def test_cluster_once_json_matches_the_exporters(lab: Lab) -> None:
    wait_for_series(lab.url, "rate(gputui_train_steps_total[1m]) > 0", 1)
    # the history's grid ends on a multiple of its 10 s step: wait for samples that old
    wait_for_series(lab.url, "gputui_gpu_info offset 10s", 5)
    proc = subprocess.run(
        [sys.executable, "-m", "gputui", "cluster", "--prometheus", lab.url, "--once", "--json"],
        cwd=str(REPO),
        env=lab.env,
        capture_output=True,
        text=True,
        timeout=RUN_S,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    nodes = {n["hostname"]: n for n in doc["nodes"]}
    assert set(nodes) == {"node-a", "node-b", "node-c"}
    assert all(n["up"] for n in nodes.values())
    assert [len(nodes[h]["gpus"]) for h in ("node-a", "node-b", "node-c")] == [1, 4, 0]
    b3 = next(g for g in nodes["node-b"]["gpus"] if g["gpu"] == "3")
    assert b3["mem_total_bytes"] == value_of(
        lab.served(1), "gputui_gpu_memory_total_bytes", gpu="3"
    )
    assert b3["model"] == "NVIDIA A100-SXM4-40GB" and b3["source"] == "gputui"
    # node-b's GPU 1 reported Xid 79 twice: its last Xid and count, the node's GPUs with one
    xids = {g["gpu"]: (g["xid_last"], g["xid_count"]) for g in nodes["node-b"]["gpus"]}
    assert xids == {"0": (0, 0), "1": (79, 2), "2": (0, 0), "3": (0, 0)}
    assert nodes["node-b"]["xid_gpus"] == 1 and nodes["node-a"]["xid_gpus"] == 0
    assert any(v is not None for v in nodes["node-b"]["gpus"][0]["util_history"])
    (job,) = doc["jobs"]
    (rank,) = job["ranks"]
    assert rank["hostname"] == "node-c" and rank["pid"] == str(lab.job.pid)
    assert rank["phase_share"]["data"] == max(rank["phase_share"].values())
    # and the text report, with a selector that matches one node
    text = subprocess.run(
        [
            sys.executable,
            "-m",
            "gputui",
            "cluster",
            "--prometheus",
            lab.url,
            "--once",
            "--selector",
            'hostname="node-b"',
        ],
        cwd=str(REPO),
        env=lab.env,
        capture_output=True,
        text=True,
        timeout=RUN_S,
    )
    assert text.returncode == 0, text.stderr
    assert re.search(r"^node-b\s+up\s+4\s", text.stdout, re.M), text.stdout
    assert "node-a" not in text.stdout


def test_cluster_once_no_series_for_a_selector(lab: Lab) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gputui",
            "cluster",
            "--prometheus",
            lab.url,
            "--once",
            "--selector",
            'hostname="nope"',
        ],
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=RUN_S,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "holds no gputui or dcgm-exporter series" in proc.stderr


def test_job_series_vanish_when_the_job_exits(lab: Lab) -> None:
    # runs last in this module: it stops the job
    assert f'pid="{lab.job.pid}"' in lab.served(2)
    lab.job.stop()
    wait_for(lambda: f'pid="{lab.job.pid}"' not in lab.served(2), what="the job's series to go")
    assert "gputui_train_info" not in lab.served(2)
