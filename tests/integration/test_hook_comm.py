"""Communication time in this process: torch.distributed with gloo and one rank,
DDP for real.  The comm phase appears, wrappers pass everything through (results,
errors, the user's own comm hook), and uninstalling puts torch back as it was."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from torch.nn.parallel import DistributedDataParallel  # noqa: E402

import gputui.hook  # noqa: E402
from gputui.hook._comm import close_comm  # noqa: E402
from gputui.hook._recorder import COMM, Recorder  # noqa: E402
from tests.helpers import hookutil  # noqa: E402
from tests.helpers.deadlines import WAIT_S  # noqa: E402

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed not built")


@pytest.fixture
def group(tmp_path: Path) -> Iterator[None]:
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def phases_of(hook: Any) -> list[dict[str, float]]:
    """Wall time per phase of every finished step after the first three (the
    root module is found in those)."""
    return [r["phases"] for r in hookutil.finished_steps(hook) if r["i"] >= 3]


def model_and_data() -> tuple[Any, Any, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    return model, torch.randn(32, 8), torch.randn(32, 1)


def train(model: Any, x: Any, y: Any, steps: int, each: Any = None) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        torch.nn.functional.mse_loss(model(x), y).backward()
        if each is not None:
            each()
        opt.step()
        opt.zero_grad()


def test_ddp_all_reduce_wait_is_the_comm_phase(hook: Any, group: None) -> None:
    model, x, y = model_and_data()
    ddp = DistributedDataParallel(model)
    assert hook.comm.info().ddp_models == 1 and hook.comm.info().collectives
    train(ddp, x, y, 12)
    steps = phases_of(hook)
    assert steps and all(COMM in s and s[COMM] > 0 for s in steps)
    assert all("backward" in s for s in steps)  # the rest of backward stays backward


def test_the_timed_all_reduce_gives_ddps_gradients(hook: Any, group: None) -> None:
    model, x, y = model_and_data()
    reference = [p.detach().clone() for p in model.parameters()]
    ddp = DistributedDataParallel(model)
    torch.nn.functional.mse_loss(ddp(x), y).backward()
    plain = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    with torch.no_grad():
        for p, ref in zip(plain.parameters(), reference, strict=True):
            p.copy_(ref)
    torch.nn.functional.mse_loss(plain(x), y).backward()
    for a, b in zip(model.parameters(), plain.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad)


def test_the_users_comm_hook_runs_under_ours(hook: Any, group: None) -> None:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    calls = []

    # No annotations: with postponed evaluation they are strings, which DDP's
    # check refuses (with gputui or without).
    def counting(state, bucket):  # type: ignore[no-untyped-def]
        calls.append(bucket.index())
        return default_hooks.allreduce_hook(state, bucket)

    model, x, y = model_and_data()
    ddp = DistributedDataParallel(model)
    ddp.register_comm_hook(None, counting)
    train(ddp, x, y, 5)
    assert len(calls) >= 5
    assert any(COMM in s for s in phases_of(hook))
    # A second registration is refused, as DDP refuses it without gputui.
    with pytest.raises(RuntimeError, match="only be called once"):
        ddp.register_comm_hook(None, counting)
    # DDP's own signature checks still apply.
    other = DistributedDataParallel(model_and_data()[0])

    def bad(state: Any, bucket: int) -> Any:
        return None

    with pytest.raises(ValueError, match="bucket annotation"):
        other.register_comm_hook(None, bad)


def test_a_builtin_comm_hook_is_run_by_its_python_twin(hook: Any, group: None) -> None:
    model, x, y = model_and_data()
    ddp = DistributedDataParallel(model)
    ddp._register_builtin_comm_hook(dist.BuiltinCommHookType.FP16_COMPRESS)
    train(ddp, x, y, 6)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert any(COMM in s for s in phases_of(hook))


def test_explicit_collectives_and_waits(hook: Any, group: None) -> None:
    model, x, y = model_and_data()
    t = torch.ones(4)

    def sync_then_async() -> None:
        dist.all_reduce(t)  # synchronous: timed
        dist.barrier()
        work = dist.all_reduce(t, async_op=True)  # launching: not timed
        work.wait()  # waiting: timed

    train(model, x, y, 8, sync_then_async)
    steps = phases_of(hook)
    assert steps and all(COMM in s for s in steps)
    assert torch.equal(t, torch.ones(4))  # one rank: the sum is the tensor
    # the same calls from another thread are not the training loop's phases
    before = len(hook.recorder.log)
    worker = threading.Thread(target=lambda: dist.all_reduce(torch.ones(2)))
    worker.start()
    worker.join(WAIT_S)
    assert not worker.is_alive()
    assert len(hook.recorder.log) == before


def test_errors_of_a_collective_reach_the_caller_unchanged(hook: Any, group: None) -> None:
    with pytest.raises((TypeError, RuntimeError, ValueError)):
        dist.all_reduce("not a tensor")  # type: ignore[arg-type]
    assert hook.recorder.enabled  # and the hook goes on


def test_uninstall_restores_torch(hook: Any) -> None:
    wrapped = dist.all_reduce
    assert getattr(wrapped, "_gputui_wrapped", False)
    assert getattr(DistributedDataParallel.__init__, "_gputui_wrapped", False)
    gputui.hook.uninstall()
    assert not getattr(dist.all_reduce, "_gputui_wrapped", False)
    assert not getattr(dist.distributed_c10d.all_reduce, "_gputui_wrapped", False)
    assert not getattr(DistributedDataParallel.__init__, "_gputui_wrapped", False)
    assert not getattr(dist.distributed_c10d.Work.wait, "_gputui_wrapped", False)
    gputui.hook.install()  # the fixture's teardown uninstalls again


def test_close_comm_attributes_only_what_followed_the_last_launch() -> None:
    clock = iter([5.0])
    rec = Recorder()
    rec.clock = lambda: next(clock)
    rec.started = True
    rec.log = [7, 1.0, 2.0, "backward"]
    rec.comm_since = 4.0
    close_comm(rec)
    assert rec.log[-4:] == [4.0, COMM, 5.0, "\x00" + COMM] and rec.comm_since == 0.0
    # a launch from before this backward began is not this backward's wait
    rec.log = [7, 1.0, 6.0, "backward"]
    rec.comm_since = 4.0
    clock = iter([7.0])
    close_comm(rec)
    assert rec.log == [7, 1.0, 6.0, "backward"] and rec.enabled
