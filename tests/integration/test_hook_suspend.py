"""Suspending the torch hook points (used by the overhead benchmark) takes every
one of them out and puts them back as detection left them."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import gputui.hook  # noqa: E402
from tests.helpers import hookutil  # noqa: E402


def test_suspend_and_resume(hook: gputui.hook.Hook) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=4)
    batches = iter(loader)
    th = hook.torch_hooks
    original_next, original_backward = th._orig_next, th._orig_backward
    assert original_next is not None and original_backward is not None

    def step() -> None:
        x, y = next(batches)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()

    for _ in range(3):
        step()
    assert not th.detecting and len(th.root_refs) == 1
    hooked_next = type(batches).__next__
    assert hooked_next is not original_next
    index = hook.recorder.index

    th.suspend()
    assert type(batches).__next__ is original_next
    assert torch.autograd._engine_run_backward is original_backward
    assert not model._forward_hooks and not model._forward_pre_hooks
    assert "_compiled_call_impl" not in vars(model)
    for _ in range(3):
        step()
    assert hook.recorder.index == index  # nothing was seen

    th.resume()
    assert vars(model)["_compiled_call_impl"] is not None  # the root's call route
    for _ in range(3):
        step()
    assert hook.recorder.index == index + 3
    last = hookutil.finished_steps(hook)[-1]
    assert last["i"] == index + 2
    assert {"data", "forward", "backward", "optimizer"} <= set(last["phases"])

    gputui.hook.uninstall()
    assert type(batches).__next__ is original_next
    assert torch.autograd._engine_run_backward is original_backward
    assert not model._forward_hooks and "_compiled_call_impl" not in vars(model)
