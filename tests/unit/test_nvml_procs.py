"""A device's processes read after read: values kept while NVML reports the
same, made anew where it does not, and always what processes_of makes."""

from __future__ import annotations

from gputui.collectors.nvml_procs import DeviceProcesses, processes_of


def test_the_same_lists_give_the_same_values_and_a_change_a_new_one() -> None:
    reader = DeviceProcesses()
    compute = {10: 2**30, 11: 2**31}
    util = {10: (50.0, 20.0)}
    first = reader.read(dict(compute), {}, util, 0, "GPU-0")
    again = reader.read(dict(compute), {}, util, 0, "GPU-0")
    assert [a is b for a, b in zip(first, again, strict=True)] == [True, True]
    # new utilization samples with the same numbers: the same values still
    resampled = reader.read(dict(compute), {}, {10: (50.0, 20.0)}, 0, "GPU-0")
    assert [a is b for a, b in zip(first, resampled, strict=True)] == [True, True]
    # one process's memory moved, one process came
    grown = reader.read({10: 2**30, 11: 2**32, 12: 5}, {12: 5}, util, 0, "GPU-0")
    assert grown[0] is first[0] and grown[1] is not first[1]
    expected = processes_of({10: 2**30, 11: 2**32, 12: 5}, {12: 5}, util, 0, "GPU-0")
    assert grown == expected
    assert grown[2].type == "compute+graphics"
    # another device index or UUID: new values
    moved = reader.read({10: 2**30, 11: 2**32, 12: 5}, {12: 5}, util, 1, "GPU-1")
    assert all(p.gpu_index == 1 and p.gpu_uuid == "GPU-1" for p in moved)
    assert reader.read({}, {}, None, 1, "GPU-1") == []
