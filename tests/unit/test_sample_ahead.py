"""SampleAhead: the monitor's first live snapshot, taken while the UI starts."""

from __future__ import annotations

import threading
import time

import pytest

from gputui.host.in_view import InView
from gputui.snapshot.model import HostSnapshot, Snapshot
from gputui.sources.base import SnapshotSource
from gputui.sources.live import SampleAhead


class FakeLive(SnapshotSource):
    label = "live"

    def __init__(self, fail_first: bool = False) -> None:
        self.opened_at = time.monotonic()
        self.opened_on = threading.current_thread().name
        self.calls: list[str] = []
        self.times: list[float] = []
        self.closed = False
        self.fail_first = fail_first

    def sample(self) -> Snapshot:
        self.calls.append(threading.current_thread().name)
        self.times.append(time.monotonic())
        if self.fail_first and len(self.calls) == 1:
            raise RuntimeError("nvml went away")
        return Snapshot(timestamp_s=float(len(self.calls)), host=HostSnapshot())

    def close(self) -> None:
        self.closed = True


def test_first_sample_is_taken_on_a_thread_then_samples_pass_through() -> None:
    ahead = SampleAhead(FakeLive, rate_window_s=0.01)
    live = ahead.opened()
    assert isinstance(live, FakeLive)
    assert ahead.label == "live" and ahead.is_recording is False
    assert ahead.natural_interval_s is None
    first = ahead.sample()
    assert first.timestamp_s == 2.0
    assert first.sample_latency_ms is not None
    # a warm-up sample, then the first snapshot one rate window later
    assert live.calls == ["gputui-first-sample", "gputui-first-sample"]
    assert live.opened_on == "gputui-first-sample"
    assert ahead.sample().timestamp_s == 3.0
    assert live.calls[2] == threading.current_thread().name
    ahead.close()
    assert live.closed


def test_the_declared_capabilities_pass_through_and_nothing_else() -> None:
    class Capable(FakeLive):
        recorded_at_s = 12.5
        natural_interval_s = 2.0

        def use_view(self, in_view: InView) -> None:
            self.in_view = in_view

        def progress(self) -> None:
            self.calls.append("progress")

    ahead = SampleAhead(Capable)
    live = ahead.opened()
    assert isinstance(live, Capable)
    assert ahead.recorded_at_s == 12.5 and ahead.natural_interval_s == 2.0
    view = InView()
    ahead.use_view(view)
    assert live.in_view is view
    ahead.progress()
    assert live.calls[-1] == "progress"
    # what the source has beyond the declared capabilities is not reached through
    assert not hasattr(ahead, "opened_at") and not hasattr(ahead, "closed")
    # a source without the optional ones has their defaults
    plain = SampleAhead(FakeLive)
    plain.use_view(view)
    assert plain.recorded_at_s is None and plain.progress() is None
    ahead.close()
    plain.close()


def test_the_first_snapshot_comes_a_whole_rate_window_after_the_warm_up_ends() -> None:
    ends: list[float] = []

    class SlowWarmUp(FakeLive):
        def sample(self) -> Snapshot:
            snapshot = super().sample()
            if len(self.calls) == 1:
                time.sleep(0.03)  # a cold first sample
            ends.append(time.monotonic())
            return snapshot

    ahead = SampleAhead(SlowWarmUp, rate_window_s=0.05)
    ahead.sample()
    live = ahead.opened()
    assert isinstance(live, FakeLive) and len(live.times) == 2
    assert live.times[1] - ends[0] >= 0.05


def test_a_failed_warm_up_is_retried_by_the_first_snapshot() -> None:
    ahead = SampleAhead(lambda: FakeLive(fail_first=True), rate_window_s=0.01)
    assert ahead.sample().timestamp_s == 2.0


def test_an_error_in_the_first_sample_reaches_the_caller_once() -> None:
    ahead = SampleAhead(lambda: FakeLive(fail_first=True))
    with pytest.raises(RuntimeError, match="nvml went away"):
        ahead.sample()
    assert ahead.sample().timestamp_s == 2.0


def test_an_error_opening_the_source_is_raised_by_every_use_and_close_is_safe() -> None:
    def no_driver() -> FakeLive:
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    ahead = SampleAhead(no_driver)
    for use in (ahead.opened, ahead.sample, lambda: ahead.label):
        with pytest.raises(OSError, match="libnvidia-ml"):
            use()
    ahead.close()  # nothing was opened, nothing to close


def test_close_waits_for_the_first_sample_before_closing_the_source() -> None:
    release = threading.Event()

    class Slow(FakeLive):
        def sample(self) -> Snapshot:
            release.wait(5.0)
            return super().sample()

    slow = Slow()
    ahead = SampleAhead(lambda: slow)
    ahead.opened()
    threading.Timer(0.05, release.set).start()
    ahead.close()
    assert slow.calls and slow.closed
