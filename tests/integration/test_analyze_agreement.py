"""Every section of ``gputui analyze`` that prints the step's length, its data
wait, the GPU's busy share, the launch calls or the synchronizing calls per
step prints the ledger's number (``JobEvidence.ledger``), in the text and in
``--json``: the account, the TensorBoard-style breakdown, the findings.  HTA's
section keeps HTA's definitions; it says it is HTA's, and why its figure is
not the ledger's where it is not.  On every trace kept in tests/data (and any
third-party trace kept beside them)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from gputui import fmt
from gputui.analysis.ledger import Ledger
from gputui.analysis.trace_evidence import trace_evidence
from gputui.analysis.trace_summary import summarize
from gputui.cli import main
from gputui.tracefile.reader import read_trace

DATA = Path(__file__).resolve().parents[1] / "data"
SHARED = DATA.parents[1].parent / "shared" / "thirdparty"
TRACES = sorted(DATA.rglob("*.pt.trace.json.gz")) + sorted(
    p for d in (DATA / "thirdparty", SHARED) if d.is_dir() for p in d.glob("*.json*")
)

# -- what a printed figure is -------------------------------------------------------------
#: a share of the step printed as "73%" or "72.9%": the ledger's share, to the
#: digits printed
SHARE = r"(\d+(?:\.\d+)?)%"
STEP = r"(\d+(?:\.\d+)?(?:ms|s|us))"
COUNT = r"(\d[\d,]*(?:\.\d+)?)"


def same_share(printed: str, share: float | None) -> bool:
    assert share is not None, printed
    digits = len(printed.partition(".")[2])
    return float(printed) == round(100.0 * share, digits)


def same_count(printed: str, count: float | None) -> bool:
    assert count is not None, printed
    return printed == fmt.per_step(count)


def same_step(printed: str, step_s: float | None) -> bool:
    assert step_s is not None, printed
    return printed == fmt.ms(step_s)


#: (what, pattern, check) for each place a section prints one of the figures
CHECKS: list[tuple[str, str, Any]] = [
    # the account
    ("step", rf"Step time account \(\d+ profiled steps?, {STEP} each\)", "step"),
    ("data", rf"\n  data wait +{SHARE}", "data"),
    ("busy", rf"GPU busy {SHARE} of the step", "busy"),
    ("launches", rf"\n  {COUNT} launch calls? per step", "launches"),
    ("syncs", rf"{COUNT} synchronizing\s+calls?\s+per step", "syncs"),
    # the TensorBoard-style breakdown
    ("step", rf"the first of these that ran then\),[^;]*?, {STEP} each", "step"),
    # the findings' heading and evidence
    ("step", rf"Findings \(\d+\), over [^,]+, {STEP} each", "step"),
    ("launches", rf"{COUNT} launch calls? per step, GPU work", "launches"),
    ("syncs", rf"{COUNT} synchronizations per step", "syncs"),
    ("data", rf"waits {SHARE} of the step for the next batch", "data"),
    ("step", rf"for the next batch \([^)]*? of a {STEP} step\)", "step"),
    ("step", rf"of the step \([^)]*? of {STEP}\) is CPU time outside torch", "step"),
    ("busy", rf"busy {SHARE} of the profiled steps", "busy"),
    ("busy", rf"the GPU is busy {SHARE} of the step", "busy"),
]


def ledger_values(ledger: Ledger) -> dict[str, Any]:
    return {
        "step": ledger.step_s,
        "data": ledger.shares.get("data") if ledger.shares else None,
        "busy": ledger.gpu_busy,
        "launches": ledger.launches_per_step,
        "syncs": ledger.syncs_per_step,
    }


def check(text: str, values: dict[str, Any], where: str) -> int:
    """Every figure the text prints equals the ledger's; how many were seen."""
    seen = 0
    flat = re.sub(r"\n\s+", " ", text)  # wrapped lines, joined
    for what, pattern, key in CHECKS:
        for source in (text, flat):
            for m in re.finditer(pattern, source):
                printed = m.group(1).replace(",", "")
                value = values[key]
                ok = (
                    same_step(m.group(1), value)
                    if key == "step"
                    else same_count(m.group(1), value)
                    if key in ("launches", "syncs")
                    else same_share(printed, value)
                )
                assert ok, f"{where}: {what} printed {m.group(0)!r}, the ledger's is {value}"
                seen += 1
    return seen


def run(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["analyze", *args]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name.split(".")[0])
def test_every_section_prints_the_ledgers_figures(
    path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    summary = summarize(read_trace(path).timeline, 0, "order", str(path))
    ledger = trace_evidence(summary).ledger
    values = ledger_values(ledger)

    # the JSON: the ledger itself, and every section's own figures
    (rank,) = json.loads(run(capsys, str(path), "--json"))["ranks"]
    assert rank["ledger"] == ledger.to_json()
    acct, sb = rank["account"], rank["step_breakdown"]
    assert acct["step_us"] / 1e6 == pytest.approx(values["step"], abs=1e-12)
    assert sb["steps_us"] / sb["steps"] / 1e6 == pytest.approx(values["step"], abs=1e-9)
    assert acct["data_us"] / acct["step_us"] == pytest.approx(values["data"], abs=1e-12)
    if values["busy"] is not None:
        assert acct["gpu_busy_us"] / acct["step_us"] == pytest.approx(values["busy"], abs=1e-12)
    assert acct["launch_calls_per_step"] == values["launches"]
    assert acct["sync_calls_per_step"] == values["syncs"]
    evidence = "\n".join(
        f["evidence"] + "".join(f"\n{r['evidence']}" for r in f.get("related", []))
        for f in rank["findings"]
    )
    check(evidence, values, f"{path.name} --json findings")

    # the text
    text = run(capsys, str(path))
    seen = check(text, values, path.name)
    # the account's figures and the breakdown's step at least: no GPU busy line where
    # no GPU time was recorded (a CPU-only trace, or kernels not recorded), no data
    # wait row for a step without one (a profile of a few ops on the CPU)
    expected = 6 - (values["busy"] is None) - (not values["data"])
    assert seen >= expected, text
    # HTA's section keeps its own definitions: it says so, and why it differs
    if "GPU time by Holistic Trace Analysis' definitions" in text:
        assert "HTA's window" in text
        hta = text.split("GPU time by Holistic Trace Analysis' definitions", 1)[1]
        hta = hta.split("\n\n", 1)[0]
        assert "HTA's kernel launches" in hta or "kernel launches" not in hta
        busy = re.search(r"idle (\d+\.\d)%", hta)
        # (beyond the rounding of the figure shown to tenths: 99.5% idle is
        # 0.45-0.55% busy, which the account may round to 0 or 1)
        if (
            busy
            and values["busy"] is not None
            and abs(100.0 - float(busy.group(1)) - 100.0 * values["busy"]) > 1.0
        ):
            assert "are not the account's" in hta, hta
    # the breakdown's figures that are not the ledger's are not called by its names
    flat = re.sub(r"\n\s+", " ", text)
    assert not re.search(r"GPU utilization:? \d", flat)
    assert not re.search(r"\n  DataLoader +\d", text)
