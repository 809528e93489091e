"""Xid events on a real GPU: the collector registers for NVML's critical Xid
events and reads them with a zero timeout at every sample.  Marked ``gpu``:
skipped (by conftest) where NVML or a GPU is missing.  No Xid can be caused on
purpose: this checks the registration and the non-blocking read on the real
driver, and that no error is reported where none happened."""

from __future__ import annotations

import pytest

from gputui.nvml import xid_events
from gputui.nvml.collector import NvmlCollector
from gputui.nvml.startup import import_pynvml

pytestmark = pytest.mark.gpu


def test_the_real_driver_takes_the_registration_and_the_zero_timeout_read() -> None:
    collector = NvmlCollector()
    try:
        samples = [collector.sample() for _ in range(20)]
    finally:
        collector.close()
    devices = samples[-1].devices
    assert devices
    unwatched = collector.xid_unwatched
    for device in devices:
        assert device.xid_sources is not None
        # a data-center GPU reports Xid events to NVML; where it did not, say why
        assert "nvml" in device.xid_sources or device.index in unwatched or None in unwatched
    # nothing went wrong on the GPU during the test: no event was read from NVML
    assert all(not s.xids for s in samples)


def test_an_empty_event_set_answers_timeout_at_once() -> None:
    nvml = import_pynvml()
    nvml.nvmlInit()
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        supported = nvml.nvmlDeviceGetSupportedEventTypes(handle)
        if not supported & xid_events.XID_CRITICAL_ERROR:
            pytest.skip(f"GPU 0 reports no Xid events to NVML (event types {supported:#x})")
        event_set = nvml.nvmlEventSetCreate()
        try:
            nvml.nvmlDeviceRegisterEvents(handle, xid_events.XID_CRITICAL_ERROR, event_set)
            with pytest.raises(nvml.NVMLError) as raised:
                nvml.nvmlEventSetWait_v2(event_set, 0)
            assert raised.value.value == xid_events.TIMEOUT
        finally:
            nvml.nvmlEventSetFree(event_set)
    finally:
        nvml.nvmlShutdown()
