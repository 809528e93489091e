"""torch.compile: step times stay right, and the data says phases got coarser."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

import gputui.hook  # noqa: E402


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
    deadline = time.monotonic() + 10
    while server.steps_total < optimizer_steps and time.monotonic() < deadline:
        time.sleep(0.01)  # the I/O thread moves finished steps into its ring at 2-5 Hz
    assert server.steps_total == optimizer_steps
    walls = [rec["wall"] for rec in server.ring.last(optimizer_steps)]
    assert all(w > 0 for w in walls)
    status = hook.status(server)
    assert status["phases_coarse"] is True
    assert any("torch.compile" in reason for reason in status["coarse_reasons"])
