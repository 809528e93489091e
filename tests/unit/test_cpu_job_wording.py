"""A job without a GPU is told about its step, not a GPU it does not have: the
data finding says the data holds the step back, and the step's account names
torch's ops as the compute they are there (their cost unchanged)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputui.cli import main
from gputui.protocol.trace_metrics import StepAccount
from gputui.reports import account
from tests.helpers.tracegen import TraceBuilder

LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def cpu_trace(path: Path, *, gpu: bool = False) -> Path:
    """Eight 10 ms steps: 3 ms waiting for the DataLoader, 6 ms in aten::mm (on
    the CPU, or launching a GEMM on the GPU)."""
    t = TraceBuilder()
    if not gpu:
        t.meta["deviceProperties"] = []
    for n in range(1, 9):
        start = (n - 1) * 10_000.0
        t.step(n, start, 10_000.0)
        t.op(LOADER, start + 10, 3000.0, cat="user_annotation")
        t.op("aten::mm", start + 3100, 6000.0)
        if gpu:
            t.launch(start + 3200, 20.0, "ampere_sgemm_128x64_tn", start + 3300, 500.0)
    return t.write(path)


def test_a_cpu_jobs_trace_is_told_about_its_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["analyze", str(cpu_trace(tmp_path / "cpu.pt.trace.json.gz"))]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "data loading holds the step back" in out
    assert (
        "the data phase falls under 5% of the step on the attach screen and the step time falls"
        in out
    )
    assert "GPU utilization rises" not in out and "DALI" not in out and "pin_memory" not in out
    assert "torch ops (compute) 60.0% 6.00ms" in out and "torch dispatch" not in out


def test_a_gpu_jobs_trace_keeps_its_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["analyze", str(cpu_trace(tmp_path / "gpu.pt.trace.json.gz", gpu=True))]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "data loading holds the GPU back" in out and "GPU utilization rises" in out
    assert "torch dispatch" in out and "torch ops (compute)" not in out


def test_the_account_names_the_compute_of_a_cpu_job() -> None:
    acct = StepAccount(steps=5, step_us=10_000.0, dispatch_us=9_050.0, python_us=950.0)
    cpu = "\n".join(account.lines(acct, cuda=False))
    gpu = "\n".join(account.lines(acct))
    assert "torch ops (compute)    90.5%" in cpu and "torch dispatch" not in cpu
    assert "torch dispatch         90.5%" in gpu
    # the same numbers: only the name changes
    assert cpu.replace("torch ops (compute)", "torch dispatch     ") == gpu


def test_the_attach_screens_account_names_the_compute_of_a_cpu_job() -> None:
    from gputui.analysis.live_account import LiveAccount
    from gputui.tui.attach.phase_table import account_lines

    live = LiveAccount(
        steps=10,
        step_s=0.01,
        seconds={"dispatch": 0.009, "python": 0.001},
        capture_step=3,
        gpu_busy_share=None,
    )
    cpu = account_lines(live, 100, cuda=False)[1].plain
    gpu = account_lines(live, 100)[1].plain
    assert "compute 90%" in cpu and "dispatch" not in cpu
    assert "dispatch 90%" in gpu


def python_trace(path: Path, *, gpu: bool) -> Path:
    """Eight 10 ms steps, 8 ms of them Python outside torch ops, 1 ms in aten::mm
    (on the CPU, or launching a short GEMM on the GPU)."""
    t = TraceBuilder()
    if not gpu:
        t.meta["deviceProperties"] = []
    for n in range(1, 9):
        start = (n - 1) * 10_000.0
        t.step(n, start, 10_000.0)
        t.op("aten::mm", start + 8500, 1000.0)
        if gpu:
            t.launch(start + 8600, 20.0, "ampere_sgemm_128x64_tn", start + 8700, 300.0)
    return t.write(path)


@pytest.mark.parametrize("gpu", [False, True])
def test_the_python_finding_says_what_rises_for_the_job_it_has(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, gpu: bool
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    path = python_trace(tmp_path / f"py-{gpu}.pt.trace.json.gz", gpu=gpu)
    assert main(["analyze", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "cpu.python" in out
    if gpu:
        assert "the GPU busy share rise" in out
    else:
        assert "GPU busy share" not in out and "the step get shorter" in out


@pytest.mark.parametrize("backward", [False, True], ids=["inference", "training"])
def test_the_python_findings_fix_fits_an_inference_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], backward: bool
) -> None:
    """A job that runs no backward is told how to move host work out of its
    inference loop, not about DataLoader workers for augmentation, logging or
    checkpoints; a training job keeps that advice."""
    t = TraceBuilder()
    for n in range(1, 9):
        start = (n - 1) * 10_000.0
        t.step(n, start, 10_000.0)
        t.op("aten::mm", start + 8000, 1000.0)
        if backward:
            t.op("autograd::engine::evaluate_function: MmBackward0", start + 9100, 500.0)
            t.op("aten::mm", start + 9150, 400.0)
        t.launch(start + 8100, 20.0, "ampere_sgemm_128x64_tn", start + 8200, 300.0)
    path = t.write(tmp_path / "t.pt.trace.json.gz")
    assert main(["analyze", "--json", str(path)]) == 0
    (rank,) = json.loads(capsys.readouterr().out)["ranks"]
    (f,) = [f for f in rank["findings"] if f["rule"] == "cpu.python"]
    if backward:
        assert "out of the training loop" in f["fix"] and "checkpoint" in f["fix"]
    else:
        assert "out of the inference loop" in f["fix"] and "prepare the inputs ahead" in f["fix"]
        for training_advice in ("checkpoint", "augmentation", "training loop"):
            assert training_advice not in f["fix"]


@pytest.mark.parametrize(("busy_us", "pace"), [(9_900.0, True), (9_400.0, False)])
def test_beside_a_gpu_that_sets_the_pace_the_hosts_time_is_no_cost(
    busy_us: float, pace: bool
) -> None:
    """A step whose GPU is busy 99% of it: its host buckets (here Python outside
    torch, 60%) run beside the GPU, and the account says so; at 94% it does not."""
    acct = StepAccount(
        steps=1, step_us=10_000.0, python_us=6_000.0, dispatch_us=4_000.0, gpu_busy_us=busy_us
    )
    text = " ".join(" ".join(account.lines(acct, width=80)).split())
    assert ("the GPU sets the pace, the host's time above runs beside it" in text) is pace
    assert f"GPU busy {busy_us / 100:.0f}% of the step" in text
