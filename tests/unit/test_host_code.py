"""The hook's Python sampler as the analyzer's evidence, no capture needed
(gputui.analysis.host_code): the training thread's time in code outside
torch, where in the step it falls and which functions hold it; the live
account's split of the rest by it; the Python finding from it alone and
bounded by it beside a capture's account; the data finding naming the
function the loading spends its time in."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gputui.analysis import engine
from gputui.analysis.finding import Finding
from gputui.analysis.host_code import (
    estimated_outside,
    host_code,
    in_memory_data,
    loading_hot,
    workers_wait,
)
from gputui.analysis.ledger import HOST_CODE
from gputui.analysis.live_account import REST, live_account, since_capture
from gputui.protocol.profile import PathFrame, ProfileFunction, PythonProfile
from gputui.protocol.schema import LoaderInfo
from tests.helpers.evidence import (
    account,
    capture,
    evidence,
    gpu_samples,
    python_profile,
    steps,
)

SITE = "/venv/lib/python3.11/site-packages"
TORCH = f"{SITE}/torch"
STDLIB = "/usr/lib/python3.11"
#: a 40 ms step: forward, backward and optimizer of 12 ms, 8 ms outside every phase
LOOP = {"forward": 0.012, "backward": 0.012, "optimizer": 0.008, "other": 0.008}


def cpu_job(profile: PythonProfile | None, **kw: Any) -> Any:
    """A CPU-only job's evidence with this profile."""
    ev = evidence(steps(phases=kw.pop("phases", LOOP)), python_profile=profile, **kw)
    return dataclasses.replace(ev, cuda=False)


def found(rule: str, ev: Any) -> list[Finding]:
    return [f for f in engine.analyze(ev) if f.rule == rule]


# -- the sampler's split -------------------------------------------------------------------
def test_the_hooks_split_is_read_by_where_in_the_step_it_falls() -> None:
    profile = python_profile(
        {"other": 0.3, "optimizer": 0.05, "forward": 0.2, "augment": 0.1, "data": 0.2}
    )
    host = host_code(profile)
    assert host is not None and host.exact
    assert host.loop == pytest.approx(0.35) and host.model == pytest.approx(0.2)
    assert host.phases == {"augment": pytest.approx(0.1)}  # data is its own bucket
    assert host.counted == pytest.approx(0.45)
    (sort,) = host.functions
    assert sort.share == pytest.approx(0.45)  # the loop's and the user phase's
    assert sort.words == "sort (fromnumeric.py:1092) 45%, called from augment (data.py:12)"
    assert host.all_functions[0].share == pytest.approx(0.65)  # with forward


def test_an_older_hooks_profile_is_estimated_from_kinds_and_paths() -> None:
    """Without the hook's split, a function is outside torch by its kind, and a
    library's by its callers on its hottest stack: a standard-library function
    is its caller's, a library under torch's compiler is torch's, a library's
    forward that torch's module call runs is the library's."""

    def lib(file: str, *callers: tuple[str, str]) -> tuple[PythonProfile, ProfileFunction]:
        frames = tuple(PathFrame(f, n, 1, "torch" if "/torch/" in f else "lib") for f, n in callers)
        f = ProfileFunction(
            file, "f", "lib", 1, 1, 1.0, 1.0, {"other": 1.0}, path=(0, 1)[: len(frames)]
        )
        return PythonProfile(sampled_s=1.0, samples=100, functions=(f,), frames=frames), f

    cases = {
        "numpy, called by the job": (f"{SITE}/numpy/x.py", (), True),
        "the standard library under torch's DataLoader": (
            f"{STDLIB}/queue.py",
            ((f"{TORCH}/utils/data/dataloader.py", "next"),),
            False,
        ),
        "triton under inductor": (
            f"{SITE}/triton/compiler.py",
            ((f"{TORCH}/_inductor/runtime/triton_heuristics.py", "run"),),
            False,
        ),
        "a library's forward under a module call": (
            f"{SITE}/transformers/modeling.py",
            ((f"{TORCH}/nn/modules/module.py", "_call_impl"),),
            True,
        ),
        "the standard library under a library under inductor": (
            f"{STDLIB}/functools.py",
            ((f"{TORCH}/_inductor/codegen.py", "run"), (f"{SITE}/sympy/core.py", "simplify")),
            False,
        ),
    }
    for what, (file, callers, outside) in cases.items():
        profile, f = lib(file, *callers)
        assert estimated_outside(profile, f) is outside, what
    job = ProfileFunction("/job/train.py", "step", "user", 1, 1, 1.0, 1.0)
    engine_fn = ProfileFunction(f"{TORCH}/autograd/graph.py", "_engine_run_backward", "torch")
    assert estimated_outside(PythonProfile(), job) and not estimated_outside(
        PythonProfile(), engine_fn
    )
    # the estimate reads the same numbers off the same functions as the split
    exact = host_code(python_profile({"other": 0.4}))
    older = host_code(python_profile({"other": 0.4}, exact=False))
    assert exact is not None and older is not None and not older.exact
    assert older.loop == pytest.approx(exact.loop)
    assert [h.words for h in older.functions] == [h.words for h in exact.functions]


def test_a_function_without_phases_counts_outside_every_phase() -> None:
    f = ProfileFunction(f"{SITE}/numpy/x.py", "sort", "lib", 1, 1, 4.0, 4.0)
    host = host_code(PythonProfile(sampled_s=10.0, samples=1000, functions=(f,)))
    assert host is not None and host.loop == pytest.approx(0.4)


# -- the live account --------------------------------------------------------------------------
def test_without_a_capture_the_live_account_tells_the_samplers_python_from_the_rest() -> None:
    usual = steps(phases={**LOOP, "data": 0.01})  # a 50 ms step, 40 ms of it the rest
    acct = live_account(usual, python_share=0.3)
    assert acct is not None and acct.sampled
    assert acct.seconds["python"] == pytest.approx(0.015)
    assert acct.seconds[REST] == pytest.approx(0.025)
    assert sum(acct.seconds.values()) == pytest.approx(acct.step_s)  # additive
    assert acct.source("python") == "the Python sampler"
    assert acct.source(REST) == "no capture yet" and acct.source("data") == "every step"
    assert {b["bucket"]: b["source"] for b in acct.to_json()["buckets"]}["python"] == (
        "the Python sampler"
    )
    # never more than the rest
    whole = live_account(usual, python_share=0.95)
    assert whole is not None and whole.seconds["python"] == pytest.approx(0.04)
    assert whole.seconds[REST] == pytest.approx(0.0)
    # a capture's account splits the rest: the sampler's share does not
    cap = capture(account=account(dispatch=0.5, launch=0.1))
    split = since_capture(usual, cap, python_profile({"other": 0.3}))
    assert split is not None and not split.sampled and REST not in split.seconds
    # too few samples: the rest stays whole
    few = since_capture(usual, None, python_profile({"other": 0.3}, samples=99))
    assert few is not None and "python" not in few.seconds


def test_the_ledger_carries_the_samplers_python_labelled() -> None:
    led = cpu_job(python_profile({"other": 0.15})).ledger
    assert led.source == "the Python sampler"
    assert led.shares["python"] == pytest.approx(0.15)
    assert sum(led.shares.values()) == pytest.approx(1.0)


# -- the Python finding from the sampler alone -------------------------------------------------
def test_a_cpu_job_in_numpy_gets_the_python_finding_naming_the_function() -> None:
    (f,) = found("cpu.python", cpu_job(python_profile({"other": 0.6})))
    assert f.severity == "crit" and f.impact_pct == pytest.approx(60.0)
    assert f.bucket == "python"
    assert "sort (fromnumeric.py:1092) 60%, called from augment (data.py:12)" in f.evidence
    assert f.fix.startswith("start with sort (fromnumeric.py:1092), called from augment")
    assert "py-spy" not in f.fix


def test_in_a_user_phase_it_claims_the_phase_too() -> None:
    phases = {**LOOP, "augment": 0.04}  # an 80 ms step, half of it the user phase
    (f,) = found("cpu.python", cpu_job(python_profile({"augment": 0.48}), phases=phases))
    assert f.bucket == HOST_CODE and f.impact_pct == pytest.approx(48.0)
    assert "the user phase augment 48%" in f.evidence


def test_torchs_own_code_is_no_python_outside_torch() -> None:
    """The leak job: its step is torch's autograd engine, optimizer and module
    calls; the sampler finds almost nothing of the job's own."""
    assert found("cpu.python", cpu_job(python_profile({"other": 0.02}))) == []


def test_forward_and_backward_wait_for_a_capture() -> None:
    """A model's lines that run torch ops look like its own code to the
    sampler: alone, it does not count them."""
    assert found("cpu.python", cpu_job(python_profile({"forward": 0.7}))) == []


def test_a_gpu_job_needs_the_gpu_idle_and_is_capped_at_it() -> None:
    profile = python_profile({"other": 0.6})
    idle = evidence(steps(phases=LOOP), gpu=gpu_samples(util_gpu_pct=60.0), python_profile=profile)
    (f,) = found("cpu.python", idle)
    assert f.impact_pct == pytest.approx(40.0)  # the GPU's idle time, not 60%
    assert "the GPU idles 40% of the time" in f.evidence
    busy = evidence(steps(phases=LOOP), gpu=gpu_samples(util_gpu_pct=90.0), python_profile=profile)
    assert found("cpu.python", busy) == []  # idle 10%: the host's time is hidden
    unknown = evidence(steps(phases=LOOP), python_profile=profile)
    assert found("cpu.python", unknown) == []  # no GPU samples: its idle time unknown


def test_a_larger_data_wait_comes_first() -> None:
    phases = {**LOOP, "data": 0.06}  # 60% of a 100 ms step
    assert found("cpu.python", cpu_job(python_profile({"other": 0.3}), phases=phases)) == []
    assert found("data.loader_wait", cpu_job(python_profile({"other": 0.3}), phases=phases))


def test_the_sampler_waits_for_the_step_rules_minimum() -> None:
    ev = evidence(steps(n=10, phases=LOOP), python_profile=python_profile({"other": 0.6}))
    assert found("cpu.python", dataclasses.replace(ev, cuda=False)) == []


# -- beside a capture ----------------------------------------------------------------------------
def test_the_capture_says_how_much_and_the_sampler_whose() -> None:
    """The account's host time outside torch ops that is torch's own code (the
    leak job: 55% of its step) is not Python outside torch: the finding takes
    the sampler's smaller share, and says nothing below its threshold or below
    the account's other buckets."""
    cap = capture(account=account(gpu_busy=None, dispatch=0.45))  # 55% "python"
    alone = cpu_job(None, cap=cap)
    assert [f.impact_pct for f in found("cpu.python", alone)] == [pytest.approx(55.0)]
    torch_own = cpu_job(python_profile({"other": 0.02, "forward": 0.03}), cap=cap)
    assert found("cpu.python", torch_own) == []
    # 40% outside torch: less than torch dispatch's 45%, which comes first
    some = python_profile({"other": 0.3, "forward": 0.1})
    assert found("cpu.python", cpu_job(some, cap=cap)) == []
    lighter = capture(account=account(gpu_busy=None, dispatch=0.3))  # 70% "python"
    (f,) = found("cpu.python", cpu_job(some, cap=lighter))
    assert f.impact_pct == pytest.approx(40.0)  # forward counts beside the account
    assert "70% of the step" in f.evidence and "finds 40%" in f.evidence
    assert "sort (fromnumeric.py:1092) 40%" in f.evidence


# -- data loading ------------------------------------------------------------------------------
def workers_profile(share: float) -> PythonProfile:
    """Two workers spending ``share`` of their time in the job's ``decode``
    (numpy under it), the rest waiting for work in torch's worker loop."""
    decode = ProfileFunction(
        "/job/data.py",
        "decode",
        "user",
        12,
        10,
        0.1,
        20.0 * share,
        {"worker": 0.1},
        20.0 * share,
        {"worker": 20.0 * share},
    )
    wait = ProfileFunction(
        f"{STDLIB}/selectors.py",
        "select",
        "lib",
        415,
        400,
        20.0 * (1 - share),
        20.0 * (1 - share),
        {"worker": 20.0 * (1 - share)},
        path=(0,),
    )
    return PythonProfile(
        window_s=10.0,
        sampled_s=20.0,
        samples=2000,
        functions=(decode, wait),
        frames=(PathFrame(f"{TORCH}/utils/data/_utils/worker.py", "_worker_loop", 300, "torch"),),
    )


def loading(profile: PythonProfile, workers: int = 2) -> Any:
    phases = {**LOOP, "data": 0.04}
    return dataclasses.replace(
        cpu_job(profile, phases=phases), loader=LoaderInfo(num_workers=workers)
    )


def test_data_loading_names_the_workers_hot_function() -> None:
    profile = dataclasses.replace(
        python_profile({"other": 0.01}), workers=workers_profile(0.97), worker_processes=2
    )
    (f,) = found("data.loader_wait", loading(profile))
    assert (
        "the DataLoader workers (2 processes sampled) spend 97% of their time in decode "
        "(data.py:12)" in f.evidence
    )
    assert f.fix.startswith("the workers are busy in one function: make decode (data.py:12)")
    hot = loading_hot(profile)
    assert hot is not None and hot.workers == 2
    # the waiting in torch's worker loop is not the loading's work
    idle = dataclasses.replace(profile, workers=workers_profile(0.1))
    hot = loading_hot(idle)
    assert hot is not None and hot.hot.function.function == "decode"


def test_without_workers_the_training_threads_data_phase_is_named() -> None:
    decode = ProfileFunction(
        "/job/data.py", "decode", "user", 12, 10, 3.0, 3.0, {"data": 3.0}, 3.0, {"data": 3.0}
    )
    profile = PythonProfile(
        sampled_s=10.0, samples=1000, functions=(decode,), phases_s={"data": 4.0, "other": 6.0}
    )
    (f,) = found("data.loader_wait", loading(profile, workers=0))
    assert "the training thread spends 75% of its data wait in decode (data.py:12)" in f.evidence
    assert "num_workers=0" in f.fix and "make decode (data.py:12) cheaper" in f.fix


def test_workers_that_wait_for_work_blame_the_hand_off() -> None:
    """Workers that wait for work 90% of their time keep up: the data wait is
    the batches' hand-off, and they are not told to multiply.  Their busy time
    is the job's own decode, so the samples are not called cheap."""
    profile = dataclasses.replace(
        python_profile({"other": 0.01}), workers=workers_profile(0.1), worker_processes=6
    )
    (f,) = found("data.loader_wait", loading(profile))
    # the loader's worker count, not the processes the sampler saw over time
    assert "the 2 DataLoader workers wait for work 90% of their time" in f.evidence
    assert f.fix.startswith("the workers keep up (more would wait too)")
    assert "num_workers" not in f.fix and "BatchSampler" not in f.fix
    waiting = workers_wait(profile)
    assert waiting is not None and waiting.idle == pytest.approx(0.9)
    assert waiting.own == pytest.approx(1.0) and waiting.receive is None


def test_the_worker_loops_get_counts_as_waiting_where_the_select_is_cut() -> None:
    get = ProfileFunction(
        f"{STDLIB}/multiprocessing/queues.py", "Queue.get", "lib", 113, 98, 0.0, 14.0
    )
    collate = ProfileFunction(
        f"{TORCH}/utils/data/_utils/collate.py", "collate_tensor_fn", "torch", 275, 246, 6.0, 6.0
    )
    workers = PythonProfile(sampled_s=20.0, samples=2000, functions=(get, collate))
    profile = dataclasses.replace(python_profile({}), workers=workers, worker_processes=2)
    waiting = workers_wait(profile)
    assert waiting is not None and waiting.idle == pytest.approx(0.7) and waiting.own == 0.0
    (f,) = found("data.loader_wait", loading(profile))
    # torch made the samples: cheap, so a batch is indexed at once instead
    assert "index a whole batch at once in the training process" in f.fix
    busy = dataclasses.replace(profile, workers=dataclasses.replace(workers, functions=(collate,)))
    assert workers_wait(busy).idle == 0.0  # type: ignore[union-attr]
    (f,) = found("data.loader_wait", loading(busy))
    assert "raise num_workers" in f.fix


def _in_memory(collate_s: float) -> PythonProfile:
    index = ProfileFunction(
        f"{TORCH}/utils/data/dataset.py",
        "TensorDataset.__getitem__",
        "torch",
        206,
        205,
        3.0,
        3.0,
        {"data": 3.0},
    )
    collate = ProfileFunction(
        f"{TORCH}/utils/data/_utils/collate.py",
        "collate_tensor_fn",
        "torch",
        275,
        246,
        collate_s,
        collate_s,
        {"data": collate_s},
    )
    # the loop's own function: the job's innermost frame in every phase
    train = ProfileFunction(
        "/job/train.py",
        "train",
        "user",
        40,
        30,
        0.1,
        10.0,
        {"other": 0.1},
        9.0,
        {"data": 3.0 + collate_s, "forward": 2.0, "backward": 3.0},
    )
    return PythonProfile(
        sampled_s=10.0,
        samples=1000,
        functions=(train, index, collate),
        phases_s={"data": 3.0 + collate_s, "other": 7.0 - collate_s},
    )


def test_batches_indexed_out_of_host_memory_are_told_so() -> None:
    """num_workers=0 and a data wait in torch's TensorDataset indexing: batch
    indexing where samples are collated one by one; the function that runs
    the loop is not named as the loading's code."""
    profile = _in_memory(1.0)
    memory = in_memory_data(profile)
    assert memory is not None
    assert memory.indexing == pytest.approx(0.75) and memory.collating == pytest.approx(0.25)
    (f,) = found("data.loader_wait", loading(profile, workers=0))
    assert "indexed out of in-memory tensors" in f.evidence
    assert "index a whole batch at once" in f.fix and "train (train.py" not in f.fix
    assert loading_hot(profile) is None
    # a CPU job that indexes whole batches already: the generic num_workers=0 fix
    (f,) = found("data.loader_wait", loading(_in_memory(0.0), workers=0))
    assert "indexed out of" not in f.evidence and "num_workers=0" in f.fix
