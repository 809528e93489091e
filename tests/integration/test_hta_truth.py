"""gputui's trace metrics against Holistic Trace Analysis 0.5.0, the reference,
on real traces recorded on an H100 (tests/data/traces) and on synthetic ones.

Agreement within 0.5 percentage point for the temporal breakdown, the idle
breakdown (shares of idle time) and the communication/computation overlap;
the launch statistics within 1% of HTA's counts.  Where HTA fails on a valid
trace, gputui must still read it.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gputui.protocol.trace_metrics import TraceMetrics
from gputui.trace.trace_metrics import compute
from gputui.tracefile.reader import read_trace
from tests.helpers.tracegen import GEMM, TraceBuilder, reference_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
#: recorded on an H100: the planted scenarios, and the analyzer's cases (numpy on the
#: training thread, attention by hand and on SDPA's math backend, Lightning, torch.compile)
REAL = sorted(
    [
        *DATA.glob("*.pt.trace.json.gz"),
        *(DATA.parent / "h100-cases").glob("*.gz"),
        *(DATA.parent / "h100x2-nccl").glob("*.gz"),  # DDP over NCCL on two H100s
    ]
)
TOLERANCE_PP = 0.5


@pytest.fixture(autouse=True)
def quiet_hta() -> Iterator[None]:
    """HTA logs a warning per parsing stage and pandas warns about its idioms."""
    logging.disable(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    logging.disable(logging.NOTSET)


def hta(path: Path) -> dict[str, Any]:
    """HTA's numbers for one trace (with its defaults: the last step left out)."""
    from hta.trace_analysis import TraceAnalysis

    analysis = TraceAnalysis(trace_files={0: str(path)}, trace_dir=str(path.parent))
    out: dict[str, Any] = {}
    try:
        row = analysis.get_temporal_breakdown(visualize=False).iloc[0]
        out["temporal"] = (
            float(row["idle_time_pctg"]),
            float(row["compute_time_pctg"]),
            float(row["non_compute_time_pctg"]),
        )
    except AssertionError:
        out["temporal"] = "assertion"
    idle, _ = analysis.get_idle_time_breakdown(visualize=False)
    by_cat = idle.groupby("idle_category")["idle_time"].sum()
    total = float(by_cat.sum())
    out["idle"] = tuple(
        100.0 * float(by_cat.get(c, 0.0)) / total if total else None
        for c in ("host_wait", "kernel_wait", "other")
    )
    overlap = float(
        analysis.get_comm_comp_overlap(visualize=False).iloc[0]["comp_comm_overlap_pctg"]
    )
    out["overlap"] = None if overlap != overlap else overlap  # NaN: no communication
    out["launches"] = len(analysis.get_cuda_kernel_launch_stats(visualize=False)[0])
    return out


def ours(path: Path) -> TraceMetrics:
    return compute(read_trace(path).timeline)


def close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= TOLERANCE_PP


def check(path: Path) -> None:
    ref = hta(path)
    m = ours(path)
    t = m.temporal
    assert t is not None
    got = (t.idle_pct, t.compute_pct, t.non_compute_pct)
    want = ref["temporal"]
    # where HTA's temporal breakdown asserts on a valid trace (a short memset
    # its rounding gives a negative length), the rest is still compared
    if want != "assertion":
        assert all(close(a, b) for a, b in zip(got, want, strict=True)), (got, want)
    ib = m.idle_breakdown
    assert ib is not None
    got = (ib.host_wait_pct, ib.kernel_wait_pct, ib.other_pct)
    assert all(close(a, b) for a, b in zip(got, ref["idle"], strict=True)), (got, ref["idle"])
    assert close(m.comm_compute_overlap_pct, ref["overlap"]), (m.comm_compute_overlap_pct, ref)
    assert m.launch is not None
    assert abs(m.launch.launches - ref["launches"]) <= 0.01 * ref["launches"]


def test_the_real_traces_are_here() -> None:
    assert len(REAL) >= 10
    assert sum(p.stat().st_size for p in REAL) < 11 << 19  # the repository stays small


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name.removesuffix(".pt.trace.json.gz"))
def test_agrees_with_hta_on_real_traces(path: Path) -> None:
    check(path)


def test_agrees_with_hta_on_overlapping_communication(tmp_path: Path) -> None:
    path = reference_trace().write(tmp_path / "comm.pt.trace.json.gz")
    assert hta(path)["overlap"] == 75.0
    check(path)


def test_reads_the_trace_hta_asserts_on(tmp_path: Path) -> None:
    """A 0.5 µs memset alone between two kernels, as torch writes them: HTA's
    rounding gives it a negative length and its temporal breakdown asserts."""
    t = TraceBuilder()
    for n in (1, 2, 3):
        t.step(n, 4590436926000.0 + (n - 1) * 100.0, 100.0)
    base = 4590436926000.0
    t.launch(base + 10.0, 5.0, GEMM, base + 20.0, 30.0)
    t.launch(
        base + 15.0,
        2.0,
        "Memset (Device)",
        base + 60.1,
        0.5,
        cat="gpu_memset",
        call="cudaMemsetAsync",
    )
    t.launch(base + 17.0, 5.0, GEMM, base + 70.0, 30.0)
    path = t.write(tmp_path / "memset.pt.trace.json.gz")
    assert hta(path)["temporal"] == "assertion"
    m = ours(path)
    assert m.temporal is not None
    assert (m.temporal.idle_pct, m.temporal.compute_pct, m.temporal.non_compute_pct) == (
        25.0,
        75.0,
        0.0,
    )
