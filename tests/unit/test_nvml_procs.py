"""A device's processes read after read: values kept while NVML reports the
same, made anew where it does not, and always what processes_of makes."""

from __future__ import annotations

from typing import Any

import pynvml  # type: ignore[import-untyped]
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gputui.nvml.collector import NvmlCollector
from gputui.nvml.fields import _unpacked, latest_process_util, memory_by_pid
from gputui.nvml.procs import DeviceProcesses, processes_of, raw_memory_by_pid
from tests.helpers.fake_nvml import UNKNOWN, FakeNvml, FakeProcess, h100


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


# -- the process lists, read from NVML's array ---------------------------------------
def _listed(fake: FakeNvml, kind: str) -> tuple[dict[int, int | None], dict[int, int | None]]:
    """A device's ``kind`` list read directly and through pynvml's wrapper."""
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    name = f"nvmlDeviceGet{kind}RunningProcesses_v3"
    raw = raw_memory_by_pid(fake, handle, name)
    return raw, memory_by_pid(getattr(fake, name)(handle))


def test_a_list_read_from_nvmls_array_is_what_pynvmls_wrapper_gives() -> None:
    processes = [
        FakeProcess(10, used_gpu_memory=3 * 2**30),
        FakeProcess(11, used_gpu_memory=None),  # NVML's "not available"
        FakeProcess(12, used_gpu_memory=2**40, kind="both"),
        FakeProcess(13, used_gpu_memory=5, kind="graphics"),
        # one process in two MIG instances: its entries sum
        FakeProcess(14, used_gpu_memory=7, gpu_instance_id=1),
        FakeProcess(14, used_gpu_memory=9, gpu_instance_id=2),
    ]
    fake = FakeNvml([h100(processes=processes)])
    raw, wrapped = _listed(fake, "Compute")
    assert raw == wrapped == {10: 3 * 2**30, 11: None, 12: 2**40, 14: 16}
    raw, wrapped = _listed(fake, "Graphics")
    assert raw == wrapped == {12: 2**40, 13: 5}
    assert _listed(FakeNvml([h100(processes=[])]), "Compute") == ({}, {})


class _NoPointer(FakeNvml):
    """A pynvml without the private lookup of NVML's functions."""

    def _nvmlGetFunctionPointer(self, name: str) -> Any:
        raise AttributeError(name)


def test_the_device_reader_reads_the_lists_directly_and_falls_back_to_the_wrapper() -> None:
    procs = [FakeProcess(10 + k, used_gpu_memory=k * 2**20) for k in range(30)]
    direct = FakeNvml([h100(processes=procs)])

    def wrapper(_handle: Any) -> Any:
        raise AssertionError("pynvml's wrapper called: the list was not read directly")

    direct.nvmlDeviceGetComputeRunningProcesses_v3 = wrapper  # type: ignore[method-assign]
    wrapped = _NoPointer([h100(processes=procs)])
    first = NvmlCollector(direct).sample().processes
    second = NvmlCollector(wrapped).sample().processes
    assert first == second and len(first) == 30
    assert wrapped.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 1


def test_a_list_whose_read_fails_says_so_as_pynvml_would() -> None:
    fake = FakeNvml([h100(processes=[FakeProcess(10)])])
    fake.fail("nvmlDeviceGetComputeRunningProcesses_v3", UNKNOWN, times=1)
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError) as raised:
        raw_memory_by_pid(fake, handle, "nvmlDeviceGetComputeRunningProcesses_v3")
    assert raised.value.value == UNKNOWN
    assert raw_memory_by_pid(fake, handle, "nvmlDeviceGetComputeRunningProcesses_v3") == {10: 2**30}


class _CountedCalls(FakeNvml):
    """Counts every call of the lists' C functions (the fake counts first calls)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.c_calls = 0

    def _nvmlGetFunctionPointer(self, name: str) -> Any:
        function = super()._nvmlGetFunctionPointer(name)

        def counted(*args: Any) -> int:
            self.c_calls += 1
            return function(*args)

        return counted


def test_a_list_read_again_takes_one_call_while_it_fits() -> None:
    gpu = h100(processes=[FakeProcess(10 + k, used_gpu_memory=k) for k in range(3)])
    fake = _CountedCalls([gpu])
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    name = "nvmlDeviceGetComputeRunningProcesses_v3"
    sizes: dict[str, int] = {}

    def read() -> tuple[dict[int, int | None], int]:
        before = fake.c_calls
        raw = raw_memory_by_pid(fake, handle, name, sizes)
        assert raw == memory_by_pid(getattr(fake, name)(handle))  # the wrapper: the control
        return raw, fake.c_calls - before

    assert read() == ({10: 0, 11: 1, 12: 2}, 2)  # the count, then the array
    assert read()[1] == 1  # the array of last time's size: enough
    gpu.processes.extend(FakeProcess(20 + k, used_gpu_memory=k) for k in range(40))
    raw, calls = read()  # outgrown: the array, the count, the array again
    assert len(raw) == 43 and calls == 3
    assert read()[1] == 1
    gpu.processes.clear()
    assert read() == ({}, 1)
    assert read() == ({}, 1)
    # without sizes: the two calls as before
    before = fake.c_calls
    gpu.processes.append(FakeProcess(30))
    assert raw_memory_by_pid(fake, handle, name) == {30: 2**30}
    assert fake.c_calls - before == 2


def test_the_device_reader_keeps_the_lists_sizes_between_samples() -> None:
    fake = _CountedCalls([h100(processes=[FakeProcess(10), FakeProcess(11, kind="graphics")])])
    collector = NvmlCollector(fake)
    collector.sample()
    before = fake.c_calls
    second = collector.sample()
    assert fake.c_calls - before == 2  # one call for each of the two lists
    assert sorted(p.pid for p in second.processes) == [10, 11]
