"""Real traces of jobs that run CUDA graphs, and of one fp32 MLP with TF32 off and
on, recorded on an H100 by bench/jobs/analyzer_cases.py (torch 2.11): the
analyzer tells graph replays apart from eager launches, advises no graphs to a
job that replays them, and reads the MFU against the peak its GEMM kernels ran
at."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from gputui.analysis import engine
from gputui.analysis.trace_evidence import trace_evidence
from gputui.analysis.trace_summary import warnings
from gputui.cli import main
from gputui.commands.analyze_load import load

CASES = Path(__file__).resolve().parents[1] / "data" / "h100-cases"


def _summary(case: str):  # type: ignore[no-untyped-def]
    (summary,) = load([str(CASES / f"{case}.pt.trace.json.gz")], jobs=1)
    return summary


@pytest.mark.parametrize("case", ["inference_graphed", "inference_reduce_overhead"])
def test_an_inference_step_replayed_as_a_graph_is_not_launch_bound(case: str) -> None:
    """The eager encoder (tests/data/h200-cases/inference) is launch-bound: 90
    launch calls a step.  Captured into a CUDA graph, by hand or by
    mode="reduce-overhead", its step is a few calls and its GPU is busy: what
    leads is its fp32 matrix products."""
    summary = _summary(case)
    assert summary.metrics.markers is not None and summary.metrics.markers.cuda_graphs
    account = summary.metrics.account
    assert account is not None and account.launch_calls_per_step <= 5
    found = engine.analyze(trace_evidence(summary))
    rules = [f.rule for f in found if f.severity in ("warn", "crit")]
    assert "launch.overhead" not in rules and rules[0] == "precision.fp32_matmul"


@pytest.mark.parametrize("case", ["train_graphed", "train_reduce_overhead"])
def test_a_graphed_training_step_is_told_what_runs_outside_its_graphs(case: str) -> None:
    """Forward and backward replayed as graphs, the optimizer eager: still
    launch-bound at this size, and told that the step already runs CUDA graphs
    (what is left is issued outside them), never to capture one."""
    summary = _summary(case)
    assert summary.metrics.markers is not None and summary.metrics.markers.cuda_graphs
    found = engine.analyze(trace_evidence(summary))
    (launch,) = [f for f in found if f.rule == "launch.overhead"]
    assert launch.fix.startswith("the step already runs CUDA graphs")
    assert "capture the step in a CUDA graph" not in launch.fix
    assert "mode='reduce-overhead'" not in launch.fix
    # the foreach AdamW left eager: the fused one is named
    assert "the optimizer (multi-tensor) runs outside them" in launch.fix
    assert "torch.optim.AdamW(..., fused=True)" in launch.fix


def test_a_trace_with_the_graphs_capture_says_how_long_it_took_and_leaves_it_out() -> None:
    """The reduce-overhead training step profiled from its second call
    (``train_reduce_overhead_capture``, H100, torch 2.11): Inductor captures its
    two graphs inside the window, then replays them.  The captures'
    launches fill the graphs and run nothing: their time is named, and taken
    out of the idle time the launch finding claims, as compiling is."""
    summary = _summary("train_reduce_overhead_capture")
    sanity = summary.sanity
    assert sanity.graph_captures == 2 and 0 < sanity.graph_capture_us < 2_000
    assert not sanity.records_graphs  # most launches ran a kernel: the replays
    assert any("inside CUDA graph captures" in w for w in warnings(summary))
    markers = summary.metrics.markers
    assert markers is not None and markers.cuda_graphs and markers.optimizer_class == "AdamW"
    ev = trace_evidence(summary)
    assert ev.capture_share == pytest.approx(sanity.graph_capture_us / 17_824, rel=0.01)
    (launch,) = [f for f in engine.analyze(ev) if f.rule == "launch.overhead"]
    whole = engine.analyze(dataclasses.replace(ev, capture_share=0.0))
    (before,) = [f for f in whole if f.rule == "launch.overhead"]
    assert launch.impact_pct is not None and before.impact_pct is not None
    assert launch.impact_pct == pytest.approx(before.impact_pct - ev.capture_share * 100, abs=0.2)


def test_the_mfu_peak_follows_the_gemm_kernels_tf32_or_not(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Four 4096-wide fp32 layers at batch 2048, the same FLOPs per step: with
    TF32 off cuBLAS runs SIMT/f32 xmma kernels, measured against the H100's FP32
    peak (67 TFLOP/s, 74% here); with it on, its f32f32_tf32f32 kernels, against
    the TF32 peak (494.5)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # no measured ceilings
    util = {}
    for case in ("fp32_mlp_shapes", "tf32_mlp_shapes"):
        assert main(["analyze", str(CASES / f"{case}.pt.trace.json.gz"), "--json"]) == 0
        (rank,) = json.loads(capsys.readouterr().out)["ranks"]
        util[case] = rank["utilisation"]
    fp32, tf32 = util["fp32_mlp_shapes"], util["tf32_mlp_shapes"]
    assert (fp32["peak"], fp32["peak_tflops"]) == ("fp32", 67.0)
    assert (tf32["peak"], tf32["peak_tflops"]) == ("tf32", 494.5)
    assert fp32["model_flops_per_step"] == tf32["model_flops_per_step"]
    assert fp32["achieved_tflops"] < 67.0 < tf32["achieved_tflops"]
