"""The analyzer on real H100 jobs it was not tuned on, each with a planted cause
(bench/jobs/analyzer_cases.py; tests/data/h100-cases): the first warn or crit
finding names the planted cause, the look-alike stays quiet, and the text report
and ``--json`` name the same findings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputui.cli import main
from gputui.protocol.trace_metrics import ACCOUNT_BUCKETS

CASES = Path(__file__).resolve().parents[1] / "data" / "h100-cases"

#: case -> (the first warn/crit rule, rules that must stay quiet or below warn)
PLANTED = {
    "numpy_preproc": ("cpu.python", {"launch.overhead", "launch.idle_gaps"}),
    "numpy_workers": (None, {"cpu.python"}),
    "hand_attention": ("attention.hand_written", {"attention.sdpa_math"}),
    "sdpa_math": (
        "attention.sdpa_math",
        {"attention.hand_written", "precision.fp32_matmul", "kernels.elementwise_bound"},
    ),
    "lightning": (None, set()),
    "compiled": (None, set()),
}


def analyze(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["analyze", *args]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("case", sorted(PLANTED))
def test_the_planted_cause_comes_first(capsys: pytest.CaptureFixture[str], case: str) -> None:
    path = str(CASES / f"{case}.pt.trace.json.gz")
    (rank,) = json.loads(analyze(capsys, "--json", path))["ranks"]
    serious = [f["rule"] for f in rank["findings"] if f["severity"] in ("warn", "crit")]
    first, quiet = PLANTED[case]
    if first is not None:
        assert serious[:1] == [first], serious
    assert not quiet & set(serious), serious
    # the account adds up, every share of a stated whole is at most 100%
    acct = rank["account"]
    total = sum(acct[f"{b}_us"] for b in ACCOUNT_BUCKETS)
    assert total == pytest.approx(acct["step_us"], rel=1e-3)
    assert all(0 <= acct[f"{b}_pct"] <= 100 for b in ACCOUNT_BUCKETS)
    assert all(f["impact_pct"] is None or 0 <= f["impact_pct"] <= 100 for f in rank["findings"])
    # the text report names the same findings, in the same order
    text = analyze(capsys, "--top", "5", path)
    titles = [f["title"] for f in rank["findings"]]
    positions = [text.find(t[:40]) for t in titles]
    assert -1 not in positions and positions == sorted(positions), (titles, positions)


def test_the_numpy_job_names_python_with_its_share(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(CASES / "numpy_preproc.pt.trace.json.gz")
    (rank,) = json.loads(analyze(capsys, "--json", path))["ranks"]
    (f,) = [f for f in rank["findings"] if f["rule"] == "cpu.python"]
    assert f["severity"] == "crit" and f["impact_pct"] > 80
    assert rank["account"]["python_pct"] > 80
    text = analyze(capsys, path)
    assert "Step time account" in text and "Python outside torch" in text
