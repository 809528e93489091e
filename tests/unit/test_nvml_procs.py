"""A device's processes read after read: values kept while NVML reports the
same, made anew where it does not, and always what processes_of makes."""

from __future__ import annotations

from typing import Any

import pynvml  # type: ignore[import-untyped]
from hypothesis import given
from hypothesis import strategies as st

from gputui.collectors.nvml_fields import _unpacked, latest_process_util
from gputui.collectors.nvml_procs import DeviceProcesses, processes_of
from tests.helpers.fake_nvml import FakeNvml, FakeProcess, h100


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


# -- process utilization samples, as pynvml returns them -------------------------------
_SAMPLE = pynvml.c_nvmlProcessUtilizationSample_t


def _array(rows: list[tuple[int, int, int, int]], spare: int = 0) -> Any:
    """An array NVML filled (``rows``: pid, timeStamp, smUtil, memUtil), with
    ``spare`` elements after them, as pynvml allocates a few more than asked."""
    array = (_SAMPLE * (len(rows) + spare))()
    for i, (pid, stamp, sm, mem) in enumerate(rows):
        sample = array[i]
        sample.pid, sample.timeStamp, sample.smUtil, sample.memUtil = pid, stamp, sm, mem
        sample.encUtil, sample.decUtil = 7, 9
    return array


class _Plain:
    """A sample as a plain object: read field by field."""

    def __init__(self, sample: Any) -> None:
        self.pid, self.timeStamp = sample.pid, sample.timeStamp
        self.smUtil, self.memUtil = sample.smUtil, sample.memUtil


_ROWS = st.lists(
    st.tuples(
        st.integers(1, 40),
        st.integers(0, 2**64 - 1),
        st.integers(0, 2**32 - 1),
        st.integers(0, 100),
    ),
    min_size=1,
    max_size=60,
)


@given(rows=_ROWS, spare=st.integers(0, 3))
def test_a_slice_of_samples_is_read_in_one_pass_as_field_by_field(
    rows: list[tuple[int, int, int, int]], spare: int
) -> None:
    array = _array(rows, spare)
    samples = array[0 : len(rows)]  # what pynvml's nvmlDeviceGetProcessUtilization returns
    assert list(_unpacked(samples) or ()) == rows
    expected = latest_process_util([_Plain(s) for s in samples])
    assert latest_process_util(samples) == expected
    # the pids and their newest samples, as a control written out here
    newest = max(stamp for _pid, stamp, _sm, _mem in rows)
    assert expected[1] == newest and set(expected[0]) == {pid for pid, *_ in rows}


@given(rows=_ROWS)
def test_samples_that_are_not_one_run_of_an_array_are_read_field_by_field(
    rows: list[tuple[int, int, int, int]],
) -> None:
    array = _array([*rows, (99, 0, 1, 1)])
    picked = [array[i] for i in range(0, len(rows) + 1, 2)]  # every other one
    others = [_SAMPLE.from_buffer_copy(bytes(s)) for s in array[0 : len(rows)]]  # copies
    for samples in (picked, others, [_Plain(s) for s in array[0 : len(rows)]]):
        if len(samples) > 1 or samples is others:
            assert _unpacked(samples) is None
        assert latest_process_util(samples) == latest_process_util([_Plain(s) for s in samples])


def test_the_fake_nvml_returns_samples_as_pynvml_does() -> None:
    # the benches' live monitor takes the path a real node takes
    fake = FakeNvml([h100(processes=[FakeProcess(10, sm_util=30), FakeProcess(11, sm_util=5)])])
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    samples = fake.nvmlDeviceGetProcessUtilization(handle, 0)
    assert [row[0] for row in _unpacked(samples) or ()] == [10, 11]
