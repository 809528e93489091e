"""CUDA graphs: step times stay right, captures never see a timing event, and the
status says that replayed work merges into the enclosing phase."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

import gputui.hook  # noqa: E402
from tests.helpers import hookutil  # noqa: E402


def test_graph_captures_and_replays_are_noted(
    hook: gputui.hook.Hook, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    class StandInGraph:  # what torch.cuda.CUDAGraph offers, without a GPU
        def capture_begin(self, *args: Any, **kwargs: Any) -> None:
            calls.append("begin")

        def replay(self) -> None:
            calls.append("replay")

    monkeypatch.setattr(torch.cuda, "CUDAGraph", StandInGraph)
    hook.torch_hooks._install_cuda_graphs()
    server = hook.server
    assert server is not None
    assert not any("CUDA graph" in r for r in hook.status()["coarse_reasons"])
    gputui.hook.step()  # step 0
    graph = StandInGraph()
    graph.capture_begin()
    gputui.hook.step()
    for _ in range(3):
        graph.replay()
        gputui.hook.step()
    assert calls == ["begin", "replay", "replay", "replay"]  # the originals still run
    hookutil.wait_steps(hook, 4)
    steps = server.ring.last(4)
    assert steps[0].get("flags", 0) & 4  # the step that captured
    assert not any(s.get("flags") for s in steps[1:])
    status = hook.status()
    assert status["phases_coarse"] is True
    assert any("1 captured, 3 replays" in r for r in status["coarse_reasons"])
    gputui.hook.uninstall()
    assert StandInGraph.__dict__["replay"].__name__ == "replay"  # put back


@pytest.mark.gpu
def test_a_real_cuda_graph_training_loop(hook: gputui.hook.Hook) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)
    ).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 64, device="cuda")
    y = torch.randn(32, 1, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream, as torch.cuda.graph wants
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):  # forward and backward captured; our hooks run
        torch.nn.functional.mse_loss(model(x), y).backward()
    for _ in range(10):
        graph.replay()
        opt.step()  # eager: each one still ends a step
    torch.cuda.synchronize()
    hookutil.wait_steps(hook, 13)
    server = hook.server
    assert server is not None
    assert all(r["wall"] > 0 for r in server.ring.last(13))
    status = hook.status()
    assert status["enabled"] and not status["errors"]
    assert any("1 captured, 10 replays" in r for r in status["coarse_reasons"])


def test_a_loop_that_only_replays_a_graph_gets_a_step_per_replay(
    hook: gputui.hook.Hook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An inference loop of ``static_x.copy_(...); graph.replay()`` calls no module
    and no optimizer: without this, no step ever ends and a capture waits for
    ever.  After 20 replays of one graph with nothing else in between, each
    replay of it ends a step; a second graph replayed beside it ends none."""

    class StandInGraph:
        def replay(self) -> None:
            pass

    monkeypatch.setattr(torch.cuda, "CUDAGraph", StandInGraph)
    hook.torch_hooks._install_cuda_graphs()
    server = hook.server
    assert server is not None
    lead, other = StandInGraph(), StandInGraph()
    for _ in range(19):
        lead.replay()
        other.replay()
    assert not hook.torch_hooks.graph_steps
    for _ in range(12):
        lead.replay()
        other.replay()
    # the 20th replay starts the first step; each of the 11 after it ends one
    hookutil.wait_steps(hook, 11)
    assert hook.torch_hooks.graph_steps
    assert any(
        "each replay of the first graph ends one" in r for r in hook.status()["coarse_reasons"]
    )
    gputui.hook.uninstall()


def test_replays_inside_forward_calls_leave_the_steps_to_them(
    hook: gputui.hook.Hook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch.compile's mode="reduce-overhead" replays inside the module's call:
    the forward calls make the steps, the replays none."""

    class StandInGraph:
        def replay(self) -> None:
            pass

    monkeypatch.setattr(torch.cuda, "CUDAGraph", StandInGraph)
    hook.torch_hooks._install_cuda_graphs()
    graph = StandInGraph()

    class Replays(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            graph.replay()
            return x

    model = Replays()
    with torch.no_grad():
        for _ in range(40):
            model(torch.zeros(1))
    assert not hook.torch_hooks.graph_steps
    gputui.hook.uninstall()
