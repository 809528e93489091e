"""The rank rules fire on evidence that should fire them and stay quiet
otherwise; the rank summary says who is behind, stuck, gone or elsewhere."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from gputui.analysis import engine
from gputui.analysis.evidence import RankEvidence, RanksEvidence
from gputui.analysis.finding import Finding
from gputui.analysis.registry import REGISTRY
from gputui.protocol.capture import CaptureResult
from gputui.protocol.schema import Hello, Status
from gputui.protocol.trace_metrics import JobMarkers
from gputui.session.rank_view import (
    EXITED,
    RUNNING,
    STALLED,
    STARTING,
    RankInput,
    summarize,
    sync_start,
)
from tests.helpers.evidence import capture, evidence, gpu_samples, kernel, steps

DATA = Path(__file__).resolve().parents[1] / "data"
BASE = {"data": 0.002, "forward": 0.005, "backward": 0.01, "optimizer": 0.002, "other": 0.001}


def rank(r: int, phases: Mapping[str, float], **kw: object) -> RankEvidence:
    job = evidence(steps(phases={**BASE, **phases}), **kw)  # type: ignore[arg-type]
    return RankEvidence(pid=100 + r, job=job, rank=r, local_rank=r, last_step=59)


def ranks(*members: RankEvidence, world: int | None = None) -> RanksEvidence:
    return RanksEvidence(tuple(members), world or len(members))


def straggling() -> RanksEvidence:
    # rank 1 loads its data 20 ms slower; ranks 0 and 2 wait for it in comm
    fast = {"comm": 0.021}
    return ranks(rank(0, fast), rank(1, {"data": 0.022, "comm": 0.001}), rank(2, fast))


def even(comm: float = 0.001) -> RanksEvidence:
    return ranks(*(rank(r, {"comm": comm}) for r in range(3)))


def comm_capture(overlap: float, markers: JobMarkers | None = None) -> CaptureResult:
    """30 ms of all-reduce beside 50 ms of GEMMs it could hide behind."""
    return capture(
        [
            kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "communication", 10, 30_000.0),
            kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", "gemm", 100, 50_000.0),
        ],
        span_us=100_000.0,
        busy_us=90_000.0,
        overlap=overlap,
        markers=markers,
    )


def busy(util: float) -> list:
    return gpu_samples(util_gpu_pct=util)


def entered(
    firsts: list[float], later: list[float] | None = None, offsets: list[float] | None = None
) -> RanksEvidence:
    """Ranks whose captures hold one all-to-all, then three all-reduces: on rank
    r the first ran ``firsts[r]`` us, starting ``offsets[r]`` us into its window
    (3 ms), the later ones ``later[r]`` us each (200)."""
    members = []
    for r, first in enumerate(firsts):
        base = rank(r, {"comm": 0.001}, cap=comm_capture(0.5))
        assert base.job.capture is not None
        at = 3000.0 if offsets is None else offsets[r]
        each = 200.0 if later is None else later[r]
        seq = (
            ("all_to_all", at, first),
            *(("all_reduce", at + 5000.0 * i, each) for i in range(1, 4)),
        )
        cap = dataclasses.replace(base.job.capture, comm_kernels=seq)
        members.append(dataclasses.replace(base, job=dataclasses.replace(base.job, capture=cap)))
    return ranks(*members)


Factory = Callable[[], RanksEvidence]
CASES: dict[str, tuple[Factory, Factory]] = {
    "ranks.straggler": (straggling, even),
    "ranks.comm_bound": (lambda: even(comm=0.01), even),
    "ranks.poor_overlap": (
        lambda: ranks(rank(0, {}, cap=comm_capture(0.2)), rank(1, {})),
        lambda: ranks(rank(0, {}, cap=comm_capture(0.8)), rank(1, {})),
    ),
    # rank 1 reached the first collective last, as far into its window as the others
    "ranks.uneven_start": (
        lambda: entered([8000.0, 10.0, 5000.0]),
        lambda: entered([8000.0, 10.0, 5000.0], later=[4000.0, 10.0, 3000.0]),
    ),
    "ranks.busy_but_poor_scaling": (
        lambda: ranks(*(rank(r, {"comm": 0.01}, gpu=busy(95.0)) for r in range(2))),
        lambda: ranks(*(rank(r, {"comm": 0.01}, gpu=busy(40.0)) for r in range(2))),
    ),
}


def fired(rule_id: str, ev: RanksEvidence) -> list[Finding]:
    return list(REGISTRY[rule_id].check(ev))


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rank_rule_fires(rule_id: str) -> None:
    found = fired(rule_id, CASES[rule_id][0]())
    assert len(found) == 1
    f = found[0]
    assert f.title and f.evidence and f.fix and f.confirm and f.source
    assert f.impact_pct is not None
    # an uneven start is an info at no cost: one window cannot tell whether it recurs
    assert f.impact_pct > 0 or (rule_id, f.severity) == ("ranks.uneven_start", "info")


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rank_rule_stays_quiet(rule_id: str) -> None:
    assert fired(rule_id, CASES[rule_id][1]()) == []


def test_every_rank_rule_has_cases() -> None:
    assert {k for k, r in REGISTRY.items() if r.scope == "ranks"} == set(CASES)


def test_an_uneven_start_names_the_late_rank_and_what_each_waits() -> None:
    (f,) = fired("ranks.uneven_start", entered([8000.0, 10.0, 5000.0]))
    assert f.scope == "rank 1" and f.title.endswith("rank 1 last")
    assert "(rank 0 7.99ms, rank 2 4.99ms)" in f.evidence
    assert "over the 3 later collectives they wait 0.00ms at most" in f.evidence
    assert (f.severity, f.impact_pct) == ("info", 0.0)
    # the all-to-all's kind names the collective; a capture of several steps
    # whose later steps show no such wait says it was a one-off
    assert "(all-to-all)" in f.evidence and "its later steps show no such wait" in f.evidence


@pytest.mark.parametrize(
    "case",
    [
        # the late rank reached the collective 8 ms further into its window: its
        # own work inside the window is its lag (its phases show it)
        lambda: entered([8000.0, 10.0, 5000.0], offsets=[3000.0, 11000.0, 3000.0]),
        # under a tenth of the waiting rank's step (21 ms)
        lambda: entered([2000.0, 10.0, 1000.0]),
        # one rank: no one waits
        lambda: ranks(entered([8000.0, 10.0]).ranks[0]),
        # a rank without its collectives (a live rank's capture): nothing to match
        lambda: ranks(*entered([8000.0, 10.0]).ranks, rank(2, {"comm": 0.001})),
    ],
    ids=["lag-inside-the-window", "small", "one-rank", "a-rank-without"],
)
def test_an_uneven_start_stays_quiet(case: Factory) -> None:
    assert fired("ranks.uneven_start", case()) == []


def test_an_uneven_start_needs_the_same_collectives_on_every_rank() -> None:
    ev = entered([8000.0, 10.0, 5000.0])
    r0 = ev.ranks[0]
    assert r0.job.capture is not None
    seq = r0.job.capture.comm_kernels
    renamed = (("all_reduce", *seq[0][1:]), *seq[1:])
    other = dataclasses.replace(r0.job.capture, comm_kernels=renamed)
    changed = dataclasses.replace(r0, job=dataclasses.replace(r0.job, capture=other))
    assert fired("ranks.uneven_start", ranks(changed, *ev.ranks[1:])) == []
    shorter = dataclasses.replace(r0.job.capture, comm_kernels=seq[:-1])
    cut = dataclasses.replace(r0, job=dataclasses.replace(r0.job, capture=shorter))
    assert fired("ranks.uneven_start", ranks(cut, *ev.ranks[1:])) == []


def test_the_straggler_is_named_with_its_phase_and_what_the_others_wait() -> None:
    (f,) = fired("ranks.straggler", straggling())
    assert f.scope == "rank 1" and "rank 1 is the straggler" in f.title
    assert "data +20.0ms" in f.evidence and "rank 0, rank 2 wait 20.0ms" in f.evidence
    assert "data loading" in f.fix
    step = 0.002 + 0.005 + 0.01 + 0.002 + 0.001 + 0.021
    assert f.impact_pct == pytest.approx(100 * 0.020 / step, abs=0.1)


def test_a_throttled_gpu_is_the_likely_cause() -> None:
    slow_gpu = gpu_samples(throttle_reasons=("hw_thermal_slowdown",), clock_sm_mhz=1400)
    ev = ranks(
        rank(0, {"comm": 0.021}, gpu=busy(95.0)),
        rank(1, {"forward": 0.025, "comm": 0.001}, gpu=slow_gpu),
    )
    (f,) = fired("ranks.straggler", ev)
    assert "1400 MHz against 1980 MHz" in f.evidence and "hw_thermal_slowdown" in f.evidence
    assert "cooling and power" in f.fix


def test_imbalanced_inputs_are_the_likely_cause() -> None:
    def with_samples(r: int, phases: Mapping[str, float], n: int) -> RankEvidence:
        recs = [type(s)(**{**s.__dict__, "samples": n}) for s in steps(phases={**BASE, **phases})]
        return RankEvidence(pid=100 + r, job=evidence(recs), rank=r, last_step=59)

    ev = ranks(with_samples(0, {"comm": 0.021}, 32), with_samples(1, {"forward": 0.025}, 64))
    (f,) = fired("ranks.straggler", ev)
    assert "64 samples per step against 32" in f.evidence and "balance the inputs" in f.fix


def test_rank_findings_are_ranked_and_one_rank_is_not_enough() -> None:
    found = engine.analyze_ranks(straggling())
    assert found[0].rule == "ranks.straggler"
    alone = engine.analyze_ranks(ranks(rank(0, {"comm": 0.021})))
    assert [f.rule for f in alone] == ["ranks.comm_bound"]  # no straggler without peers
    assert "ranks.straggler" not in engine.job_rules()


# -- the summary --------------------------------------------------------------------------------
def hello(r: int, **kw: object) -> Hello:
    base: dict[str, object] = dict(
        pid=100 + r, rank=r, local_rank=r, world_size=2, local_world_size=2, argv=("t.py",)
    )
    base.update(kw)
    return Hello(**base)  # type: ignore[arg-type]


def status(phase: str, in_step_s: float, last: int, t: float = 1000.0) -> Status:
    return Status(t=t, last_step=last, phase_now=phase, phase_now_s=in_step_s, step_now_s=in_step_s)


def test_summary_rows_and_steps_behind() -> None:
    s = summarize(
        [
            RankInput(hello(0), steps(n=60), status("forward", 0.01, 59)),
            RankInput(hello(1), steps(n=57), status("data", 0.01, 56)),
        ],
        now_s=1000.0,
    )
    assert [r.state for r in s.rows] == [RUNNING, RUNNING]
    assert [r.behind for r in s.rows] == [0, 3] and s.leader_step == 59
    assert s.alert is None and s.missing_text() is None
    row = s.rows[0].to_json()
    assert row["rank"] == 0 and row["steps_behind"] == 0 and row["state"] == RUNNING
    assert row["step_p50_s"] == pytest.approx(0.036) and row["comm_s"] == 0.0
    assert set(row["phase_shares"]) == {"forward", "backward", "optimizer", "other"}


def test_a_stuck_rank_is_named_and_the_waiting_ones_said() -> None:
    s = summarize(
        [
            RankInput(hello(0), steps(n=60), status("backward", 7.0, 59, t=998.0)),
            RankInput(hello(1), steps(n=60), status("data", 7.0, 59, t=998.0)),
        ],
        now_s=1000.0,
    )
    assert [r.state for r in s.rows] == [STALLED, STALLED]
    assert s.rows[1].note == "in data for 9 s"  # the status is 2 s old: time went on
    assert s.alert == (
        "no step finished for 9 s: rank 1 stuck in data; rank 0 waiting in backward (collectives)"
    )


def test_a_rank_gone_and_ranks_elsewhere() -> None:
    s = summarize(
        [
            RankInput(hello(0, world_size=8, local_world_size=4), steps(n=60)),
            RankInput(hello(1, world_size=8, local_world_size=4), steps(n=60), gone="bye"),
            RankInput(hello(2, world_size=8, local_world_size=4), steps(n=0)),
        ],
        now_s=1000.0,
    )
    assert [r.state for r in s.rows] == [RUNNING, EXITED, STARTING]
    assert s.alert is not None and s.alert.startswith("rank 1 exited (bye)")
    assert s.remote == 4 and s.local_missing == 1
    text = s.missing_text()
    assert text is not None
    assert "4 of 8 ranks run on other nodes" in text and "gputui cluster" in text
    assert "1 of this node's 4 ranks have no hook socket" in text


@pytest.mark.parametrize(
    ("lasts", "step_s", "warmup", "start"),
    [
        ([10, 12], 0.001, 1, 12 + 1 + 1 + 500),  # fast steps: half a second ahead, capped
        ([10, 12], 0.1, 1, 12 + 1 + 1 + 5),
        ([10, None], None, 0, 10 + 1 + 0 + 2),
        ([None], 1.0, 2, 0 + 2 + 2),
    ],
)
def test_sync_start(lasts: list[int | None], step_s: float | None, warmup: int, start: int) -> None:
    assert sync_start(lasts, step_s, warmup) == start


def test_the_straggler_is_seen_by_the_gpu_wait_when_nccl_waits_on_the_gpu() -> None:
    """DDP over NCCL (two H100s, bench/gpu_ranks_nccl.sh): the waiting rank's CPU
    moves on, its all-reduce kernel spins on the GPU for the slow rank -- 27 ms
    a step in the capture against the slow rank's 7 us.  The straggler's cost is
    that wait, and poor overlap does not claim it: there is no compute to hide
    the communication behind."""
    nccl = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"

    def cap(comm_us: float) -> object:
        return capture(
            [
                kernel(nccl, "communication", 3, comm_us),
                kernel("sgemm_largek_lds64", "gemm", 3, 26.0),
            ],
            span_us=81_300.0,  # three steps
            busy_us=comm_us + 26.0,
            overlap=0.0,
            n_steps=3,
        )

    waiting = rank(0, {"data": 0.002, "forward": 0.010, "comm": 0.0018}, cap=cap(81_100.0))
    slow = rank(1, {"data": 0.022, "comm": 0.0002}, cap=cap(19.6))
    found = {f.rule: f for f in engine.analyze_ranks(ranks(waiting, slow))}
    straggler = found["ranks.straggler"]
    assert straggler.scope == "rank 1" and straggler.severity in ("warn", "crit")
    assert "on the GPU" in straggler.evidence
    # bounded by how much slower the straggler is (data +20 ms), not the kernels' 27 ms
    assert "waits 20.0ms per step" in straggler.evidence
    overlap = found.get("ranks.poor_overlap")
    assert overlap is None or (overlap.impact_pct or 0) < 1
    assert engine.analyze_ranks(ranks(waiting, slow))[0].rule == "ranks.straggler"


def _measured(case: str) -> RanksEvidence:
    """A case of bench/gpu_ranks_nccl.sh as measured on two H100s (the rank
    report's phase shares and each rank's synchronized capture)."""
    data = json.loads((DATA / "h100x2-nccl" / "rank_cases.json").read_text())
    members = []
    for r in data["cases"][case]["ranks"]:
        phases = {k: v * r["step_s"] for k, v in r["phase_shares"].items()}
        cap = r["capture"]
        rows = [kernel(f"k{i}", c, calls, us) for i, (c, calls, us) in enumerate(cap["kernels"])]
        taken = capture(
            rows,
            span_us=cap["span_us"],
            busy_us=cap["busy_pct"] / 100 * cap["span_us"],
            overlap=cap["overlap_hta_pct"] / 100,
            n_steps=cap["steps"],
        )
        job = evidence(steps(phases=phases), cap=taken)
        members.append(RankEvidence(pid=100 + r["rank"], job=job, rank=r["rank"], last_step=59))
    return ranks(*members)


@pytest.mark.parametrize(
    ("case", "rules"),
    [
        ("healthy", {}),  # a small MLP: the GPUs idle, one rank's kernel spins for the other
        ("slow", {"ranks.straggler": "rank 1"}),
        ("overlap", {}),  # 8 x 4096, 25 MB buckets: one rank's capture spins, the other overlaps
        ("nooverlap", {"ranks.poor_overlap": "rank 0"}),  # one bucket: 0% overlap
        ("bigslow", {"ranks.straggler": "rank 1"}),  # its CPU waits in backward, not in comm
        ("lightning", {"ranks.straggler": "rank 1"}),  # a Lightning Trainer: waits in "other"
        # a Hugging Face Trainer (GPT-2, bf16): rank 0 waits in forward; the
        # straggler's own capture shows its all-reduce 23% overlapped
        ("hf", {"ranks.straggler": "rank 1", "ranks.poor_overlap": "rank 1"}),
    ],
)
def test_the_rank_rules_on_ddp_with_nccl_on_two_h100s(case: str, rules: dict[str, str]) -> None:
    """Straggler and overlap on real NCCL jobs: a waiting rank's CPU does not
    wait in the collective (it blocks later, in backward), and its all-reduce
    kernels spin on the GPU, so neither its comm phase nor its capture alone
    tells who waits for whom."""
    found = engine.analyze_ranks(_measured(case))
    assert {f.rule: f.scope for f in found} == rules
    if rules:
        assert found[0].rule == next(iter(rules))  # the top line
    if case == "bigslow":
        (f,) = found
        # rank 1's data loading is 20 ms slower (--slow-data-s 0.02)
        planted = re.search(r"rank 1's data takes ([\d.]+)ms per step longer", f.evidence)
        assert planted is not None and 18 < float(planted.group(1)) < 22, f.evidence
        assert "rank 0 waits for it in communication kernels on the GPU (91% of its" in f.evidence
        assert "data loading" in f.fix
        assert 60 < (f.impact_pct or 0) < 75


@pytest.mark.parametrize(
    ("case", "hinted"),
    [
        ("healthy", False),
        ("slow", False),  # named without a capture: its peer waits in comm
        ("overlap", False),
        ("nooverlap", False),
        ("bigslow", True),
        ("lightning", True),
        ("hf", True),
    ],
)
def test_before_a_capture_differing_phases_ask_for_one(case: str, hinted: bool) -> None:
    """Without captures the NCCL stragglers cannot be named (their peers block
    outside comm); the rank view says so and what to do, and only there."""
    import dataclasses

    from gputui.analysis.rules.ranks import wait_hint

    measured = _measured(case)
    uncaptured = dataclasses.replace(
        measured,
        ranks=tuple(
            dataclasses.replace(r, job=dataclasses.replace(r.job, capture=None))
            for r in measured.ranks
        ),
    )
    hint = wait_hint(uncaptured)
    assert (hint is not None) == hinted, hint
    if hint:
        assert "rank 1's data +" in hint and "synchronized capture" in hint
        assert "ranks.straggler" not in {f.rule for f in engine.analyze_ranks(uncaptured)}
    assert wait_hint(measured) is None  # with the captures the rules say it


@pytest.mark.parametrize(
    ("collectives", "says", "never"),
    [
        (("all_reduce",), "let DDP start all-reduces during backward", "all-to-all"),
        (("all_reduce", "all_to_all"), "the all-to-all exchange", "let DDP start"),
        (("all_gather", "reduce_scatter"), "FSDP/ZeRO's all-gathers", "let DDP start"),
    ],
)
def test_poor_overlap_advice_follows_the_collectives_in_use(
    collectives: tuple[str, ...], says: str, never: str
) -> None:
    """An all-to-all (embedding or expert parallelism) or FSDP's collectives are
    not DDP's gradient all-reduce."""

    def cap() -> object:
        # a capture with markers reads its overlap from its trace metrics (HTA's %)
        c = comm_capture(0.2, JobMarkers(collectives=collectives))
        metrics = dataclasses.replace(c.trace_metrics, comm_compute_overlap_pct=20.0)
        return dataclasses.replace(c, trace_metrics=metrics)

    (f,) = fired("ranks.poor_overlap", ranks(rank(0, {}, cap=cap()), rank(1, {})))
    assert says in f.fix and never not in f.fix
