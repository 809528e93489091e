"""The exporter on a real GPU (skipped without one): live NVML series in base units."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.deadlines import WAIT_S
from tests.helpers.promutil import REPO, free_port, http_get

pytestmark = pytest.mark.gpu


def test_live_exporter_serves_every_gpu_in_base_units() -> None:
    import pynvml

    pynvml.nvmlInit()
    try:
        count = pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputui", "exporter", "--listen", "127.0.0.1", "--port", str(port)],
        cwd=str(REPO),
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "serving" in line, line
        deadline = time.monotonic() + WAIT_S  # the first sample (GPM needs two readings)
        while True:
            body = http_get(f"http://127.0.0.1:{port}/metrics")
            if body is not None and b"gputui_gpu_sm_clock_hertz" in body:
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert body is not None
        families = {f.name: f for f in text_string_to_metric_families(body.decode())}
        info = families["gputui_gpu_info"].samples
        assert len(info) == count
        for s in families["gputui_gpu_utilization_ratio"].samples:
            assert 0.0 <= s.value <= 1.0
        for s in families["gputui_gpu_sm_clock_hertz"].samples:
            assert s.value >= 1e8  # MHz became hertz
        for s in families["gputui_gpu_memory_total_bytes"].samples:
            assert s.value > 2**30
        assert families["gputui_exporter_collection_success"].samples[0].value == 1
    finally:
        proc.terminate()
        proc.wait(WAIT_S)
        if proc.stderr is not None:
            proc.stderr.close()


def test_each_rank_of_a_ddp_job_joins_its_gpu_by_uuid() -> None:
    """Two ranks on two GPUs: both GPUs' series, both ranks' training series, and
    each rank's UUID label names the GPU NVML runs that rank's process on."""
    torch = pytest.importorskip("torch")
    import pynvml

    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    from tests.helpers.ddp_gpu import ddp_job

    with ddp_job(2, "--data-sleep", "0.002") as job:
        port = free_port()
        env = dict(job.env)
        proc = subprocess.Popen(
            [sys.executable, "-m", "gputui", "exporter", "--listen", "127.0.0.1",
             "--port", str(port)],
            cwd=str(REPO), env=env, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert proc.stderr is not None
            assert "serving" in proc.stderr.readline()
            deadline = time.monotonic() + WAIT_S
            families: dict = {}
            while time.monotonic() < deadline:
                body = http_get(f"http://127.0.0.1:{port}/metrics")
                if body is not None:
                    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
                    steps = families.get("gputui_train_steps")
                    counts = [] if steps is None else [s.value for s in steps.samples]
                    if len(counts) == 2 and min(counts) > 0:
                        break
                time.sleep(0.2)
            gpus = {s.labels["UUID"]: s.labels["gpu"] for s in families["gputui_gpu_info"].samples}
            assert len(gpus) == torch.cuda.device_count()
            util = families["gputui_gpu_utilization_ratio"].samples
            assert {s.labels["UUID"] for s in util} == set(gpus)
            info = {int(s.labels["pid"]): s.labels for s in families["gputui_train_info"].samples}
            assert sorted(info) == sorted(job.ranks)
            assert {s.labels["rank"] for s in families["gputui_train_steps"].samples} == {"0", "1"}
            # the truth: NVML's own list of compute processes per GPU
            pynvml.nvmlInit()
            try:
                on_gpu: dict[str, set[int]] = {}
                for i in range(pynvml.nvmlDeviceGetCount()):
                    handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                    uuid = pynvml.nvmlDeviceGetUUID(handle)
                    uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
                    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
                    on_gpu[uuid] = {p.pid for p in procs}
            finally:
                pynvml.nvmlShutdown()
            uuids = set()
            for pid, labels in info.items():
                assert labels["UUID"] in gpus, labels
                assert pid in on_gpu[labels["UUID"]], (pid, labels["UUID"], on_gpu)
                uuids.add(labels["UUID"])
            assert len(uuids) == 2  # one GPU each
            print(json.dumps({"gpus": gpus, "ranks": {p: dict(v) for p, v in info.items()}}))
        finally:
            proc.terminate()
            proc.wait(WAIT_S)
