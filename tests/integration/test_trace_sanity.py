"""What a trace says of itself: set-up before the steps and tear-down after them
are reported and kept out of the loop's tables; a trace whose GPU activity was
not recorded, whose clocks disagree, or that has no steps says so; every
launch API counts as a launch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputui.cli import main
from tests.helpers.tracegen import ADD, GEMM, TraceBuilder


def analyze(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[dict, str]:
    assert main(["analyze", str(path), "--json"]) == 0
    (rank,) = json.loads(capsys.readouterr().out)["ranks"]
    assert main(["analyze", str(path)]) == 0
    return rank, " ".join(capsys.readouterr().out.split())


def set_up(t: TraceBuilder) -> float:
    """A second of start-up before any GPU work: the allocator's first calls."""
    t.call("cudaMalloc", 100.0, 20_000.0)
    t.call("cudaFree", 30_000.0, 266_000.0)
    t.call("cudaMalloc", 300_000.0, 10_000.0)
    t.call("cudaFree", 320_000.0, 715_000.0)
    return 1_100_000.0


def loop(t: TraceBuilder, start: float, steps: int = 3, marks: bool = True) -> None:
    """Steps of two ops, each launching a kernel."""
    for k in range(steps):
        t0 = start + k * 1_000.0
        if marks:
            t.step(k + 1, t0, 900.0)
        for j, name in enumerate((GEMM, ADD)):
            at = t0 + 100.0 + 300.0 * j
            t.op("aten::mm" if j == 0 else "aten::add", at, 200.0)
            t.launch(at + 20.0, 10.0, name, at + 40.0, 150.0)


def test_set_up_before_the_steps_is_reported_and_kept_out_of_the_loop(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    t = TraceBuilder()
    loop(t, set_up(t))
    rank, text = analyze(capsys, t.write(tmp_path / "setup.pt.trace.json"))
    # cudaFree and cudaMalloc of the start-up are not the loop's
    assert "memory.malloc_in_loop" not in [f["rule"] for f in rank["findings"]]
    assert not {o["name"] for o in rank["cpu_ops"]} & {"cudaMalloc", "cudaFree"}
    setup = rank["setup"]
    assert setup["us"] >= 1_000_000
    assert [(o["name"], o["calls"], o["self_us"]) for o in setup["ops"]] == [
        ("cudaFree", 2, 981_000),
        ("cudaMalloc", 2, 30_000),
    ]
    assert rank["window"]["kind"] == "profiled steps"
    assert (
        "before it: 1100ms of set-up (cudaFree 981ms in 2 calls; cudaMalloc 30.0ms in 2 calls)"
        in (text)
    )
    assert "Top CPU ops by self time (the 3 profiled steps:" in text
    assert rank["warnings"] == []


def test_a_trace_without_steps_reads_the_span_of_its_gpu_activity_and_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    t = TraceBuilder()
    loop(t, set_up(t), marks=False)
    rank, text = analyze(capsys, t.write(tmp_path / "nosteps.pt.trace.json"))
    assert rank["window"]["kind"] == "GPU activity"
    assert rank["account"]["steps"] == 1
    assert rank["account"]["step_us"] < 3_000  # the loop, not the second of set-up
    assert "memory.malloc_in_loop" not in [f["rule"] for f in rank["findings"]]
    (warning,) = rank["warnings"]
    assert warning.startswith("no ProfilerStep marks: the window is the span of GPU activity")
    assert f"warning: {warning}" in text
    assert "window of every section but HTA's: the span of GPU activity" in text


def test_launches_without_kernel_records_are_gpu_activity_not_recorded(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    t = TraceBuilder()
    for k in range(3):
        t.step(k + 1, k * 1_000.0, 900.0)
        for j in range(4):
            t.call("cudaLaunchKernel", k * 1_000.0 + 100.0 + 100.0 * j, 10.0)
    rank, text = analyze(capsys, t.write(tmp_path / "nokernels.pt.trace.json"))
    (warning,) = rank["warnings"]
    assert warning.startswith("GPU activity not recorded: 12 kernel launch calls and no kernel")
    assert "GPU time: GPU activity not recorded (12 kernel launch calls, no kernel records)" in text
    assert "CPU-only" not in text


def test_a_trace_without_launches_or_kernels_is_a_cpu_only_profile(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    t = TraceBuilder()
    for k in range(3):
        t.step(k + 1, k * 1_000.0, 900.0)
        t.op("aten::mm", k * 1_000.0 + 100.0, 500.0)
    rank, text = analyze(capsys, t.write(tmp_path / "cpu.pt.trace.json"))
    assert rank["warnings"] == []
    assert "a CPU-only profile" in text


def test_kernels_that_start_before_their_launch_are_clock_skew(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    t = TraceBuilder()
    for k in range(3):
        t0 = k * 1_000.0
        t.step(k + 1, t0, 900.0)
        # the GPU's clock runs 50us behind the host's: the kernel "starts" first
        t.launch(t0 + 100.0, 10.0, GEMM, t0 + 60.0 if k else t0 + 130.0, 100.0)
    rank, text = analyze(capsys, t.write(tmp_path / "skew.pt.trace.json"))
    assert rank["sanity"]["kernels_before_launch"] == 2
    assert rank["sanity"]["kernels_launched"] == 3
    (warning,) = rank["warnings"]
    assert warning.startswith("2 of 3 kernels start before their launch call")
    for figure in ("launch delays", "host-wait idle", "split of the GPU's idle time"):
        assert figure in warning
    assert "warning: 2 of 3 kernels start before their launch call" in text


def test_every_launch_api_is_a_launch_but_in_htas_counts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    t = TraceBuilder()
    for k in range(3):
        t0 = k * 1_000.0
        t.step(k + 1, t0, 900.0)
        t.launch(t0 + 100.0, 10.0, GEMM, t0 + 120.0, 100.0)
        # a Triton kernel through the driver's API, running past the step's end
        t.launch(
            t0 + 300.0,
            10.0,
            "triton_poi_fused_add_0",
            t0 + 320.0,
            650.0,
            call="cuLaunchKernel",
            call_cat="cuda_driver",
        )
    rank, text = analyze(capsys, t.write(tmp_path / "driver.pt.trace.json"))
    assert rank["account"]["launch_calls_per_step"] == 2.0
    assert rank["launch"]["launches"] == 2  # HTA's: cudaLaunchKernel, last step left out
    # the step stretches over the GPU work the driver's launch queued
    assert rank["step_breakdown"]["step_us"][-1] == pytest.approx(970.0)
    assert "2 launch calls per step (every launch API" in text
    assert "HTA counts cudaLaunchKernel, cudaLaunchKernelExC, cudaMemcpyAsync and" in text
