"""What makes the CPU wait for the GPU, told from real traces: the step
account's blocking copies and the ops its other synchronizing calls ran in
agree with the raw events read directly (each call's copy on the GPU, the
innermost op open on its thread), and ``sync.host_sync`` gives the fix of
what the job's synchronizations came from."""

from __future__ import annotations

import gzip
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gputui.cli import main
from gputui.trace.scan import SYNC_CALLS
from gputui.trace.trace_metrics import compute
from gputui.tracefile.reader import read_trace

DATA = Path(__file__).resolve().parents[1] / "data"
DLRM1 = DATA / "thirdparty" / "param-dlrm-8xv100-rank1.trace.json.gz"
SWITCH = DATA / "thirdparty" / "switchtransformers-a100-moe.trace.json.gz"
HOST_SYNC = DATA / "traces" / "host_sync.pt.trace.json.gz"
LIGHTNING = DATA / "h100x2-nccl" / "lightning-rank0.pt.trace.json.gz"
CPU_RANDN = DATA / "h100-cases" / "cpu_randn.pt.trace.json.gz"


def from_raw_events(path: Path) -> tuple[int, Counter[str]]:
    """:func:`raw_sources` without the time."""
    steps, tally, _waits = raw_sources(path)
    return steps, tally


def raw_sources(path: Path) -> tuple[int, Counter[str], Counter[str]]:
    """(steps, per source: calls in the steps, and their time in us, each call
    to whole microseconds as the trace's reader has it), read from the JSON alone: the
    host's ProfilerStep ranges (the whole trace without any); a runtime call
    whose copy on the GPU is from or to pageable memory is a blocking copy
    (``h2d``, ``d2h``), any other synchronizing call is given to the innermost
    ``cpu_op`` open on its thread ("" for none)."""
    with gzip.open(path, "rt") as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    steps = sorted(
        {
            (e["ts"], e["ts"] + e["dur"])
            for e in events
            if e["name"].startswith("ProfilerStep#")
            and e.get("cat") in ("cpu_op", "user_annotation")
        }
    )
    if not steps:
        steps = [(min(e["ts"] for e in events), max(e["ts"] + e.get("dur", 0) for e in events) + 1)]
    pageable = {
        e["args"]["correlation"]: "h2d" if "HtoD" in e["name"] else "d2h"
        for e in events
        if e.get("cat") == "gpu_memcpy" and "Pageable" in e["name"]
    }
    ops = [
        e for e in events if e.get("cat") == "cpu_op" and not e["name"].startswith("ProfilerStep#")
    ]
    tally: Counter[str] = Counter()
    waits: Counter[str] = Counter()
    for call in events:
        if call.get("cat") not in ("cuda_runtime", "cuda_driver"):
            continue
        inside = sum(lo <= call["ts"] < hi for lo, hi in steps)
        if not inside:
            continue
        way = pageable.get((call.get("args") or {}).get("correlation"))
        us = inside * (math.floor(call["ts"] + call["dur"]) - math.ceil(call["ts"]))
        if way is not None:
            tally[way] += inside
            waits[way] += us
        elif call["name"] in SYNC_CALLS:
            end = call["ts"] + call.get("dur", 0)
            around = [
                o
                for o in ops
                if o["tid"] == call["tid"] and o["ts"] <= call["ts"] and o["ts"] + o["dur"] >= end
            ]
            innermost = max(around, key=lambda o: (o["ts"], -o["dur"]), default=None)
            tally["" if innermost is None else innermost["name"]] += inside
            waits["" if innermost is None else innermost["name"]] += us
    return len(steps), tally, waits


@pytest.mark.parametrize(
    "path", [DLRM1, SWITCH, HOST_SYNC, LIGHTNING, CPU_RANDN], ids=lambda p: p.name.split(".")[0]
)
def test_the_account_tells_the_synchronizations_as_the_raw_events_do(path: Path) -> None:
    steps, want, waits = raw_sources(path)
    acct = compute(read_trace(path).timeline).account
    assert acct is not None and acct.steps == steps
    assert acct.blocking_h2d_per_step == round(want.pop("h2d", 0) / steps, 3)
    assert acct.blocking_d2h_per_step == round(want.pop("d2h", 0) / steps, 3)
    assert acct.sync_ops_per_step == {op: round(n / steps, 3) for op, n in want.most_common()}
    # and the time the CPU spent in them, which orders the sources
    assert acct.blocking_h2d_us_per_step == round(waits.pop("h2d", 0) / steps, 3)
    assert acct.blocking_d2h_us_per_step == round(waits.pop("d2h", 0) / steps, 3)
    assert acct.sync_ops_us_per_step == {op: round(waits[op] / steps, 3) for op in want}
    blocking = acct.blocking_h2d_per_step + acct.blocking_d2h_per_step
    assert acct.sync_calls_per_step == pytest.approx(blocking + sum(want.values()) / steps)


@pytest.mark.parametrize(
    "path", [DLRM1, SWITCH, HOST_SYNC, LIGHTNING, CPU_RANDN], ids=lambda p: p.name.split(".")[0]
)
def test_calls_without_ids_go_to_the_op_open_around_them(path: Path) -> None:
    """A hook's capture links no call to its op: the same traces with every id
    taken out give the same ops, each call's innermost op on its thread."""
    tl = read_trace(path).timeline
    tl.runtime[:] = [c._replace(external_id=-1) for c in tl.runtime]
    tl.ranges[:] = [r._replace(external_id=-1) for r in tl.ranges]
    tl.gpu[:] = [a._replace(external_id=-1) for a in tl.gpu]
    steps, want = from_raw_events(path)
    acct = compute(tl).account
    assert acct is not None and acct.steps == steps
    want.pop("h2d", None)
    want.pop("d2h", None)
    assert acct.sync_ops_per_step == {op: round(n / steps, 3) for op, n in want.most_common()}


def host_sync(capsys: pytest.CaptureFixture[str], path: Path) -> dict[str, Any]:
    assert main(["analyze", "--json", str(path)]) == 0
    (rank,) = json.loads(capsys.readouterr().out)["ranks"]
    (finding,) = [f for f in rank["findings"] if f["rule"] == "sync.host_sync"]
    return finding  # type: ignore[no-any-return]


def test_blocking_copies_to_the_gpu_are_told_to_pin_not_to_drop_item(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A DLRM rank (public trace) synchronizes in its batch's copies to the GPU
    from pageable memory (aten::to), never in .item()."""
    finding = host_sync(capsys, DLRM1)
    assert (
        "from 8 copies to the GPU from pageable memory (5.4ms a step), 2 copies to pageable "
        "host memory (2.2ms a step)" in (finding["evidence"])
    )
    # each copy is two of the 20 synchronizing calls: the copy, then its stream's
    # synchronization in the same aten::copy_ (as the raw events pair them)
    assert finding["evidence"].startswith("20 synchronizations per step")
    assert "then synchronizes its stream: two calls each" in finding["evidence"]
    assert finding["fix"].startswith("pin the host side: DataLoader(pin_memory=True)")
    assert ".cpu(), .numpy() or .tolist()" in finding["fix"]
    assert ".item()" not in finding["fix"]


def test_copies_without_their_own_stream_sync_are_not_said_to_have_one() -> None:
    """The pairing is read from the account: a copy counts two calls only where
    the copy ops hold as many stream synchronizations."""
    from gputui.analysis.rules.capture import copy_stream_syncs

    class Account:
        def __init__(self, by_op: dict[str, float]) -> None:
            self.sync_ops_per_step = by_op

    class View:
        steps = 1

        def __init__(self, by_op: dict[str, float]) -> None:
            self.account = Account(by_op)

    assert copy_stream_syncs(View({"aten::copy_": 10.0}), 10.0) == 10.0  # type: ignore[arg-type]
    assert copy_stream_syncs(View({"aten::copy_": 3.0}), 10.0) == 3.0  # type: ignore[arg-type]
    read_backs = {"aten::_local_scalar_dense": 8.0}
    assert copy_stream_syncs(View(read_backs), 2.0) == 0.0  # type: ignore[arg-type]


def test_read_backs_are_told_to_stay_on_the_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    """The SwitchTransformers trace (public) waits in `if tensor:`
    (aten::is_nonzero > aten::item > aten::_local_scalar_dense), and once in a
    cudaDeviceSynchronize outside any op: the read-backs are named as the
    truth of a tensor, with the fix for it."""
    finding = host_sync(capsys, SWITCH)
    assert (
        "from 20 read-backs of a GPU value, 20 of them `if`/`while` on a tensor "
        "(aten::is_nonzero) (376ms a step), 1 synchronization outside any torch op (157ms a "
        "step)" in (finding["evidence"])
    )
    assert finding["fix"].startswith("a Python `if` or `while` on a GPU tensor")
    # the one device-wide synchronization waits 30% of the time: its fix is given too
    assert "a synchronization outside torch's ops is the job's own" in finding["fix"]
    assert "pin_memory" not in finding["fix"]


def test_data_dependent_shapes_are_named_beside_the_read_backs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    finding = host_sync(capsys, HOST_SYNC)
    assert (
        "13 read-backs of a GPU value (.item()) (536.7us a step), 1 op whose output size depends "
        "on the data (5.0us a step)" in (finding["evidence"])
    )
    assert "keep values on the GPU" in finding["fix"]
    # the data-dependent shape waits 1% of the time: it is named, its fix is not given
    assert "fixed-shape forms" not in finding["fix"]


def test_an_older_hooks_capture_is_told_from_its_tables(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A recording of an H100 job whose hook predates the account's sources
    (no blocking copies or ops in its account): the capture's op and copy
    tables tell them, the stream synchronizations beyond the copies given to
    the data-dependent shapes, then to the read-backs."""
    path = DATA / "h100" / "host_sync.jsonl.gz"
    assert main(["attach", "--replay", str(path), "--once", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "sync_ops_per_step" not in json.dumps(doc["capture"])
    (finding,) = [f for f in doc["findings"] if f["rule"] == "sync.host_sync"]
    assert (
        "from 13 read-backs of a GPU value (.item()), 1 op whose output size"
        in (finding["evidence"])
    )
    assert finding["fix"].startswith("each .item()")


@pytest.mark.parametrize(
    ("name", "h2d", "ops", "said"),
    [
        (
            "sync_item_in_forward_wide",
            0.0,
            {"aten::_local_scalar_dense": 8.0},
            "8 synchronizations per step, from 8 read-backs of a GPU value (.item())",
        ),
        ("sync_cpu_randn", 2.0, {"aten::copy_": 2.0}, None),
    ],
)
def test_a_live_capture_on_an_h100_names_the_ops_its_syncs_ran_in(
    capsys: pytest.CaptureFixture[str],
    name: str,
    h2d: float,
    ops: dict[str, float],
    said: str | None,
) -> None:
    """Jobs of bench/jobs/analyzer_cases.py hooked on an H100 (torch 2.11): the
    hook's own capture, whose calls carry no op ids, gives each synchronizing
    call the op open around it (.item() in the forward; a tensor made on the
    CPU and copied to the GPU from pageable memory every step)."""
    path = DATA / "h100-cases" / "live" / f"{name}.jsonl.gz"
    assert main(["attach", "--replay", str(path), "--once", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    acct = doc["capture"]["trace_metrics"]["account"]
    assert acct["blocking_h2d_per_step"] == h2d
    assert acct["sync_ops_per_step"] == ops
    if said is not None:
        (finding,) = [f for f in doc["findings"] if f["rule"] == "sync.host_sync"]
        assert finding["evidence"].startswith(said)
        assert finding["fix"].startswith("each .item()")


def _copies(t: Any, d2h_wait_us: float) -> None:
    """Three steps of 9 quick copies to the GPU from pageable memory, then 6
    copies back to pageable memory, each waiting ``d2h_wait_us`` for a kernel
    (HTA's negative-queue trace: 0.3 ms in 45 copies up, 758 ms in 30 down)."""
    from tests.helpers.tracegen import GEMM

    at = 0.0
    for k in range(3):
        t0 = at
        at += 10.0
        for _ in range(9):
            t.op("aten::copy_", at, 30.0)
            t.launch(
                at + 2.0,
                10.0,
                "Memcpy HtoD (Pageable -> Device)",
                at + 5.0,
                5.0,
                cat="gpu_memcpy",
                call="cudaMemcpyAsync",
            )
            t.call("cudaStreamSynchronize", at + 14.0, 10.0)
            at += 40.0
        for _ in range(6):
            t.launch(at, 5.0, GEMM, at + 10.0, d2h_wait_us)
            t.op("aten::copy_", at + 20.0, d2h_wait_us + 30.0)
            t.launch(
                at + 22.0,
                d2h_wait_us,
                "Memcpy DtoH (Device -> Pageable)",
                at + 12.0 + d2h_wait_us,
                5.0,
                cat="gpu_memcpy",
                call="cudaMemcpyAsync",
            )
            t.call("cudaStreamSynchronize", at + 25.0 + d2h_wait_us, 5.0)
            at += d2h_wait_us + 60.0
        t.step(k + 1, t0, at - t0)
        at += 10.0


@pytest.mark.parametrize("d2h_wait_us", [5_000.0, 2.0], ids=["slow-back", "all-quick"])
def test_the_source_that_waits_longest_leads_not_the_most_frequent(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, d2h_wait_us: float
) -> None:
    """Nine copies to the GPU that cost nothing, six read-backs that wait 5 ms
    each: the read-backs' fix comes first and pinning is not advised (it was,
    by the count).  The control: where the read-backs are quick too, the count
    orders them and pinning leads."""
    from tests.helpers.tracegen import TraceBuilder

    t = TraceBuilder()
    _copies(t, d2h_wait_us)
    finding = host_sync(capsys, t.write(tmp_path / "copies.pt.trace.json"))
    if d2h_wait_us > 100:
        assert "from 6 copies to pageable host memory (" in finding["evidence"]
        assert finding["fix"].startswith("each .cpu(), .numpy() or .tolist()")
        assert "pin_memory" not in finding["fix"]
    else:
        assert "from 9 copies to the GPU from pageable memory (" in finding["evidence"]
        assert finding["fix"].startswith("pin the host side")


@pytest.mark.parametrize(
    ("region", "said"),
    [
        ("Torch-Compiled Region: 0/0", "3 synchronizations inside torch.compile's code"),
        ("aten::my_op", "3 in aten::my_op"),
    ],
    ids=["compiled", "control"],
)
def test_syncs_inside_torch_compiles_code_are_named_as_its(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, region: str, said: str
) -> None:
    """xDiT's capture traces (TraceLens): device-wide synchronizations inside a
    Torch-Compiled Region, Inductor's own while it records CUDA graphs, were an
    unknown op's and got the generic read-back advice.  The control: the same
    calls inside another op."""
    from tests.helpers.tracegen import GEMM, TraceBuilder

    t = TraceBuilder()
    for k in range(3):
        t0 = k * 10_000.0
        t.step(k + 1, t0, 9_000.0)
        t.op(region, t0 + 100.0, 8_000.0)
        for j in range(3):
            at = t0 + 200.0 + 2_500.0 * j
            t.launch(at, 10.0, GEMM, at + 20.0, 1_500.0)
            t.call("cudaDeviceSynchronize", at + 30.0, 1_500.0)
    finding = host_sync(capsys, t.write(tmp_path / "region.pt.trace.json"))
    assert f"from {said} (" in finding["evidence"]
    compiled = finding["fix"].startswith("a synchronization inside torch.compile's code")
    assert compiled is (region != "aten::my_op")
