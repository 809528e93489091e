"""The exporter on a real GPU (skipped without one): live NVML series in base units."""

from __future__ import annotations

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
