"""What each collective moves, read from the messages torch's profiler records
in its kernels' arguments, agrees with the raw events; and the communication
advice follows it: kernels that wait more than they move data are told so, an
all-to-all split evenly is not told to balance its tokens."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from gputui.cli import main

NCCL = Path(__file__).resolve().parents[1] / "data" / "h100x2-nccl"
BYTES = {"Float": 4, "BFloat16": 2, "Half": 2, "Long": 8, "Int": 4, "Byte": 1}


def analyze(capsys: pytest.CaptureFixture[str], *paths: Path) -> dict[str, Any]:
    assert main(["analyze", "--json", *map(str, paths)]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def raw_collectives(path: Path, lo: float, hi: float) -> dict[str, dict[str, Any]]:
    """Per collective name, from the JSON alone: the kernels on a stream whose
    arguments name a collective and that start in [lo, hi) µs (whole
    microseconds, the start rounded up as the reader rounds it): calls, bytes
    (each call's larger message), GPU time (ns) and the fastest call's rate."""
    with gzip.open(path) as fh:
        events = json.load(fh)["traceEvents"]
    out: dict[str, dict[str, Any]] = defaultdict(lambda: {"calls": 0, "bytes": 0, "ns": 0})
    best: dict[str, float] = {}
    for e in events:
        args = e.get("args") or {}
        name = args.get("Collective name")
        if e.get("ph") != "X" or not name or args.get("stream", -1) < 0:
            continue
        start = -(-e["ts"] // 1)
        if not lo <= start < hi:
            continue
        size = BYTES[args["dtype"]] * max(args["In msg nelems"], args["Out msg nelems"])
        ns = round(e["dur"] * 1000)
        got = out[name]
        got["calls"] += 1
        got["bytes"] += size
        got["ns"] += ns
        best[name] = max(best.get(name, 0.0), size / ns)
    for name, got in out.items():
        got["best"] = best[name]
    return dict(out)


@pytest.mark.parametrize("name", ["demo-rank0", "demo-rank1", "lightning-rank0", "slow-rank0"])
def test_each_collective_moves_what_its_kernels_record(
    capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """Two H100s over NCCL (bench/jobs/hf_ddp.py, lightning_ddp.py and the
    planted slow rank): each collective's calls, bytes and time in the window
    are those of the raw events."""
    path = NCCL / f"{name}.pt.trace.json.gz"
    (rank,) = analyze(capsys, path)["ranks"]
    window = rank["window"]
    raw = raw_collectives(path, window["start_us"], window["end_us"])
    got = {c["name"]: c for c in rank["collectives"]}
    assert set(got) == set(raw) and raw
    for coll, want in raw.items():
        c = got[coll]
        assert c["calls"] == c["sized_calls"] == want["calls"]
        assert c["bytes"] == want["bytes"]
        assert c["us"] == pytest.approx(want["ns"] / 1000, abs=1e-3)
        assert c["best_gbps"] == pytest.approx(want["best"], rel=1e-3)
        assert c["group_size"] == 2


def test_kernels_that_wait_for_their_peer_are_told_so(capsys: pytest.CaptureFixture[str]) -> None:
    """The DDP demo's rank 0 (its peer slowed): its all-reduces move 56 MiB at
    102 GB/s in the call that waited least, 15 GB/s on average; the
    communication finding says its kernels wait more than they move data, and
    names the sizes.  Its peer's, which arrive last, move theirs at about their
    fastest rate: no such words."""
    (waiting,) = analyze(capsys, NCCL / "demo-rank0.pt.trace.json.gz")["ranks"]
    (found,) = [f for f in waiting["findings"] if f["rule"] == "comm.share"]
    assert "24 allreduce calls move 56.1MiB each" in found["evidence"]
    assert found["fix"].startswith("the allreduce kernels wait more than they move data")
    (late,) = analyze(capsys, NCCL / "demo-rank1.pt.trace.json.gz")["ranks"]
    (c,) = [c for c in late["collectives"] if c["name"] == "allreduce"]
    assert c["mean_gbps"] > c["best_gbps"] / 3
    assert all("wait more than they move" not in f["fix"] for f in late["findings"])
