"""The share of a step's kernel launches made inside torch.compile's ranges
(:func:`gputui.trace.markers.compiled_launch_share`): by thread and by time,
the GPU's mirror of a range left out."""

from __future__ import annotations

from gputui.trace.markers import compiled_launch_share, compiled_names
from gputui.trace.timeline import ANNOTATION, GPU_ANNOTATION, OP, RUNTIME, HostRange, RuntimeCall

REGION = "Torch-Compiled Region: 0/1"


def launch(at: int, tid: int = 1) -> RuntimeCall:
    return RuntimeCall(at, at + 5, "cudaLaunchKernel", tid, at, -1, RUNTIME)


def test_launches_inside_a_region_on_its_thread_count() -> None:
    ranges = [
        HostRange(100, 200, REGION, 1, OP, 1),
        HostRange(150, 300, "CompiledFunction", 1, OP, 2),  # overlaps: merged
        HostRange(0, 1_000, REGION, 7, GPU_ANNOTATION, 3),  # the GPU's mirror
        HostRange(0, 1_000, "ProfilerStep#1", 1, ANNOTATION, 4),
    ]
    launches = [
        launch(50),  # before
        launch(100),  # at the start: inside
        launch(250),  # in the second range
        launch(299),
        launch(300),  # at the end: outside
        launch(120, tid=2),  # another thread
        launch(500, tid=7),  # the mirror's "thread" (a stream)
    ]
    launches.sort()
    names = compiled_names(r.name for r in ranges)
    assert names == {REGION, "CompiledFunction"}
    assert compiled_launch_share(ranges, launches, names) == 3 / 7


def test_nothing_compiled_or_nothing_launched_says_nothing() -> None:
    ranges = [HostRange(0, 10, "aten::mm", 1, OP, 1)]
    assert compiled_names(r.name for r in ranges) == set()
    assert compiled_launch_share(ranges, [launch(5)], set()) is None
    assert compiled_launch_share([HostRange(0, 10, REGION, 1, OP, 1)], [], {REGION}) is None
