"""``gputui bench`` and the roofline rows on a real GPU.

Marked ``gpu``: skipped (by conftest) without NVML and a GPU.  The figures are
checked for sense, not speed: every ceiling measured, TF32 and bf16 beating
plain fp32 (so the precision switch took effect), and the saved results found
again under the UUID NVML reports, the key the monitor will use.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from gputui.ceilings import load_ceilings, measured
from gputui.trace.op_rows import PROFILER, rows_from_chrome_trace, rows_from_kineto

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def _torch() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torch
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    return torch


def _nvml_uuids() -> set[str]:
    import pynvml

    pynvml.nvmlInit()
    try:
        found = set()
        for i in range(pynvml.nvmlDeviceGetCount()):
            uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
            found.add(uuid.decode() if isinstance(uuid, bytes) else str(uuid))
        return found
    finally:
        pynvml.nvmlShutdown()


@pytest.fixture(scope="module")
def quick_bench(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    _torch()
    home = tmp_path_factory.mktemp("cache")
    proc = subprocess.run(
        [sys.executable, "-m", "gputui", "bench", "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "XDG_CACHE_HOME": str(home)},
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), home


def test_every_ceiling_is_measured(quick_bench: tuple[dict[str, Any], Path]) -> None:
    doc, _home = quick_bench
    by = {m["key"]: m for m in doc["measurements"]}
    assert list(by) == list(measured.MEASUREMENTS)
    cc = tuple(int(x) for x in doc["gpu"]["compute_capability"].split("."))
    for key, m in by.items():
        if key == measured.MATMUL_FP8 and cc < (8, 9):
            assert m["error"].startswith("not supported: "), m
            continue
        assert m["error"] is None, m
        assert m["value"] > 0 and m["repetitions"] >= 3, m
    assert by[measured.MATMUL_TF32]["value"] > 2 * by[measured.MATMUL_FP32]["value"]
    assert by[measured.MATMUL_BF16]["value"] > 2 * by[measured.MATMUL_FP32]["value"]
    assert by[measured.HBM_COPY]["value"] > by[measured.H2D_PINNED]["value"]


def test_saved_under_the_uuid_nvml_reports(quick_bench: tuple[dict[str, Any], Path]) -> None:
    doc, home = quick_bench
    uuid = doc["gpu"]["uuid"]
    assert uuid in _nvml_uuids()
    found = load_ceilings(uuid, home / "gputui" / "ceilings")
    assert found is not None
    assert found.bf16_tflops == pytest.approx(doc["ceilings"]["bf16_tflops"])
    assert found.quick is True and found.driver_version


def test_profiled_matmul_rows_from_raw_events_and_trace(tmp_path: Path) -> None:
    torch = _torch()
    n, calls = 2048, 10
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        torch.mm(a, b)
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts, record_shapes=True, with_flops=True) as prof:
        for _ in range(calls):
            torch.mm(a, b)
        torch.cuda.synchronize()
    raw = {r.name: r for r in rows_from_kineto(prof.profiler.kineto_results.events())}
    mm = raw["aten::mm"]
    assert mm.calls == calls and mm.kernels >= calls and mm.device_us > 0
    assert mm.flops == calls * 2 * n**3 and mm.flops_source == PROFILER
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    traced = {r.name: r for r in rows_from_chrome_trace(json.loads(path.read_text()))}
    tmm = traced["aten::mm"]
    assert (tmm.calls, tmm.kernels, tmm.flops) == (mm.calls, mm.kernels, mm.flops)
    assert tmm.device_us == pytest.approx(mm.device_us, rel=1e-3)
