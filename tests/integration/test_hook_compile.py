"""torch.compile: step times stay right, and the data says phases got coarser."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

import gputui.hook  # noqa: E402
from tests.helpers import hookutil  # noqa: E402


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


@pytest.mark.slow
@pytest.mark.parametrize("how", ["module.compile", "torch.compile"])
def test_compiling_a_model_after_its_first_steps(hook: gputui.hook.Hook, how: str) -> None:
    """The root found in the first steps is on the short call route; compiling
    it later keeps the step count, and the data says the phases got coarser
    (the forward is inside the compiled code now)."""
    from gputui.hook import _roots

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 16), torch.randn(8, 1)

    def train(call: object, steps: int) -> None:
        for _ in range(steps):
            torch.nn.functional.mse_loss(call(x), y).backward()  # type: ignore[operator]
            opt.step()
            opt.zero_grad()

    dynamo = importlib.import_module("torch._dynamo")
    dynamo.reset()
    importlib.import_module("torch._dynamo.utils").counters.clear()  # earlier tests' graphs
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
    train(call, 3)
    hookutil.wait_steps(hook, 9)
    assert all(r["wall"] > 0 for r in server.ring.last(9))
    status = hook.status()
    assert status["phases_coarse"] is True
    assert any("torch.compile" in reason for reason in status["coarse_reasons"])
