"""Advice that fits how the job runs: gradient accumulation read from a trace
(each ProfilerStep fetching the same number of batches from its DataLoader,
two or more, with one optimizer step: Sanity.micro_batches) and the launch
advice that follows from it; communication advice for a job without a
backward."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gputui.analysis.frameworks import LIGHTNING, TRANSFORMERS, larger_batch
from gputui.cli import main
from tests.helpers.tracegen import TraceBuilder

FETCH = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
OPTIMIZER = "Optimizer.step#AdamW.step"


def trace(tmp_path: Path, fetches: list[int], optimizer_steps: int = 1, tid: int = 100) -> Path:
    """Steps of 10 ms, each with its fetches (on thread ``tid``), a kernel and
    its optimizer steps."""
    b = TraceBuilder()
    for i, n in enumerate(fetches):
        t0 = 1000.0 + i * 10_000
        b.step(i + 1, t0, 10_000)
        for k in range(n):
            b.op(FETCH, t0 + 100 + k * 1000, 500, cat="user_annotation", tid=tid)
        b.launch(t0 + 6000, 10, "gemm_kernel", t0 + 6100, 2000)
        for k in range(optimizer_steps):
            b.op(OPTIMIZER, t0 + 8000 + k * 500, 400, cat="user_annotation")
    return b.write(tmp_path / "t.pt.trace.json")


def micro_batches(capsys: pytest.CaptureFixture[str], path: Path) -> int:
    assert main(["analyze", "--json", str(path)]) == 0
    (rank,) = json.loads(capsys.readouterr().out)["ranks"]
    got: int = rank["sanity"]["micro_batches"]
    return got


@pytest.mark.parametrize(
    ("fetches", "optimizer_steps", "tid", "want"),
    [
        ([4, 4, 4], 1, 100, 4),
        ([2, 2], 1, 100, 2),
        ([1, 1, 1], 1, 100, 0),  # one batch a step
        ([4, 4, 3], 1, 100, 0),  # steps that differ
        ([4, 4, 4], 2, 100, 0),  # an optimizer step per two batches
        ([4, 4, 4], 0, 100, 0),  # no optimizer step in sight
        ([4, 4, 4], 1, 7, 0),  # fetched by another thread
    ],
)
def test_micro_batches_need_the_same_fetches_and_one_optimizer_step(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    fetches: list[int],
    optimizer_steps: int,
    tid: int,
    want: int,
) -> None:
    assert micro_batches(capsys, trace(tmp_path, fetches, optimizer_steps, tid)) == want


def test_the_larger_batch_is_a_larger_micro_batch_where_the_step_accumulates() -> None:
    assert larger_batch(None, 0).startswith("use larger batches per step")
    assert larger_batch(None, 1).startswith("use larger batches per step")
    own = larger_batch(None, 4)
    assert "accumulates gradients over 4 micro-batches" in own
    assert "the DataLoader's batch_size up to 4x" in own
    assert "gradient_accumulation_steps=... down as much" in larger_batch(TRANSFORMERS, 4)
    assert "Trainer(accumulate_grad_batches=...) down as much" in larger_batch(LIGHTNING, 3)


def test_communication_advice_for_a_job_without_backward_speaks_of_inference() -> None:
    """All-gathers and reduce-scatters with no backward: tensor or sequence
    parallelism, or weights sharded FSDP-style, not FSDP's backward prefetch;
    with a backward, the FSDP advice stands."""
    from gputui.analysis.rules.capture import comm_fix

    inference = comm_fix(("all_gather", "reduce_scatter"), inference=True)
    assert inference.startswith("with no backward here, the all-gather/reduce-scatter calls")
    assert "backward_prefetch" not in inference and "gradient" not in inference
    assert "bucket_cap_mb" not in comm_fix(("all_reduce",), inference=True)
    training = comm_fix(("all_gather", "reduce_scatter"))
    assert "backward_prefetch=BACKWARD_PRE" in training
    assert "bucket_cap_mb" in comm_fix(("all_reduce",))


def test_a_live_job_accumulates_where_its_steps_fetch_the_same_batches() -> None:
    """A hooked job's step ends at its optimizer's step: the DataLoader batches
    its ordinary steps fetched (StepRecord.batches) are its micro-batches where
    nearly all fetched the same number, two or more.  The launch advice follows."""
    import dataclasses

    from gputui.analysis import engine
    from gputui.analysis.evidence import job_evidence, live_micro_batches
    from tests.helpers.evidence import capture, kernel, steps

    def fetching(counts: list[int]) -> list[Any]:
        recs = steps(n=len(counts) + 3)  # (the first steps are warm-up)
        counts = [4, 4, 4, *counts]
        return [dataclasses.replace(r, batches=c) for r, c in zip(recs, counts, strict=True)]

    assert live_micro_batches(fetching([4] * 40)[3:]) == 4
    assert live_micro_batches(fetching([4] * 39 + [2])[3:]) == 4  # an epoch's last step
    assert live_micro_batches(fetching([1] * 40)[3:]) == 0
    assert live_micro_batches(fetching([4, 2] * 20)[3:]) == 0
    assert live_micro_batches(fetching([0] * 40)[3:]) == 0  # no DataLoader
    cap = capture([kernel("elementwise_kernel<add>", "elementwise", 5000, 15_000.0)])
    ev = job_evidence(fetching([4] * 40), capture=cap, cuda=True)
    assert ev.micro_batches == 4
    (launch,) = [f for f in engine.analyze(ev) if f.rule == "launch.overhead"]
    assert "already accumulates gradients over 4 micro-batches" in launch.fix


def test_a_hooked_cpu_job_that_accumulates_records_its_micro_batches() -> None:
    """A real hooked job (bench/jobs/accumulate_cpu.py under gputui run, 2-core
    VM, torch 2.13 CPU; recorded with bench/record_attach.py): 4 micro-batches
    of 8 a step.  The hook counted 4 batches in every step it sent, and the
    evidence says the job accumulates over 4."""
    from gputui.analysis.evidence import job_evidence, live_micro_batches, ordinary
    from gputui.client.hook import parse_event
    from gputui.protocol.schema import StepBatch
    from gputui.recording.attach import read_attach_recording

    recording = read_attach_recording(
        Path(__file__).parents[1] / "data" / "cpu_accumulate.jsonl.gz"
    )
    recs: list[Any] = []
    for _t, msg in recording.messages:
        event = parse_event(msg)
        if isinstance(event, StepBatch):
            recs.extend(event.steps)
    assert len(recs) > 100 and {r.batches for r in recs} == {4}
    assert live_micro_batches(ordinary(recs)) == 4
    assert job_evidence(recs).micro_batches == 4
