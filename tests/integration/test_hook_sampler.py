"""The Python stack sampler inside real CPU torch training jobs (subprocesses):
a job whose step is mostly one function gets that function named first, with
its share and its phase, under ``gputui run`` and ``import gputui.hook``,
with a viewer attached, detached and attached again; a stopped job is not
credited its stop; forked DataLoader workers are sampled apart from the
training thread, and workers that are not are said why.  The analyzer reads
it without a capture: a step spent in numpy gets the Python finding first,
naming the function; a step spent in torch's own code (autograd, optimizer,
module calls) gets none, with or without a capture; the data finding names
the workers' function."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from gputui.analysis.host_code import MIN_SAMPLES
from gputui.client.hook import Disconnected, HookClient, Invalid
from gputui.protocol.profile import PythonProfile
from gputui.protocol.schema import HookError
from tests.helpers import hookutil

pytest.importorskip("torch")

#: every test here starts a training job
pytestmark = pytest.mark.slow

#: a training loop whose own Python is three lines
KEEP_OUTPUTS = hookutil.REPO / "tests" / "jobs" / "keep_outputs.py"

#: the profile names the hot function soon after attaching (it is sent on
#: subscribe, from the samples taken before; the requirement is 10 s, met in
#: well under one on an idle machine): a generous deadline, since CI may run
#: beside other work
NAMED_WITHIN_S = 60.0


def hot_profile(client: HookClient, function: str, timeout: float) -> PythonProfile:
    """The first profile from ``client`` whose top function is ``function``."""
    deadline = time.monotonic() + timeout
    seen: list[str] = []
    while time.monotonic() < deadline:
        event = client.get(timeout=max(0.01, deadline - time.monotonic()))
        assert not isinstance(event, (Disconnected, Invalid)), event
        if isinstance(event, PythonProfile):
            top = event.top(1)
            seen.append(top[0].function if top else "-")
            if top and top[0].function == function:
                return event
    raise AssertionError(f"no profile led by {function} in {timeout:g} s: {seen}")


def requested(client: HookClient) -> PythonProfile | None:
    """The profile the hook answers a request with; None when it has none
    yet (it answers with an error saying why)."""
    client.request_profile()
    for event in client.events(timeout=10):
        if isinstance(event, PythonProfile):
            return event
        if isinstance(event, HookError):
            return None
        assert not isinstance(event, (Disconnected, Invalid)), event
    raise AssertionError("no answer")


def profile_of(client: HookClient) -> PythonProfile:
    return hookutil.wait_for(lambda: requested(client), 30, "a profile")  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("hot", "via_run"),
    [("numpy", True), ("python", False)],
    ids=["numpy-gputui-run", "python-install"],
)
def test_the_profile_names_the_function_the_step_spends_its_time_in(
    env: dict[str, str], tmp_path: Path, hot: str, via_run: bool
) -> None:
    args = ["--steps", "0", "--hot", hot, "--hot-ms", "30", "--hot-phase", "augment"]
    job = hookutil.start_job(env, tmp_path, args if via_run else [*args, "--install"], via_run)
    function = f"hot_{hot}"
    try:
        client = HookClient.connect(job.pid)
        try:
            assert client.profile_unavailable() is None
            client.subscribe(history=0)
            client.start()
            profile = hot_profile(client, function, NAMED_WITHIN_S)
        finally:
            client.close()
        top = profile.top(1)[0]
        assert top.kind == "user" and top.file.endswith("train_cpu.py")
        # its site time: its own, and numpy's on its behalf
        assert profile.share(top.site_s) > 0.5, profile.share(top.site_s)
        # ...in the user phase it runs in
        assert top.site_phases_s.get("augment", 0.0) > 0.9 * top.site_s
        assert profile.phases_s.get("augment", 0.0) > 0.5 * profile.sampled_s
        assert profile.lines[0].function == function

        # detached, the job goes on being sampled; a new viewer gets more
        time.sleep(0.5)
        again = HookClient.connect(job.pid)
        try:
            again.start()
            later = profile_of(again)
        finally:
            again.close()
        assert later.samples > profile.samples
        assert later.top(1)[0].function == function
    finally:
        job.stop()


def test_a_stopped_job_is_not_credited_its_stop(env: dict[str, str], tmp_path: Path) -> None:
    job = hookutil.start_job(
        env, tmp_path, ["--steps", "0", "--install", "--hot", "python", "--hot-ms", "20"]
    )
    stop_s = 3.0
    try:
        client = HookClient.connect(job.pid)
        try:
            client.start()
            # the sampler is under way (its window open) before the stop: on a
            # loaded machine the first profile may come before its first samples
            before = hookutil.wait_for(
                lambda: (p := profile_of(client)).samples >= 5 and p, 60, "the first samples"
            )
            os.kill(job.pid, signal.SIGSTOP)
            try:
                time.sleep(stop_s)
            finally:
                os.kill(job.pid, signal.SIGCONT)
            hookutil.wait_for(
                lambda: profile_of(client).samples > before.samples + 20, 30, "new samples"
            )
            after = profile_of(client)
        finally:
            client.close()
    finally:
        job.stop()
    # the stop is inside the profile's window but not in its sampled time
    assert after.window_s - after.sampled_s > stop_s - 1.0, (after.window_s, after.sampled_s)


def workers_profile(client: HookClient, want: str, timeout: float = 60) -> PythonProfile:
    """The first requested profile whose workers' part (or note) has ``want``."""

    def ready() -> PythonProfile | None:
        profile = requested(client)
        if profile is None:
            return None
        if want == "functions":
            return profile if profile.workers is not None and profile.workers.top(1) else None
        return profile if want in (profile.workers_note or "") else None

    return hookutil.wait_for(ready, timeout, f"workers: {want}")  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("workers", "context", "note"),
    [
        ("0", "fork", "num_workers=0 loads batches on the training thread"),
        ("1", "spawn", "workers not hooked: started with spawn, without gputui"),
    ],
    ids=["no-workers", "spawn"],
)
def test_dataloader_workers_that_are_not_sampled_are_said_why(
    env: dict[str, str], tmp_path: Path, workers: str, context: str, note: str
) -> None:
    args = ["--steps", "0", "--install", "--workers", workers, "--mp-context", context]
    job = hookutil.start_job(env, tmp_path, args)
    try:
        client = HookClient.connect(job.pid)
        try:
            client.start()
            profile = workers_profile(client, note)
        finally:
            client.close()
    finally:
        job.stop()
    assert profile.workers is None and profile.worker_processes == 0


@pytest.mark.parametrize("via_run", [False, True], ids=["install", "gputui-run"])
def test_forked_dataloader_workers_are_sampled_apart_from_the_training_thread(
    env: dict[str, str], tmp_path: Path, via_run: bool
) -> None:
    """The numpy work moved into the DataLoader's two forked workers: the
    training thread's profile does not name it (its step waits for batches),
    the workers' profile names it first; both in ``attach --once``."""

    args = ["--steps", "0", "--workers", "2", "--hot", "numpy", "--hot-ms", "30"]
    args += ["--hot-in-workers"] + ([] if via_run else ["--install"])
    job = hookutil.start_job(env, tmp_path, args, via_run)
    try:

        def named() -> dict | None:  # type: ignore[type-arg]
            out = hookutil.gputui(env, "attach", str(job.pid), "--once", "--json", timeout=120)
            assert out.returncode == 0, out.stderr
            prof = json.loads(out.stdout)["python_profile"]
            workers = None if prof is None else prof.get("workers")
            return prof if workers and workers["functions"] else None

        profile = PythonProfile.from_wire(hookutil.wait_for(named, 90, "the workers' profile"))
        assert profile.workers is not None and profile.worker_processes >= 1
        assert profile.workers_note is None
        # named first among the workers' functions, with a large share of their time
        top = profile.workers.top(1)[0]
        assert top.function == "hot_numpy" and top.file.endswith("train_cpu.py")
        assert profile.workers.share(top.time_s) > 0.3, profile.workers.share(top.time_s)
        assert [f.function for f in profile.workers.path_of(top)][-1] == "SleepyBatches.__getitem__"
        # the worker's own stack: not the training process's frames it was forked from
        assert all(f.function != "train" for f in profile.workers.functions)
        assert set(profile.workers.phases_s) == {"worker"}
        # not training-thread time: the control is the same job with the work in the loop
        assert all(f.function != "hot_numpy" for f in profile.functions)

        # the data finding names it, and points its fix at it
        def loading_named() -> dict | None:  # type: ignore[type-arg]
            found = finding_of(env, job.pid, "data.loader_wait")
            return found if found and "DataLoader workers (" in found["evidence"] else None

        # (the workers' profile holds enough samples a little after it first names them)
        loading = hookutil.wait_for(loading_named, 90, "the data finding naming the function")
        assert "in hot_numpy (train_cpu.py:" in loading["evidence"]
        assert "make hot_numpy (train_cpu.py:" in loading["fix"]
        text = hookutil.gputui(env, "attach", str(job.pid), "--once", timeout=120).stdout
        section = text[text.index("DataLoader workers (") :]
        head = next(i for i, line in enumerate(section.splitlines()) if "time" in line.split())
        assert "hot_numpy" in section.splitlines()[head + 1]
        assert "hot_numpy" not in text[: text.index("DataLoader workers (")]
    finally:
        job.stop()


def test_attach_once_names_the_hot_function_first_with_its_share(
    env: dict[str, str], tmp_path: Path
) -> None:
    """``attach PID --once``: the report's Python section and its JSON lead with
    the function the step spends its time in."""

    args = ["--steps", "0", "--hot", "numpy", "--hot-ms", "30", "--install"]
    job = hookutil.start_job(env, tmp_path, args, False)
    try:

        def named() -> dict | None:  # type: ignore[type-arg]
            out = hookutil.gputui(env, "attach", str(job.pid), "--once", "--json", timeout=120)
            assert out.returncode == 0, out.stderr
            doc = json.loads(out.stdout)
            prof = doc["python_profile"]
            if prof is None or not prof["functions"]:
                return None
            return doc  # type: ignore[no-any-return]

        doc = hookutil.wait_for(named, 90, "a Python profile in attach --once --json")
        profile = PythonProfile.from_wire(doc["python_profile"])
        top = profile.top(1)[0]
        assert top.function == "hot_numpy" and profile.share(top.time_s) > 0.5
        text = hookutil.gputui(env, "attach", str(job.pid), "--once", timeout=120).stdout
        section = text[text.index("Python on the training thread") :]
        rows = section.splitlines()
        head = next(i for i, line in enumerate(rows) if line.split()[:2] == ["time", "self"])
        first_row = rows[head + 1]
        assert "hot_numpy" in first_row and "train_cpu.py" in first_row
    finally:
        job.stop()


def once_json(env: dict[str, str], pid: int, *extra: str) -> dict:  # type: ignore[type-arg]
    out = hookutil.gputui(env, "attach", str(pid), "--once", "--json", *extra, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def finding_of(env: dict[str, str], pid: int, rule: str) -> dict | None:  # type: ignore[type-arg]
    """``rule``'s finding in ``attach --once --json`` (None until it speaks)."""
    return next((f for f in once_json(env, pid)["findings"] if f["rule"] == rule), None)


def sampled_enough(env: dict[str, str], pid: int, *extra: str) -> dict | None:  # type: ignore[type-arg]
    """``attach --once --json`` once the analyzer has its minimum of ordinary
    steps and the profile enough samples for its shares (None before)."""
    doc = once_json(env, pid, *extra)
    profile = doc["python_profile"]
    if doc["analysis_notes"] and any("waits for" in n for n in doc["analysis_notes"]):
        return None
    return doc if profile is not None and profile["samples"] >= 2 * MIN_SAMPLES else None


def test_a_step_spent_in_numpy_gets_the_python_finding_first_without_a_capture(
    env: dict[str, str], tmp_path: Path
) -> None:
    args = ["--steps", "0", "--hot", "numpy", "--hot-ms", "30", "--install"]
    job = hookutil.start_job(env, tmp_path, args, False)
    try:
        doc = hookutil.wait_for(
            lambda: sampled_enough(env, job.pid, "--no-capture"), 120, "the sampler's shares"
        )
        first = doc["findings"][0]
        assert first["rule"] == "cpu.python", [f["rule"] for f in doc["findings"]]
        assert first["severity"] == "crit" and first["impact_pct"] > 50
        assert "sort (fromnumeric.py:" in first["evidence"]
        assert "called from hot_numpy (train_cpu.py:" in first["evidence"]
        assert "hot_numpy" in first["fix"]
        # the account tells that time apart from the rest, labelled as the sampler's
        buckets = {b["bucket"]: b for b in doc["live_account"]["buckets"]}
        assert buckets["python"]["source"] == "the Python sampler"
        assert buckets["python"]["share"] > 0.5
    finally:
        job.stop()


def test_a_step_that_sleeps_is_told_it_waits_not_computes(
    env: dict[str, str], tmp_path: Path
) -> None:
    """A step that spends its time in time.sleep (as in blocking I/O) holds
    Python outside torch as a busy step does, but its training thread is off
    the CPU: the sampler reads the thread's own CPU clock, and the finding
    says it waits, and not to make the Python faster.  The control, the same
    job busy in pure Python, is on the CPU."""
    shares = {}
    for hot in ("sleep", "python"):
        args = ["--steps", "0", "--hot", hot, "--hot-ms", "30", "--install"]
        job = hookutil.start_job(env, tmp_path, args, False)
        try:
            doc = hookutil.wait_for(
                lambda pid=job.pid: sampled_enough(env, pid, "--no-capture"),
                120,
                "the sampler's shares",
            )
            first = doc["findings"][0]
            assert first["rule"] == "cpu.python", [f["rule"] for f in doc["findings"]]
            assert f"hot_{hot} (train_cpu.py:" in first["fix"]
            profile = doc["python_profile"]
            top = next(f for f in profile["functions"] if f["function"] == f"hot_{hot}")
            shares[hot] = top.get("off_cpu_s", 0.0) / max(top["self_s"], top["site_s"])
            waits = "waits there off the CPU" in first["fix"]
            assert waits == (hot == "sleep"), first["fix"]
            assert ("the training thread was off the CPU" in first["evidence"]) == waits
        finally:
            job.stop()
    assert shares["sleep"] > 0.8 > 0.2 > shares["python"], shares


@pytest.mark.parametrize("capture", [False, True], ids=["sampler", "sampler-and-capture"])
def test_torchs_own_code_is_no_python_outside_torch(
    env: dict[str, str], tmp_path: Path, capture: bool
) -> None:
    """A job whose Python is three lines (its outputs kept in a list): the
    step is torch's module calls, autograd engine and per-parameter Adam.  A
    capture's account calls much of it host time outside torch ops (before
    the sampler bounded it, the Python finding fired on it, naming the loop's
    line at 100%); the sampler finds it in torch's own code."""
    job = hookutil.start_job(env, tmp_path, ["--install"], False, job=KEEP_OUTPUTS)
    try:
        hookutil.wait_for(lambda: sampled_enough(env, job.pid), 120, "the sampler's shares")
        doc = once_json(env, job.pid, *(["--capture", "5"] if capture else ["--no-capture"]))
        profile = PythonProfile.from_wire(doc["python_profile"])
        assert profile.outside_phases_s is not None
        assert profile.share(profile.outside_s or 0.0) < 0.1, profile.outside_phases_s
        torch_rows = [f for f in profile.top_self(3)]
        assert all(f.kind == "torch" for f in torch_rows), [
            (f.function, f.kind) for f in torch_rows
        ]
        assert "cpu.python" not in [f["rule"] for f in doc["findings"]], doc["findings"]
        if capture:
            assert doc["capture"] is not None and doc["capture"]["trace_metrics"]["account"]
    finally:
        job.stop()
