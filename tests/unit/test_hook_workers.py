"""DataLoader workers in the hook: a forked worker samples itself and writes its
profile to a private file; the training process reads, merges and cleans them
up, and says why there are none.  (A real DataLoader with forked and spawned
workers: tests/integration/test_hook_sampler.py.)"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputui.hook import _workers
from gputui.hook._workers import MAX_AGE_S, WorkerProfiles, merge, worker_dir
from gputui.protocol import paths
from gputui.protocol.profile import PathFrame, ProfileFunction, PythonProfile
from tests.helpers.hookutil import wait_for


@pytest.fixture
def sock_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "sock"
    path.mkdir(mode=0o700)
    monkeypatch.setenv(paths.ENV_SOCKET_DIR, str(path))
    yield path


def worker(fn: str, seconds: float, sampled: float, frames: tuple[PathFrame, ...]) -> PythonProfile:
    return PythonProfile(
        t=100.0,
        window_s=30.0,
        sampled_s=sampled,
        samples=int(sampled * 100),
        functions=(
            ProfileFunction(
                "/p/data.py",
                fn,
                "user",
                5,
                1,
                seconds,
                seconds,
                {},
                seconds,
                {},
                path=tuple(range(len(frames))),
            ),
            ProfileFunction(
                "/lib/queues.py", "get", "lib", 9, 1, sampled - seconds, sampled - seconds
            ),
        ),
        frames=frames,
    )


def test_merge_sums_the_workers_time_and_keeps_the_heaviest_path() -> None:
    loop = PathFrame("/t/worker.py", "_worker_loop", 300, "torch")
    a = worker("augment", 8.0, 10.0, (loop, PathFrame("/p/data.py", "Data.__getitem__", 20)))
    b = worker("augment", 6.0, 10.0, (loop,))
    merged = merge([a, b, PythonProfile()])
    assert merged is not None and merged.sampled_s == 20.0 and merged.samples == 2000
    top = merged.top(1)[0]
    assert top.function == "augment" and merged.share(top.time_s) == pytest.approx(0.7)
    # the path of the worker where it took the most time, re-indexed into the merged table
    assert [x.function for x in merged.path_of(top)] == ["_worker_loop", "Data.__getitem__"]
    assert merged.top(2)[1].function == "get" and merged.top(2)[1].self_s == pytest.approx(6.0)
    assert merge([]) is None and merge([PythonProfile()]) is None


def test_merge_sums_the_time_outside_torch_where_every_worker_split_it() -> None:
    loop = PathFrame("/t/worker.py", "_worker_loop", 300, "torch")
    a = worker("augment", 8.0, 10.0, (loop,))
    b = worker("augment", 6.0, 10.0, (loop,))
    split_a = dataclasses.replace(
        a,
        functions=tuple(dataclasses.replace(f, outside_s=f.self_s) for f in a.functions),
        outside_s=8.0,
        outside_phases_s={"worker": 8.0},
    )
    split_b = dataclasses.replace(b, outside_s=6.0, outside_phases_s={"worker": 6.0})
    merged = merge([split_a, split_b])
    assert merged is not None and merged.outside_phases_s == {"worker": 14.0}
    assert merged.outside_s == 14.0
    assert [f.outside_s for f in merged.functions if f.function == "augment"] == [8.0]
    # an older worker's hook did not split it: the merge says nothing of it
    unsplit = merge([split_a, b])
    assert unsplit is not None and unsplit.outside_phases_s is None
    assert unsplit.outside_s is None


def test_notes_say_why_no_worker_is_sampled(monkeypatch: pytest.MonkeyPatch) -> None:
    w = WorkerProfiles()
    assert w.note(None, 0) == "no DataLoader workers: no DataLoader iterated yet"
    assert "num_workers=0" in (w.note((0, False, False, None), 0) or "")
    loader = (2, False, False, 2)
    assert w.note(loader, 2) is None
    monkeypatch.setattr(_workers, "start_method", lambda: "spawn")
    assert "started with spawn, without gputui" in (w.note(loader, 0) or "")
    monkeypatch.setattr(_workers, "start_method", lambda: "fork")
    w.missing = "this torch has no DataLoader worker loop to hook"
    assert w.note(loader, 0) == "DataLoader workers not hooked: " + w.missing
    w.installed = True
    assert (
        w.note(loader, 0)
        == "no samples from the DataLoader's 2 workers yet (each writes every 5 s)"
    )
    monkeypatch.setenv("GPUTUI_SAMPLER", "0")
    assert "sampler is off" in (w.note(loader, 0) or "")


def test_the_worker_loop_is_wrapped_under_its_own_name_and_unwrapped() -> None:
    torch_worker = pytest.importorskip("torch.utils.data._utils.worker")
    original = torch_worker._worker_loop
    w = WorkerProfiles()
    w.install()
    try:
        wrapped = torch_worker._worker_loop
        assert wrapped is not original and w.installed
        # a spawned worker's target is pickled by this name: torch's own there
        assert (wrapped.__module__, wrapped.__qualname__) == (
            original.__module__,
            original.__qualname__,
        )
        WorkerProfiles().install()  # a second hook does not wrap it again
        assert torch_worker._worker_loop is wrapped
    finally:
        w.uninstall()
    assert torch_worker._worker_loop is original


def test_only_a_forked_child_of_the_hooked_process_samples_itself(sock_dir: Path) -> None:
    w = WorkerProfiles()
    w.start_in_worker()  # the hooked process itself: nothing
    assert w.sampler is None
    w.after_fork_in_child(parent=os.getpid())  # a grandchild: its parent is not the hook's
    w.start_in_worker()
    assert w.sampler is None


def test_a_worker_writes_its_profile_and_the_training_process_reads_it(
    sock_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As in a forked worker: this process plays the worker of its parent
    (the worker's thread here is a thread of this test)."""
    parent = os.getppid()
    monkeypatch.setattr(_workers, "PERIOD_S", 0.2)
    stop = threading.Event()
    child = WorkerProfiles()
    child.after_fork_in_child(parent)

    def worker_main() -> None:
        child.start_in_worker()  # samples this thread
        while not stop.is_set():
            sum(i * i for i in range(2000))

    thread = threading.Thread(target=worker_main, daemon=True)
    thread.start()
    reader = WorkerProfiles()
    reader.pid = parent
    try:
        found = wait_for(lambda: reader.collect(), 30, "the worker's file")
    finally:
        stop.set()
        thread.join(10)
        if child.sampler is not None:
            child.sampler.stop()
    directory = Path(worker_dir(parent))
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    (file,) = directory.glob("*.json")
    assert file.name == f"{os.getpid()}.json" and stat.S_IMODE(file.stat().st_mode) == 0o600
    assert any(f.function.endswith("worker_main") for f in found[0].functions)
    # stale and damaged files are left out; stale ones removed
    (directory / "123.json").write_text("{not json")
    old = time.time() - MAX_AGE_S - 5
    os.utime(file, (old, old))
    assert reader.collect() == []
    assert not file.exists() and (directory / "123.json").exists()
    reader.remove_dir()
    assert not directory.exists()


def test_a_worker_writes_its_profile_when_its_loop_returns(
    sock_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker of a short epoch (its loop returns long before ``PERIOD_S``)
    is seen: the wrapper of the loop has the sampler write once more."""
    torch_worker = pytest.importorskip("torch.utils.data._utils.worker")
    parent = os.getppid()
    monkeypatch.setattr(_workers, "PERIOD_S", 3600.0)

    def loop(until: float) -> None:  # stands in for torch's worker loop
        while time.perf_counter() < until:
            sum(i * i for i in range(2000))

    monkeypatch.setattr(torch_worker, "_worker_loop", loop)
    child = WorkerProfiles()
    child.install()
    child.after_fork_in_child(parent)
    reader = WorkerProfiles()
    reader.pid = parent
    try:
        thread = threading.Thread(
            target=torch_worker._worker_loop, args=(time.perf_counter() + 0.5,), daemon=True
        )
        thread.start()
        thread.join(60)
        assert child.sampler is None  # stopped with its loop
        found = reader.collect()
    finally:
        child.uninstall()
        reader.remove_dir()
    assert len(found) == 1 and found[0].samples > 0
    assert any(f.function.endswith("loop") for f in found[0].functions)


def test_a_worker_file_is_json_of_the_profile(sock_dir: Path) -> None:
    from gputui.hook._recorder import Recorder
    from gputui.hook._sampler import Sampler

    rec = Recorder()
    rec.thread = threading.get_ident()
    sampler = Sampler(rec, enabled=True)
    frame = __import__("sys")._getframe()
    with sampler.lock:
        for i in range(5):
            sampler._record(frame, 0.01, 1000.0 + i)
    path = sock_dir / "w.json"
    _workers.write_profile(sampler, str(path))
    profile = PythonProfile.from_wire(json.loads(path.read_text()))
    assert profile.samples == 5 and not (sock_dir / "w.json.tmp").exists()


def test_a_profile_reads_a_bounded_number_of_changed_files(sock_dir: Path) -> None:
    reader = WorkerProfiles()
    directory = Path(worker_dir(reader.pid))
    directory.mkdir(mode=0o700)
    loop = PathFrame("/t/worker.py", "_worker_loop", 300, "torch")
    data = json.dumps(worker("augment", 1.0, 2.0, (loop,)).to_wire())
    count = _workers.MAX_READS + 4
    for i in range(count):
        (directory / f"{1000 + i}.json").write_text(data)
    assert len(reader.collect()) == _workers.MAX_READS  # the rest wait for the next one
    assert len(reader.collect()) == count  # unchanged files are not read again
