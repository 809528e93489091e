"""Which GPUs have a compute process: the monitor asks at every sample, carrying
its counts over from the last list; the answer must be the one a plain count gives."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from gputui.analysis.rules import device
from gputui.snapshot.model import ProcessSnapshot, Snapshot

TYPES = ["compute", "graphics", "compute+graphics", "mps-compute"]


def plain(processes: tuple[ProcessSnapshot, ...]) -> set[int]:
    return {p.gpu_index for p in processes if "compute" in p.type}


def proc(pid: int, gpu: int, kind: str) -> ProcessSnapshot:
    return ProcessSnapshot(pid=pid, gpu_index=gpu, gpu_uuid=f"GPU-{gpu}", type=kind)


lists = st.lists(st.tuples(st.integers(0, 3), st.sampled_from(TYPES)), min_size=0, max_size=40)
# each step: (place, gpu, type) replacements, or a new list altogether
steps = st.lists(
    st.one_of(
        st.lists(
            st.tuples(st.integers(0, 39), st.integers(0, 3), st.sampled_from(TYPES)), max_size=12
        ),
        lists.map(lambda new: ("new", new)),
    ),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(first=lists, changes=steps)
def test_carried_counts_equal_a_plain_count(first: list, changes: list) -> None:
    pid = iter(range(1, 10_000))
    processes = tuple(proc(next(pid), g, t) for g, t in first)
    seen = [processes]
    for change in changes:
        if isinstance(change, tuple):  # a list of other length or other processes
            processes = tuple(proc(next(pid), g, t) for g, t in change[1])
        else:  # some places hold another process; the others the same objects
            out = list(processes)
            for at, g, t in change:
                if out:
                    out[at % len(out)] = proc(next(pid), g, t)
            processes = tuple(out)
        seen.append(processes)
    for processes in seen:
        snapshot = Snapshot(timestamp_s=0.0, processes=processes)
        assert device._computing(snapshot) == plain(processes)


def test_a_process_that_leaves_its_gpu_takes_the_gpu_off_the_set() -> None:
    a, b = proc(1, 0, "compute"), proc(2, 1, "compute")
    c = dataclasses.replace(b, type="graphics")  # GPU 1's one compute process is replaced
    many = tuple(proc(10 + i, 2, "graphics") for i in range(20))  # most places unchanged
    assert device._computing(Snapshot(timestamp_s=0.0, processes=(a, b, *many))) == {0, 1}
    assert device._computing(Snapshot(timestamp_s=1.0, processes=(a, c, *many))) == {0}
    assert device._computing(Snapshot(timestamp_s=2.0, processes=(a, b, *many))) == {0, 1}
