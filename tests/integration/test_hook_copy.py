"""A hooked model can still be deep-copied and pickled whole (EMA copies,
``torch.save(model)``), and the copies carry nothing of the hook."""

from __future__ import annotations

import copy
import io
import pickle

import pytest

torch = pytest.importorskip("torch")

import gputui.hook  # noqa: E402


def _train(model: torch.nn.Module, opt: torch.optim.Optimizer, steps: int) -> None:
    for _ in range(steps):
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
        opt.zero_grad()


@pytest.mark.parametrize("route", ["call", "hooks"])
def test_deepcopy_and_save_of_a_hooked_model(
    hook: gputui.hook.Hook, route: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gputui.hook import _roots, _torch_hooks

    if route == "hooks":  # the general route: forward hooks on the root
        monkeypatch.setattr(_torch_hooks._CallRoute, "install", lambda th, module: None)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    _train(model, opt, 3)
    assert hook.torch_hooks.roots
    if route == "hooks":
        assert model._forward_hooks and "_compiled_call_impl" not in vars(model)
    else:
        assert not model._forward_hooks
        assert type(vars(model)["_compiled_call_impl"]) is _roots._RootCall

    ema = copy.deepcopy(model)
    assert vars(ema).get("_compiled_call_impl") is None
    log = hook.recorder.log
    edges = len(log)
    out = ema(torch.randn(2, 8))  # the copy's hooks are inert no-ops
    assert out.shape == (2, 1)
    assert hook.recorder.log is log and len(log) == edges  # the copy is not measured
    model(torch.randn(2, 8))
    assert log[edges + 1 :: 2] == ["forward", "\x00forward"]  # the original is

    buf = io.BytesIO()
    torch.save(model, buf)
    data = buf.getvalue()
    assert b"gputui" not in data  # loads where gputui is not installed
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert loaded(torch.randn(2, 8)).shape == (2, 1)
    assert b"gputui" not in pickle.dumps(model)

    # The original is still measured after all that.
    before = hook.recorder.index
    _train(model, opt, 2)
    assert hook.recorder.index == before + 2
