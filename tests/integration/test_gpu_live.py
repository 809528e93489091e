"""The real collector on a real GPU, checked against nvidia-smi.

Marked ``gpu``: skipped (by conftest) where NVML or a GPU is missing.  A child
process allocates 1 GiB on GPU 0 with torch and waits; the collector must see
it with the memory nvidia-smi reports.
"""

from __future__ import annotations

import select
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from gputui.nvml.collector import NvmlCollector
from tests.helpers.deadlines import RUN_S, WAIT_S

pytestmark = pytest.mark.gpu

MIB = 1024 * 1024

_CHILD = """
import sys, torch
if not torch.cuda.is_available():
    print("no-cuda", flush=True)
    sys.exit(0)
block = torch.empty(1 << 30, dtype=torch.uint8, device="cuda:0")
block.fill_(1)
torch.cuda.synchronize()
print("ready", flush=True)
sys.stdin.read()  # hold the memory until the test closes our stdin
"""


def _nvidia_smi(*args: str) -> list[list[str]]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        pytest.skip("nvidia-smi is not on PATH")
    out = subprocess.run(
        [smi, *args, "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=RUN_S,
        check=True,
    ).stdout
    return [[cell.strip() for cell in line.split(",")] for line in out.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def cuda_child() -> Iterator[subprocess.Popen[str]]:
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdin is not None
    ready, _, _ = select.select([child.stdout], [], [], 180)
    line = child.stdout.readline().strip() if ready else ""
    if line != "ready":
        child.kill()
        child.wait()
        pytest.skip(f"the torch CUDA child did not start ({line or 'timeout'})")
    yield child
    child.stdin.close()
    try:
        child.wait(timeout=RUN_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


@pytest.fixture
def collector() -> Iterator[NvmlCollector]:
    with NvmlCollector() as live:
        yield live


@pytest.mark.slow
def test_process_memory_matches_nvidia_smi(
    collector: NvmlCollector, cuda_child: subprocess.Popen[str]
) -> None:
    deadline = time.monotonic() + WAIT_S
    while True:
        sample = collector.sample()
        ours: dict[int, int] = {}
        for process in sample.processes:
            if process.type in ("compute", "compute+graphics"):
                ours[process.pid] = ours.get(process.pid, 0) + (process.gpu_mem_bytes or 0) // MIB
        theirs: dict[int, int] = {}
        for pid_text, used in _nvidia_smi("--query-compute-apps=pid,used_memory"):
            if used.isdigit():
                theirs[int(pid_text)] = theirs.get(int(pid_text), 0) + int(used)
        if cuda_child.pid in theirs or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert sample.error is None
    assert set(theirs) <= set(ours)
    for pid, mib in theirs.items():
        assert abs(ours[pid] - mib) <= 1, (pid, ours[pid], mib)
    if cuda_child.pid not in theirs:
        pytest.skip("GPU processes are not visible in this PID namespace")
    assert theirs[cuda_child.pid] >= 1024
    child = next(p for p in sample.processes if p.pid == cuda_child.pid)
    assert child.gpu_index == 0 and child.gpu_uuid == sample.devices[0].uuid


def test_devices_match_nvidia_smi(collector: NvmlCollector) -> None:
    sample = collector.sample()
    rows = _nvidia_smi("--query-gpu=index,uuid,name,driver_version,memory.total")
    assert len(sample.devices) == len(rows)
    for device, (index, uuid, name, driver, mem_total_mib) in zip(
        sample.devices, rows, strict=True
    ):
        assert (device.index, device.uuid, device.name) == (int(index), uuid, name)
        assert sample.driver_version == driver
        assert device.mem_total_bytes is not None
        assert abs(device.mem_total_bytes // MIB - int(mem_total_mib)) <= 1
        assert device.lost is False
        assert device.power_w is not None and device.power_w > 0
        assert device.temp_gpu_c is not None
        assert device.clock_sm_max_mhz and device.pcie_gen_max
        assert device.throttle_reasons is not None
    assert sample.cuda_driver_version and sample.nvml_version


def test_hopper_has_gpm_and_rates(collector: NvmlCollector) -> None:
    import pynvml  # type: ignore[import-untyped]

    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    if pynvml.nvmlDeviceGetCudaComputeCapability(handle) < (9, 0):
        pytest.skip("GPU 0 is older than Hopper")
    collector.sample()
    time.sleep(0.3)
    device = collector.sample().devices[0]
    assert device.gpm_supported is True
    assert device.gpm is not None
    assert device.gpm.sm_activity_pct is not None
    assert device.gpm.dram_bw_util_pct is not None
    assert device.gpm.tensor_activity_pct is not None
    assert device.pcie_tx_bytes_per_s is not None
    assert device.pcie_rx_bytes_per_s is not None


def test_steady_state_is_cheap_and_clean(collector: NvmlCollector) -> None:
    collector.sample()
    times = []
    for _ in range(50):
        start = time.perf_counter()
        sample = collector.sample()
        times.append(time.perf_counter() - start)
        assert sample.error is None
    # a sanity bound, far above the target; the bench measures the real number
    assert sorted(times)[len(times) // 2] < 0.05
