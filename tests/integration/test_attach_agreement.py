"""Every section of ``attach --once`` measures the same quantity the same way:
the step statistics, the step's time account and the analyzer's ledger all read
the job's ordinary steps (warm-up, profiled and compiling steps left out), so
the step's length and the data wait print the same number everywhere, on every
recording kept (tests/data, tests/samples) and on the embedded demos."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputui import cli

REPO = Path(__file__).resolve().parents[2]
RECORDINGS = sorted(
    p
    for p in [
        *(REPO / "tests" / "data").rglob("*.jsonl.gz"),
        *(REPO / "tests" / "samples").glob("attach-*.jsonl.gz"),
    ]
    if "monitor" not in p.name
)


def report(capsys: pytest.CaptureFixture[str], *args: str) -> dict:  # type: ignore[type-arg]
    assert cli.main(["attach", *args, "--once", "--json"]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def share(stats: dict, name: str) -> float:  # type: ignore[type-arg]
    return next((p["share"] for p in stats["phases"] if p["name"] == name), 0.0)


@pytest.mark.parametrize(
    "args",
    [["--replay", str(p)] for p in RECORDINGS] + [["--demo"]],
    ids=[p.name for p in RECORDINGS] + ["demo"],
)
def test_the_sections_print_one_step_and_one_data_wait(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    doc = report(capsys, *args)
    stats, acct = doc["stats"], doc["live_account"]
    if not stats["count"]:
        assert acct is None
        return
    assert acct["steps"] == stats["count"]
    assert acct["step_s"] == pytest.approx(stats["wall"]["mean"], rel=1e-9)
    data = next((b["share"] for b in acct["buckets"] if b["bucket"] == "data"), 0.0)
    assert data == pytest.approx(share(stats, "data"), abs=1e-9)
    # a finding's ms are of the same mean step
    for f in doc["findings"]:
        if f["impact_pct"] is not None and f["impact_ms"] is not None:
            expected = f["impact_pct"] / 100 * stats["wall"]["mean"] * 1000
            assert f["impact_ms"] == pytest.approx(expected, rel=0.02, abs=0.02), f["rule"]
