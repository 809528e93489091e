"""The exporter's collector: families, labels, units, counters, vanishing series,
the HTTP server and the command line (no Prometheus needed here)."""

from __future__ import annotations

import dataclasses
import http.client
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gputui.cli import main
from gputui.client.hook import Disconnected
from gputui.exporter.collector import ExporterCollector, ExporterOptions
from gputui.exporter.exposition import format_value
from gputui.exporter.jobs import JobWatcher, job_id_for, job_id_of
from gputui.exporter.server import make_server
from gputui.protocol.hello import DeviceInfo, Hello
from gputui.protocol.schema import MemoryBatch, MemorySample, StepBatch, StepRecord
from gputui.snapshot.model import ProcessSnapshot, Snapshot
from tests.helpers.deadlines import WAIT_S
from tests.helpers.synthetic import make_snapshots

DCGM_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "hostname"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def parse(body: bytes) -> dict[str, Any]:
    """name -> family, through prometheus_client's own parser (it checks the format)."""
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


def samples(families: dict[str, Any], name: str) -> list[Any]:
    return list(families[name].samples) if name in families else []


def collector_with(
    snapshots: list[Snapshot], clock: Clock | None = None, **options: Any
) -> ExporterCollector:
    clock = clock or Clock()
    collector = ExporterCollector(
        ExporterOptions(hostname="node-7", **options), True, None, clock=clock
    )
    for snapshot in snapshots:
        collector.on_snapshot(snapshot)
        clock.now += 1.0
    return collector


def test_gpu_families_have_dcgm_labels_and_base_units() -> None:
    snaps = make_snapshots(n_gpus=4, n_procs=8, n_steps=3)
    families = parse(collector_with(snaps).render())
    last = snaps[-1]
    util = {s.labels["gpu"]: s for s in samples(families, "gputui_gpu_utilization_ratio")}
    assert set(util) == {"0", "1", "2", "3"}
    for device in last.devices:
        s = util[str(device.index)]
        assert set(s.labels) >= DCGM_LABELS
        assert s.labels["UUID"] == device.uuid
        assert s.labels["device"] == f"nvidia{device.index}"
        assert s.labels["pci_bus_id"] == device.bus_id
        assert s.labels["modelName"] == device.name
        assert s.labels["hostname"] == "node-7"
        assert s.value == pytest.approx(device.util_gpu_pct / 100)
    clocks = {s.labels["gpu"]: s.value for s in samples(families, "gputui_gpu_sm_clock_hertz")}
    assert clocks["0"] == last.devices[0].clock_sm_mhz * 1_000_000
    tensor = {s.labels["gpu"]: s.value for s in samples(families, "gputui_gpu_tensor_active_ratio")}
    assert last.devices[1].gpm is not None
    assert tensor["1"] == pytest.approx(last.devices[1].gpm.tensor_activity_pct / 100)
    assert "3" not in tensor  # the A100-like GPU has no GPM: absent, not zero
    power = {s.labels["gpu"]: s.value for s in samples(families, "gputui_gpu_power_watts")}
    assert power["0"] == pytest.approx(last.devices[0].power_w)
    # counters are typed as such; names end in _total
    assert families["gputui_gpu_ecc_errors"].type == "counter"
    ecc = {
        (s.labels["gpu"], s.labels["type"]): s.value
        for s in samples(families, "gputui_gpu_ecc_errors")
    }
    assert ecc[("1", "corrected")] == 3
    # MIG instances carry dcgm-exporter's MIG labels
    mig = samples(families, "gputui_gpu_mig_memory_used_bytes")
    assert {(s.labels["GPU_I_PROFILE"], s.labels["GPU_I_ID"]) for s in mig} == {
        ("3g.20gb", "1"),
        ("3g.20gb", "2"),
    }
    # no per-process series unless asked for
    assert not any(name.startswith("gputui_process_") for name in families)


def test_no_job_or_instance_label_anywhere() -> None:
    body = collector_with(make_snapshots(n_gpus=2, n_procs=4, n_steps=2), processes=True).render()
    for family in parse(body).values():
        for s in family.samples:
            assert "job" not in s.labels and "instance" not in s.labels, s


def test_clock_event_counters_integrate_seconds_and_only_grow() -> None:
    snaps = make_snapshots(n_gpus=2, n_procs=2, n_steps=8)
    clock = Clock()
    collector = collector_with([], clock)
    seen: list[float] = []
    for snapshot in snaps:
        collector.on_snapshot(snapshot)
        clock.now += 1.0
        families = parse(collector.render())
        by_key = {
            (s.labels["gpu"], s.labels["reason"]): s.value
            for s in samples(families, "gputui_gpu_clock_event_seconds")
        }
        seen.append(by_key[("0", "sw_power_cap")])
        assert by_key[("0", "hw_slowdown")] == 0  # every known reason is there from the start
    # GPU 0 is power capped in every snapshot: one second per snapshot after the first
    assert seen == [float(i) for i in range(len(snaps))]


def test_stale_snapshot_reports_collection_failure() -> None:
    clock = Clock()
    collector = collector_with(make_snapshots(n_gpus=1, n_procs=1, n_steps=1), clock)
    ok = parse(collector.render())["gputui_exporter_collection_success"].samples
    assert [s.value for s in ok if s.labels["collector"] == "gpu"] == [1]
    clock.now += 60
    stale = parse(collector.render())["gputui_exporter_collection_success"].samples
    assert [s.value for s in stale if s.labels["collector"] == "gpu"] == [0]
    collector.on_error(RuntimeError("NVML went away"))
    errors = parse(collector.render())["gputui_exporter_collection_errors"].samples
    assert [s.value for s in errors] == [1]


def test_processes_are_capped_and_a_dead_pid_vanishes() -> None:
    snaps = make_snapshots(n_gpus=2, n_procs=10, n_steps=2)
    collector = collector_with(snaps[:1], processes=True)
    collector._gpu_options = dataclasses.replace(collector._gpu_options, max_processes=4)
    families = parse(collector.render())
    mem = samples(families, "gputui_process_gpu_memory_bytes")
    assert len(mem) == 4
    top = sorted(snaps[0].processes, key=lambda p: -(p.gpu_mem_bytes or 0))[:4]
    assert {s.labels["pid"] for s in mem} == {str(p.pid) for p in top}
    assert samples(families, "gputui_exporter_processes_dropped")[0].value == 6
    assert "command" not in mem[0].labels and "user" not in mem[0].labels
    # the biggest process exits: its series are gone at the next scrape
    gone = top[0].pid
    later = dataclasses.replace(
        snaps[1], processes=tuple(p for p in snaps[1].processes if p.pid != gone)
    )
    collector.on_snapshot(later)
    pids = {
        s.labels["pid"]
        for s in parse(collector.render())["gputui_process_gpu_memory_bytes"].samples
    }
    assert str(gone) not in pids


def test_cmdline_labels_only_when_asked_and_escaped() -> None:
    hostile = ProcessSnapshot(
        pid=77,
        gpu_index=0,
        gpu_uuid="GPU-00000000-0000-4000-8000-synthetic",
        type="compute",
        gpu_mem_bytes=1 << 40,
        user="eve",
        name="python",
        cmdline=("python", 'x"}\nfake_metric 1', "\\"),
    )
    snaps = [dataclasses.replace(s, processes=(hostile,)) for s in make_snapshots(1, 1, 1)]
    body = collector_with(snaps, processes=True, cmdline=True).render()
    assert b"\nfake_metric" not in body
    (proc,) = parse(body)["gputui_process_gpu_memory_bytes"].samples
    assert proc.labels["command"] == 'python x"}\nfake_metric 1 \\'
    assert proc.labels["user"] == "eve"


def test_format_value() -> None:
    assert format_value(3) == "3"
    assert format_value(0.7) == "0.7"
    assert format_value(float("nan")) == "NaN"
    assert format_value(float("inf")) == "+Inf"
    assert format_value(True) == "1"


# -- jobs ---------------------------------------------------------------------------------
def FakeHello(**fields: Any) -> Hello:
    return Hello(pid=fields.pop("pid", 100), argv=("python", "train.py"), **fields)


class FakeClient:
    def __init__(self, pid: int, hello: Hello) -> None:
        self.pid = pid
        self.hello = hello
        self.on_event: Any = None
        self.closed = False
        self.subscribed: tuple[int, bool] | None = None

    def subscribe(self, history: int = 0, memory: bool = True) -> None:
        self.subscribed = (history, memory)

    def start(self, on_event: Any = None) -> None:
        self.on_event = on_event

    def close(self) -> None:
        self.closed = True


def step(i: int, data: float, forward: float, samples: int = 8) -> StepRecord:
    phases = {"data": data, "forward": forward}
    return StepRecord(
        index=i, t=2000.0 + i, wall=sum(phases.values()), phases=phases, samples=samples
    )


@pytest.fixture
def watcher() -> Iterator[tuple[JobWatcher, dict[int, FakeClient], set[int]]]:
    clients: dict[int, FakeClient] = {}
    alive: set[int] = {101, 102}
    hellos = {
        101: FakeHello(
            rank=0, local_rank=0, world_size=2, device=DeviceInfo(index=0, uuid="GPU-aa")
        ),
        102: FakeHello(rank=1, local_rank=1, world_size=2),
    }
    envs = {101: {"TORCHELASTIC_RUN_ID": "run-42"}, 102: {"TORCHELASTIC_RUN_ID": "run-42"}}

    def connect(pid: int, timeout: float) -> FakeClient:
        clients[pid] = FakeClient(pid, hellos[pid])
        return clients[pid]

    w = JobWatcher(
        "node-7",
        connect=connect,
        list_jobs=lambda: {pid: f"/x/{pid}.sock" for pid in alive},
        environ_of=lambda pid: envs.get(pid, {}),
    )
    yield w, clients, alive
    w.stop()


def test_jobs_series_from_hook_events(watcher: Any) -> None:
    w, clients, alive = watcher
    w.scan()
    assert clients[101].subscribed == (0, True)
    clients[101].on_event(StepBatch((step(1, 0.3, 0.1), step(2, 0.5, 0.1)), 0, False))
    clients[102].on_event(StepBatch((step(1, 0.1, 0.2),), 0, False))
    clients[101].on_event(
        MemoryBatch((MemorySample(0.0, 0, 100, 200, 100, 150, 250, alloc_retries=2, ooms=1),))
    )
    collector = ExporterCollector(ExporterOptions(hostname="node-7"), False, w)
    families = parse(collector.render())
    assert not any(name.startswith("gputui_gpu_") for name in families)
    info = {s.labels["rank"]: s.labels for s in families["gputui_train_info"].samples}
    assert info["0"]["job_id"] == info["1"]["job_id"] == "run-42"
    assert info["1"]["world_size"] == "2" and info["1"]["pid"] == "102"
    # the join with the GPU series: the UUID the hook read, empty where not known
    assert (info["0"]["gpu"], info["0"]["UUID"]) == ("0", "GPU-aa")
    assert (info["1"]["gpu"], info["1"]["UUID"]) == ("", "")
    steps = {s.labels["rank"]: s.value for s in families["gputui_train_steps"].samples}
    assert steps == {"0": 2, "1": 1}
    phases = {
        (s.labels["rank"], s.labels["phase"]): s.value
        for s in families["gputui_train_phase_seconds"].samples
    }
    assert phases[("0", "data")] == pytest.approx(0.8)
    assert phases[("0", "forward")] == pytest.approx(0.2)
    summary = {
        (s.name, s.labels.get("quantile")): s.value
        for s in families["gputui_train_step_duration_seconds"].samples
        if s.labels["rank"] == "0"
    }
    assert summary[("gputui_train_step_duration_seconds_count", None)] == 2
    assert summary[("gputui_train_step_duration_seconds_sum", None)] == pytest.approx(1.0)
    assert summary[("gputui_train_step_duration_seconds", "0.5")] == pytest.approx(0.4)
    retries = families["gputui_train_alloc_retries"].samples
    assert [(s.labels["rank"], s.value) for s in retries] == [("0", 2)]
    collection = {
        s.labels["collector"]: s.value
        for s in families["gputui_exporter_collector_enabled"].samples
    }
    assert collection == {"gpu": 0, "jobs": 1}
    # one job exits (its socket is gone): absent from the next scrape
    alive.discard(102)
    w.scan()
    assert clients[102].closed
    ranks = {s.labels["rank"] for s in parse(collector.render())["gputui_train_info"].samples}
    assert ranks == {"0"}
    # the other says goodbye on its connection: gone too
    clients[101].on_event(Disconnected("the job is exiting", clean=True))
    assert "gputui_train_info" not in parse(collector.render())


def test_job_id_sources() -> None:
    assert job_id_for({"TORCHELASTIC_RUN_ID": "abc"}, "n1", 5) == "abc"
    assert (
        job_id_for(
            {"TORCHELASTIC_RUN_ID": "none", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"},
            "n1",
            5,
        )
        == "10.0.0.1:29500"
    )
    assert job_id_for({"MASTER_ADDR": "localhost", "MASTER_PORT": "29500"}, "n1", 5) == "n1:29500"
    assert job_id_for({}, "n1", 5) == "n1/5"


def test_job_id_and_device_come_from_the_typed_hello() -> None:
    """A current hook names its launcher in the hello; the environment is read
    only for hooks that predate those fields."""
    read: list[int] = []

    def env(pid: int) -> dict[str, str]:
        read.append(pid)
        return {"TORCHELASTIC_RUN_ID": "from-env"}

    assert job_id_of(Hello(pid=5, run_id="run-9", master="10.0.0.2:29500"), "n1", 5, env) == "run-9"
    assert job_id_of(Hello(pid=5, master="10.0.0.2:29500"), "n1", 5, env) == "10.0.0.2:29500"
    assert job_id_of(Hello(pid=5, master="127.0.0.1:29500"), "n1", 5, env) == "n1:29500"
    assert job_id_of(Hello(pid=5, master="[::1]:29500"), "n1", 5, env) == "n1:29500"
    assert read == []
    assert job_id_of(Hello(pid=5), "n1", 5, env) == "from-env" and read == [5]
    client = FakeClient(7, Hello(pid=7, device=DeviceInfo(index=3, uuid="GPU-x"), rank=2))
    w = JobWatcher("n1", connect=lambda pid, t: client, list_jobs=lambda: {7: "/x"})
    w.scan()
    (snap,) = w.snapshot()
    assert snap.device_index == 3 and snap.rank == 2 and snap.job_id == "n1/7"
    w.stop()


# -- HTTP and the command line ------------------------------------------------------------
def test_server_answers_metrics_landing_and_404() -> None:
    collector = collector_with(make_snapshots(n_gpus=1, n_procs=1, n_steps=2))
    server = make_server("127.0.0.1", 0, collector.render, "node-7: <test>")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=WAIT_S)
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        body = response.read()
        assert response.status == 200
        assert response.getheader("Content-Type", "").startswith("text/plain; version=0.0.4")
        assert "gputui_gpu_utilization_ratio" in parse(body)
        conn.request("GET", "/")  # the same connection: keep-alive
        response = conn.getresponse()
        page = response.read()
        assert response.status == 200 and b"/metrics" in page and b"&lt;test&gt;" in page
        conn.request("GET", "/nope")
        response = conn.getresponse()
        response.read()
        assert response.status == 404
    finally:
        server.shutdown()
        server.server_close()


def test_cli_bad_port_and_port_in_use(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["exporter", "--port", "70000"]) == 2
    assert "port must be 0-65535" in capsys.readouterr().err
    blocker = make_server("127.0.0.1", 0, lambda: b"", "")
    try:
        port = str(blocker.server_address[1])
        assert main(["exporter", "--demo", "--listen", "127.0.0.1", "--port", port]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("gputui exporter: cannot listen on 127.0.0.1:") and "\n" not in err
    finally:
        blocker.server_close()


def test_server_refuses_what_it_does_not_serve() -> None:
    import socket

    collector = collector_with(make_snapshots(n_gpus=1, n_procs=1, n_steps=1))
    server = make_server("127.0.0.1", 0, collector.render, "x")
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def ask(raw: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=WAIT_S) as s:
            s.sendall(raw)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
            return data

    try:
        assert ask(b"POST /metrics HTTP/1.1\r\nConnection: close\r\n\r\n").startswith(
            b"HTTP/1.1 405"
        )
        assert ask(b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 414")
        assert ask(b"GET /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello").startswith(
            b"HTTP/1.1 400"
        )
        assert ask(b"garbage\r\n\r\n").startswith(b"HTTP/1.1 400")
        head = ask(b"HEAD /metrics HTTP/1.0\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n")
    finally:
        server.shutdown()
        server.server_close()


def test_driverless_node_serves_jobs_and_says_gpu_series_are_off(tmp_path: Any) -> None:
    import os
    import subprocess
    import sys

    from tests.conftest import _gpu_reason
    from tests.helpers.promutil import REPO, free_port, http_get

    if _gpu_reason() is None:
        pytest.skip("this machine has a GPU: the exporter serves it")
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO), GPUTUI_SOCKET_DIR=str(tmp_path / "s"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputui", "exporter", "--listen", "127.0.0.1", "--port", str(port)],
        cwd=str(REPO),
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        second = proc.stderr.readline()
        assert first.startswith("gputui exporter: GPU series are off (") and "training-job" in first
        assert second.startswith(f"gputui exporter: serving http://127.0.0.1:{port}/metrics")
        body = http_get(f"http://127.0.0.1:{port}/metrics")
        assert body is not None
        families = parse(body)
        assert not any(name.startswith("gputui_gpu_") for name in families)
        enabled = {
            s.labels["collector"]: s.value
            for s in families["gputui_exporter_collector_enabled"].samples
        }
        assert enabled == {"gpu": 0, "jobs": 1}
    finally:
        proc.terminate()
        proc.wait(WAIT_S)
        if proc.stderr is not None:
            proc.stderr.close()


def test_mfu_series_from_a_capture_with_flops() -> None:
    """An H100 job's capture with FLOPs (anyone's) gives its FLOP rate and MFU
    over the rate of its unprofiled steps; a GPU the datasheet does not know
    has the rate and no MFU."""
    from gputui.protocol.capture import CaptureOptions, CaptureResult
    from gputui.protocol.messages import StepFlag
    from gputui.protocol.op_rows import FlopTotals

    hellos = {
        101: FakeHello(pid=101, device=DeviceInfo(index=0, name="NVIDIA H100 80GB HBM3")),
        102: FakeHello(pid=102, device=DeviceInfo(index=1, name="NVIDIA GeForce GT 710")),
    }
    clients: dict[int, FakeClient] = {}

    def connect(pid: int, timeout: float) -> FakeClient:
        clients[pid] = FakeClient(pid, hellos[pid])
        return clients[pid]

    w = JobWatcher("n", connect=connect, list_jobs=lambda: {101: "a", 102: "b"})
    w.scan()
    profiled = StepRecord(index=9, t=1.0, wall=5.0, phases={}, flags=int(StepFlag.PROFILED))
    cap = CaptureResult(
        id="c",
        first_step=9,
        last_step=9,
        options=CaptureOptions(shapes=True, flops=True),
        flop_totals=FlopTotals(2e12, 2e12, (("bf16", 2e12),)),
    )
    for pid in (101, 102):
        # four 0.25 s steps: 4 steps/s; the profiled 5 s step is not timed
        steps = (*(step(i, 0.05, 0.2) for i in range(4)), profiled)
        clients[pid].on_event(StepBatch(steps, 0, False))
        clients[pid].on_event(cap)
    families = parse(ExporterCollector(ExporterOptions(hostname="n"), False, w).render())
    rate = [s.value for s in families["gputui_train_flops_per_second"].samples]
    assert rate == [pytest.approx(8e12), pytest.approx(8e12)]
    mfu = families["gputui_train_mfu_ratio"].samples
    assert len(mfu) == 1 and mfu[0].labels["dtype"] == "bf16"
    assert mfu[0].value == pytest.approx(8.0 / 989.5)
    w.stop()
