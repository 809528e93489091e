"""SampleAhead: the monitor's first live snapshot, taken while the UI starts."""

from __future__ import annotations

import threading
import time

import pytest

from gputui.collectors.source import SampleAhead
from gputui.model import HostSnapshot, Snapshot


class FakeLive:
    label = "live"
    is_recording = False
    natural_interval_s = None

    def __init__(self, fail_first: bool = False) -> None:
        self.opened_at = time.monotonic()
        self.calls: list[str] = []
        self.closed = False
        self.fail_first = fail_first

    def sample(self) -> Snapshot:
        self.calls.append(threading.current_thread().name)
        if self.fail_first and len(self.calls) == 1:
            raise RuntimeError("nvml went away")
        return Snapshot(timestamp_s=float(len(self.calls)), host=HostSnapshot())

    def close(self) -> None:
        self.closed = True


def test_first_sample_is_taken_on_a_thread_then_samples_pass_through() -> None:
    live = FakeLive()
    ahead = SampleAhead(live, rate_window_s=0.01)
    assert ahead.label == "live" and ahead.is_recording is False
    assert ahead.opened_at == live.opened_at  # optional attributes read through
    first = ahead.sample()
    assert first.timestamp_s == 1.0
    assert first.sample_latency_ms is not None
    assert live.calls == ["gputui-first-sample"]
    assert ahead.sample().timestamp_s == 2.0
    assert live.calls[1] == threading.current_thread().name
    ahead.close()
    assert live.closed


def test_an_error_in_the_first_sample_reaches_the_caller_once() -> None:
    ahead = SampleAhead(FakeLive(fail_first=True))
    with pytest.raises(RuntimeError, match="nvml went away"):
        ahead.sample()
    assert ahead.sample().timestamp_s == 2.0
