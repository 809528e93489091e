"""torch.compile: step times stay right, and the data says phases got coarser."""

from __future__ import annotations

import importlib
import json
import subprocess
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import gputui.hook  # noqa: E402
from gputui.protocol.messages import StepFlag  # noqa: E402
from tests.helpers import hookutil  # noqa: E402
from tests.helpers.deadlines import RUN_S  # noqa: E402


@pytest.mark.slow
def test_compiled_model_keeps_step_count_and_flags_coarse_phases(hook: gputui.hook.Hook) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    compiled = torch.compile(model, backend="aot_eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 16), torch.randn(8, 1)
    optimizer_steps = 6
    for _ in range(optimizer_steps):
        loss = torch.nn.functional.mse_loss(compiled(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
    server = hook.server
    assert server is not None
    # Step 0 starts at the first hook point (the forward); each optimizer step ends one.
    hookutil.wait_steps(hook, optimizer_steps)
    walls = [rec["wall"] for rec in server.ring.last(optimizer_steps)]
    assert all(w > 0 for w in walls)
    status = hook.status()
    assert status["phases_coarse"] is True
    assert any("torch.compile" in reason for reason in status["coarse_reasons"])


class Mlp(torch.nn.Module):
    """A model of the job's own: dynamo compiles its forward (it skips frames
    of torch.nn's files, so a bare ``nn.Sequential`` has nothing to compile)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 16), torch.nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x).relu())  # type: ignore[no-any-return]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["module.compile", "torch.compile"])
def test_compiling_a_model_after_its_first_steps(hook: gputui.hook.Hook, how: str) -> None:
    """The root found in the first steps is on the short call route; compiling
    it later keeps the step count and the forward phase, the data says the
    phases got coarser, and only the steps that compiled are compile steps
    (the hook's own code is never compiled: compiled, it would flag them all)."""
    from gputui.hook import _roots

    torch.manual_seed(0)
    model = Mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 16), torch.randn(8, 1)

    def train(call: object, steps: int) -> None:
        for _ in range(steps):
            torch.nn.functional.mse_loss(call(x), y).backward()  # type: ignore[operator]
            opt.step()
            opt.zero_grad()

    dynamo = importlib.import_module("torch._dynamo")
    dynamo.reset()
    utils = importlib.import_module("torch._dynamo.utils")
    utils.counters.clear()  # earlier tests' graphs
    train(model, 3)
    assert type(vars(model)["_compiled_call_impl"]) is _roots._RootCall
    server = hook.server
    assert server is not None
    assert hook.status()["phases_coarse"] is False  # eager so far
    if how == "module.compile":
        model.compile(backend="aot_eager")  # replaces the call route
        call: object = model
    else:
        call = torch.compile(model, backend="aot_eager")
    train(call, 3)
    hook.torch_hooks.recheck_roots()  # what the I/O thread does twice a second
    if how == "module.compile":
        assert model._forward_hooks and model._forward_pre_hooks  # the general route
    train(call, 10)
    hookutil.wait_steps(hook, 16)
    steps = server.ring.last(16)
    assert all(r["wall"] > 0 for r in steps)
    status = hook.status()
    assert status["phases_coarse"] is True
    assert any("torch.compile" in reason for reason in status["coarse_reasons"])
    # one frame compiled (the model's forward), none of the hook's
    assert dict(utils.counters["frames"]).get("total") == 1, dict(utils.counters["frames"])
    flagged = [r["i"] for r in steps if r.get("flags", 0) & StepFlag.COMPILE]
    assert 1 <= len(flagged) <= 2, flagged  # the first compiled step (and its backward)
    assert all(r["phases"].get("forward", 0) > 0 for r in steps[-5:])


# -- what torch.compile did, through attach --once -----------------------------------------
def _break_line() -> int:
    text = hookutil.JOB.read_text().splitlines()
    return next(i for i, line in enumerate(text, 1) if "# GRAPH BREAK" in line)


def _once(tmp_path: Path, *job_args: str) -> tuple[dict, str]:
    """attach --once --json and attach --once of the CPU job started with these
    arguments (under gputui run)."""
    with hookutil.isolated_dirs() as dirs:
        env = hookutil.make_env(*dirs)
        job = hookutil.start_job(env, tmp_path, ["--steps", "0", *job_args], via_run=True)
        try:
            out = hookutil.gputui(env, "attach", str(job.pid), "--once", "--json")
            text = hookutil.gputui(env, "attach", str(job.pid), "--once")
        finally:
            job.stop()
    assert out.returncode == 0, out.stderr
    assert text.returncode == 0, text.stderr
    return json.loads(out.stdout), text.stdout


@pytest.mark.slow
def test_a_graph_break_is_named_with_its_reason_and_line(tmp_path: Path) -> None:
    # 30 steps, then the job waits: the compiling steps are in the statistics' window
    # however long the attach takes to start (an endless job ran past them under load)
    report, text = _once(tmp_path, "--compile", "--steps", "30")
    compiled = report["compile"]
    assert compiled is not None and report["compile_note"] is None
    assert compiled["graph_breaks"] >= 1 and compiled["compile_s"] > 0
    top = compiled["breaks"][0]
    assert "print" in top["reason"]
    assert top["file"].endswith("train_cpu.py") and top["line"] == _break_line()
    assert top["function"] == "forward"
    # the steps that compiled are their own phase: left out of the statistics
    assert compiled["compile_steps"] >= 1
    assert report["stats"]["excluded_compile"] >= 1
    (found,) = [f for f in report["findings"] if f["rule"] == "compile.breaks_recompiles"]
    assert f"train_cpu.py:{_break_line()}" in found["evidence"]
    assert "print" in found["fix"]
    assert f"train_cpu.py:{_break_line()}" in text
    assert "graph break x" in text


@pytest.mark.slow
def test_a_job_without_compile_says_nothing_about_it(tmp_path: Path) -> None:
    """The job's optimizer imports torch._dynamo, and nothing is compiled."""
    report, text = _once(tmp_path)
    assert report["compile"] is None, report["compile"]
    assert report["compile_note"] is None, report["compile_note"]
    assert report["stats"]["excluded_compile"] == 0, report["stats"]
    assert not [f for f in report["findings"] if f["rule"].startswith("compile.")]
    # (other findings' fixes may advise torch.compile: only the report's lines count)
    reported = [line for line in text.splitlines() if line.startswith("torch.compile")]
    assert reported == [], text
    assert "graph break" not in text, text


@pytest.mark.slow
def test_a_viewer_older_than_the_compile_report_still_attaches(
    hook: gputui.hook.Hook, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A viewer of the release before the compile report: to it the message is
    an unknown type (ignored, as the protocol promises); a capture result's
    flop totals an unknown key."""
    import os

    from gputui import cli
    from gputui.client.hook import HookClient, Invalid
    from gputui.protocol import messages, wire
    from gputui.protocol.compile import CompileReport
    from gputui.protocol.schema import Synced

    class Printing(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.a(x)
            print(end="")
            return y.relu()

    model = Printing()
    compiled = torch.compile(model, backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(4):
        compiled(torch.randn(4, 8)).sum().backward()
        opt.step()
        opt.zero_grad()
    hookutil.wait_steps(hook, 4)
    monkeypatch.delitem(wire._DECODERS, messages.COMPILE)
    client = HookClient.connect(os.getpid())
    raw: list[str] = []
    events: list[object] = []
    try:
        client.subscribe(history=10)
        client.start(on_raw=lambda msg: raw.append(str(msg.get("type"))))
        for event in client.events(timeout=10):
            events.append(event)
            if isinstance(event, Synced):
                break
    finally:
        client.close()
    assert messages.COMPILE in raw  # sent, and ignored
    assert not any(isinstance(e, (Invalid, CompileReport)) for e in events)
    assert cli.main(["attach", str(os.getpid()), "--once", "--timeout", "10"]) == 0
    out = capsys.readouterr().out
    assert "invalid" not in out and "steps" in out


# -- the hook's own effect on compilation, against a control run without it --------------
COMPILE_JOB = hookutil.REPO / "tests" / "jobs" / "compile_job.py"


def _compile_job(tmp_path: Path, name: str, *args: str) -> dict:
    """What dynamo did in tests/jobs/compile_job.py run with these arguments."""
    out = tmp_path / f"{name}.json"
    with hookutil.isolated_dirs() as dirs:
        done = subprocess.run(
            [hookutil.PY, str(COMPILE_JOB), "--out", str(out), *args],
            env=hookutil.make_env(*dirs),
            cwd=str(hookutil.REPO),
            capture_output=True,
            text=True,
            timeout=RUN_S,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text())


@pytest.mark.slow
@pytest.mark.parametrize(
    ("how", "eager_steps"),
    [("torch.compile", "0"), ("module.compile", "0"), ("function", "2")],
    ids=["torch.compile", "module.compile", "function-after-eager-steps"],
)
def test_the_hook_makes_dynamo_compile_nothing_more(
    tmp_path: Path, how: str, eager_steps: str
) -> None:
    """A model with a graph break, compiled before its first step (or called from
    a compiled function once the hook has found it as a root): under the hook
    dynamo compiles the same frames and graphs, breaks and recompiles as often,
    as in a control run without it (the hook's step detection ends, and its
    global module hooks go, before the first compile; its own code is never
    compiled as a frame, and a root's call route traced inside compiled code
    adds no break)."""
    args = ("--how", how, "--eager-steps", eager_steps)
    hooked = _compile_job(tmp_path, "hooked", "--install", *args)
    control = _compile_job(tmp_path, "control", *args)
    assert control["graph_breaks"] >= 1 and control["graphs"] >= 2  # the planted print
    for key in ("frames", "graphs", "graph_breaks", "recompiles"):
        assert hooked[key] == control[key], (key, hooked, control)
    assert hooked["report"]["hook_recompiles"] == 0


def _line(marker: str) -> int:
    text = COMPILE_JOB.read_text().splitlines()
    return next(i for i, line in enumerate(text, 1) if marker in line)


@pytest.mark.slow
def test_an_item_break_is_named_with_its_reason_and_line(tmp_path: Path) -> None:
    """``.item()`` in a compiled forward: the compile report names the break,
    its file, function and line (the print break: through attach above)."""
    report = _compile_job(tmp_path, "item", "--install", "--break", "item", "--steps", "3")[
        "report"
    ]
    top = report["breaks"][0]
    assert "item" in top["reason"].lower(), top
    assert top["file"].endswith("compile_job.py") and top["function"] == "forward"
    assert top["line"] == _line("# ITEM BREAK")
    assert report["unavailable"] == []
