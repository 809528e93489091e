"""``gputui analyze`` on the traces of one job's ranks runs the rank rules across
them: the seven two-H100 DDP jobs of tests/data/h100x2-nccl, each rank's trace
of one synchronized capture, name the straggler and poor overlap as the live
rank view did, and stay quiet on the healthy ones."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gputui.cli import main

NCCL = Path(__file__).resolve().parents[1] / "data" / "h100x2-nccl"


def analyze(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["analyze", *args, "--json"]) == 0
    doc: dict = json.loads(capsys.readouterr().out)
    return doc


def pair(case: str) -> list[str]:
    return [str(NCCL / f"{case}-rank{r}.pt.trace.json.gz") for r in (0, 1)]


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("healthy", []),
        ("slow", [("ranks.straggler", "rank 1")]),
        ("overlap", []),
        ("nooverlap", [("ranks.poor_overlap", "rank 0")]),
        ("bigslow", [("ranks.straggler", "rank 1")]),
        ("lightning", [("ranks.straggler", "rank 1")]),
        ("demo", [("ranks.straggler", "rank 1")]),
    ],
)
def test_the_rank_rules_across_the_traces_of_a_job(
    capsys: pytest.CaptureFixture[str], case: str, expected: list[tuple[str, str]]
) -> None:
    doc = analyze(capsys, *pair(case))
    assert doc["version"] >= 4
    assert [(f["rule"], f["scope"]) for f in doc["across_ranks"]] == expected
    for f in doc["across_ranks"]:
        if f["rule"] == "ranks.straggler":
            # rank 1's data loading was made 20 ms slower a step
            assert "rank 1's data takes" in f["evidence"] and "data loading" in f["fix"]


def test_the_text_report_puts_them_first(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", *pair("bigslow")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Job: rank 1 is the straggler")
    assert "\n\nFindings across ranks (1)\nCRIT  rank 1 is the straggler" in out
    assert out.index("── rank 0/2") < out.index("── rank 1/2")


def test_traces_that_are_not_one_jobs_ranks_get_none(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # one rank alone
    assert analyze(capsys, pair("bigslow")[1])["across_ranks"] == []
    # the same rank twice (two captures of one process)
    doc = analyze(capsys, pair("bigslow")[0], pair("demo")[0])
    assert doc["across_ranks"] == []
    # a single-GPU trace beside a rank: no distributedInfo to say it is a rank
    other = NCCL.parent / "traces" / "dataloader.pt.trace.json.gz"
    copy = tmp_path / "x.pt.trace.json.gz"
    shutil.copy(other, copy)
    assert analyze(capsys, pair("bigslow")[1], str(copy))["across_ranks"] == []


def test_a_job_of_several_ranks_gets_one_diagnosis(capsys: pytest.CaptureFixture[str]) -> None:
    """The two ranks of the straggler job: rank 1 waits for its data, rank 0 waits
    for rank 1 in NCCL.  One diagnosis leads the report: the straggler and why it
    is slow, in the text and in --json."""
    pair = [str(NCCL / f"bigslow-rank{r}.pt.trace.json.gz") for r in (0, 1)]
    assert main(["analyze", *pair, "--json"]) == 0
    diagnosis = json.loads(capsys.readouterr().out)["diagnosis"]
    assert diagnosis["straggler"] == 1 and diagnosis["cause"] == "data.loader_wait"
    assert diagnosis["ranks"] == [0]
    assert main(["analyze", *pair]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("Job: rank 1 is the straggler") and "data loading" in first


def test_one_rank_has_no_job_diagnosis(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(NCCL / "bigslow-rank0.pt.trace.json.gz"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["diagnosis"] is None
