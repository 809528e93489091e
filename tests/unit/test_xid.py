"""Xid errors: NVML's critical Xid events (the fake NVML's event sets), the
kernel log's ``NVRM: Xid`` lines (published lines, in a fake kernel log), both
as one event, the pid of another user's process without details, and every
NVML failure of the event set leaving the poller sampling."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from gputui.nvml import xid_log
from gputui.nvml.collector import NvmlCollector
from gputui.nvml.kernel_log import KernelLog, bus_key, parse_line
from gputui.snapshot.codec import from_json, to_json
from gputui.snapshot.model import DeviceSnapshot, XidCount, XidEvent
from tests.helpers.fake_nvml import (
    GPU_IS_LOST,
    NOT_SUPPORTED,
    UNKNOWN,
    FakeNvml,
    a100,
    h100,
)

LINES = Path(__file__).resolve().parent.parent / "data" / "kernel_log" / "xid_lines.txt"
BOOT_S = 1_700_000_000.0
#: the fake GPUs' PCI addresses, as NVML and the kernel log write them
BUS0, BUS1 = "00000000:3B:00.0", "00000000:5E:00.0"


def _published() -> list[tuple[str, dict[str, str], str]]:
    """(source, what to expect, the line) of each published line."""
    out, source, expect = [], "", {}
    for line in LINES.read_text().splitlines():
        if line.startswith("# source:"):
            source = line
        elif line.startswith("# expect:"):
            expect = dict(w.split("=", 1) for w in line.removeprefix("# expect:").split())
        elif line and not line.startswith("#"):
            out.append((source, expect, line))
    return out


PUBLISHED = _published()


@pytest.mark.parametrize(
    ("source", "expect", "line"),
    PUBLISHED,
    ids=[f"xid{e['xid']}-{i}" for i, (_, e, _l) in enumerate(PUBLISHED)],
)
def test_published_lines(source: str, expect: dict[str, str], line: str) -> None:
    assert source, "cites no source"
    found = parse_line(line, BOOT_S)
    assert found is not None
    domain, bus, device = (int(x, 16) for x in expect["bus"].split(":"))
    assert found.bus == (domain, bus, device)
    assert found.xid == int(expect["xid"])
    assert found.pid == (None if expect["pid"] == "-" else int(expect["pid"]))
    assert found.process_name == (None if expect["name"] == "-" else expect["name"])
    assert found.detail  # what the driver said after the code and the process
    if line.startswith("["):  # dmesg's seconds since boot
        seconds = float(line[1 : line.index("]")])
        assert found.time_s == pytest.approx(BOOT_S + seconds)


def test_not_xid_lines() -> None:
    for line in (
        "",
        "6,1,2,-;usb 1-1: new device",
        "NVRM: GPU at PCI:0000:01:00: GPU-8a47641b",
        "NVRM: Xid (PCI:zz:01:00): 31, x",
        "nvidia-nvswitch0: SXid (PCI:0000:00:00.0): 11001, Fatal",
    ):
        assert parse_line(line, BOOT_S) is None, line


def test_bus_keys_match_between_nvml_and_the_kernel() -> None:
    assert bus_key("00000000:3B:00.0") == (0, 0x3B, 0) == bus_key("0000:3b:00")
    assert bus_key("00000019:01:00.0") == (0x19, 1, 0)
    assert bus_key(None) is None and bus_key("garbage") is None


def _kmsg(seq: int, seconds: float, message: str) -> str:
    """One /dev/kmsg record: priority, sequence, microseconds since boot, flags."""
    return f"4,{seq},{int(seconds * 1e6)},-;{message}\n"


class Wall:
    def __init__(self) -> None:
        self.now = BOOT_S + 1000.0

    def __call__(self) -> float:
        return self.now


def _collector(fake: FakeNvml, log: Path | None, wall: Wall | None = None) -> NvmlCollector:
    """A collector over ``fake`` reading the fake kernel log ``log`` (None: none),
    which a machine booted at BOOT_S wrote."""
    kernel = None if log is None else KernelLog(str(log), boot_time_s=BOOT_S)
    return NvmlCollector(fake, kernel_log=kernel, wall_clock=wall or Wall())


def _two_gpus() -> FakeNvml:
    return FakeNvml([h100(bus_id=BUS0), a100(bus_id=BUS1, uuid="GPU-1")])


def test_nvml_xid_events_reach_the_snapshot() -> None:
    fake = _two_gpus()
    wall = Wall()
    collector = _collector(fake, None, wall)
    first = collector.sample().devices
    assert [d.xid_sources for d in first] == [("nvml",), ("nvml",)]
    assert first[0].xid_errors == () and first[0].xid_counts == ()
    fake.xid(1, 79)
    fake.xid(1, 31)
    fake.xid(1, 31)
    devices = collector.sample().devices
    assert devices[0].xid_errors == ()
    assert [(e.xid, e.time_s, e.pid, e.source) for e in devices[1].xid_errors] == [
        (79, wall.now, None, "nvml"),
        (31, wall.now, None, "nvml"),
        (31, wall.now, None, "nvml"),
    ]
    assert devices[1].xid_counts == (XidCount(31, 2), XidCount(79, 1))
    # a sample with no new event makes no new tuples
    again = collector.sample().devices
    assert again[1].xid_errors is devices[1].xid_errors
    assert fake.calls["nvmlEventSetWait_v2"] >= 3
    collector.close()
    assert all(s.freed for s in fake.event_sets)


def test_the_newest_errors_are_kept_and_all_counted() -> None:
    fake = FakeNvml([h100(bus_id=BUS0)])
    collector = _collector(fake, None)
    for _ in range(3):
        for code in range(1, 11):
            fake.xid(0, code)
        collector.sample()
    (device,) = collector.sample().devices
    assert len(device.xid_errors) == xid_log.KEPT
    assert [e.xid for e in device.xid_errors] == list(range(3, 11))
    assert device.xid_counts == tuple(XidCount(code, 3) for code in range(1, 11))


def test_nvml_failures_never_stop_the_sampling() -> None:
    # a GPU that reports no Xid events, one whose registration fails
    fake = FakeNvml([h100(bus_id=BUS0, event_types=0x1), a100(bus_id=BUS1, uuid="GPU-1")])
    fake.fail("nvmlDeviceRegisterEvents", NOT_SUPPORTED, device=1)
    collector = _collector(fake, None)
    assert [d.xid_sources for d in collector.sample().devices] == [(), ()]
    assert set(collector.xid_unwatched) == {0, 1}
    # no event set at all
    fake = FakeNvml([h100(bus_id=BUS0)])
    fake.fail("nvmlEventSetCreate", UNKNOWN)
    collector = _collector(fake, None)
    assert collector.sample().devices[0].xid_sources == ()
    assert None in collector.xid_unwatched
    # an older pynvml without event functions
    fake = FakeNvml([h100(bus_id=BUS0)])
    fake.remove("nvmlEventSetWait_v2")
    collector = _collector(fake, None)
    fake.xid(0, 79)
    assert collector.sample().devices[0].xid_errors == ()
    assert collector.sample().devices[0].xid_sources == ()
    # reads that keep failing end the watch; a lost GPU's does not
    fake = FakeNvml([h100(bus_id=BUS0)])
    collector = _collector(fake, None)
    fake.fail("nvmlEventSetWait_v2", GPU_IS_LOST, times=1)
    assert collector.sample().devices[0].xid_sources == ("nvml",)
    fake.fail("nvmlEventSetWait_v2", UNKNOWN, times=3)
    for _ in range(3):
        collector.sample()
    assert collector.sample().devices[0].xid_sources == ()
    # a GPU lost after registering: the others are sampled, the lost one says so
    fake = _two_gpus()
    collector = _collector(fake, None)
    collector.sample()
    fake.xid(1, 79)
    fake.devices[1].lost = True
    sample = collector.sample()
    assert sample.devices[1].lost and [e.xid for e in sample.devices[1].xid_errors] == [79]
    assert not sample.devices[0].lost


def test_the_kernel_log_names_the_process(tmp_path: Path) -> None:
    log = tmp_path / "kmsg"
    log.write_text(
        _kmsg(1, 10.0, "usb 1-1: new high-speed USB device")
        + _kmsg(2, 12.5, "NVRM: Xid (PCI:0000:5e:00): 48, pid=4242, name=train.py, DBE at 4.1")
        # another machine's GPU (not one NVML lists here): not this session's
        + _kmsg(3, 13.0, "NVRM: Xid (PCI:0000:99:00): 79, GPU has fallen off the bus.")
    )
    fake = _two_gpus()
    collector = _collector(fake, log)
    devices = collector.sample().devices
    assert [d.xid_sources for d in devices] == [("nvml", "kernel log")] * 2
    (event,) = devices[1].xid_errors
    assert event == XidEvent(48, BOOT_S + 12.5, 4242, "train.py", "DBE at 4.1", "kernel log")
    assert devices[0].xid_errors == ()
    # lines logged later are read by the next sample
    with log.open("a") as fh:
        fh.write(_kmsg(4, 20.0, "NVRM: Xid (PCI:0000:3b:00): 13, pid=77, name=x, Graphics SM"))
    assert [e.xid for e in collector.sample().devices[0].xid_errors] == [13]


def test_an_error_seen_by_nvml_and_the_kernel_log_is_one(tmp_path: Path) -> None:
    log = tmp_path / "kmsg"
    log.write_text("")
    fake = FakeNvml([h100(bus_id=BUS0)])
    wall = Wall()
    collector = _collector(fake, log, wall)
    collector.sample()
    since_boot = wall.now - BOOT_S
    fake.xid(0, 13)
    with log.open("a") as fh:
        # the driver logs one Xid 13 on several lines
        for n in range(3):
            fh.write(
                _kmsg(
                    10 + n,
                    since_boot - 0.5,
                    f"NVRM: Xid (PCI:0000:3b:00): 13, pid=5, name=a, SM {n}",
                )
            )
    (device,) = collector.sample().devices
    (event,) = device.xid_errors
    assert (event.xid, event.pid, event.source) == (13, 5, "nvml+kernel log")
    assert event.detail == "SM 0"
    assert device.xid_counts == (XidCount(13, 1),)
    # another Xid 13 a minute later is another error
    wall.now += 60
    fake.xid(0, 13)
    (device,) = collector.sample().devices
    assert device.xid_counts == (XidCount(13, 2),)


def test_another_users_process_shows_its_pid_alone() -> None:
    log = xid_log.XidLog(shown=lambda pid: pid == 1)
    line = parse_line("NVRM: Xid (PCI:0000:3b:00): 31, pid=2, name=theirs, MMU Fault @ 0x1", BOOT_S)
    own = parse_line("NVRM: Xid (PCI:0000:3b:00): 43, pid=1, name=mine, Ch 00000008", BOOT_S)
    assert line is not None and own is not None
    log.add([], [line, own], {(0, 0x3B, 0): 0}, BOOT_S)
    theirs, mine = log.values(0)[0]
    assert (theirs.pid, theirs.process_name, theirs.detail) == (2, None, None)
    assert (mine.pid, mine.process_name, mine.detail) == (1, "mine", "Ch 00000008")


def test_an_unreadable_kernel_log_is_said(tmp_path: Path) -> None:
    fake = FakeNvml([h100(bus_id=BUS0, event_types=0)])
    collector = _collector(fake, tmp_path / "absent")
    (device,) = collector.sample().devices
    assert device.xid_sources == ()  # neither NVML's events nor the kernel log
    kernel = KernelLog(str(tmp_path / "absent"))
    assert kernel.read() == [] and kernel.readable is False
    assert kernel.reason is not None and "not readable" in kernel.reason


def test_the_kernel_log_is_read_in_bounded_steps(tmp_path: Path) -> None:
    from gputui.nvml import kernel_log

    log = tmp_path / "kmsg"
    record = _kmsg(1, 1.0, "NVRM: Xid (PCI:0000:3b:00): 13, pid=5, name=a, x")
    # a regular file is read a buffer at a time: ask for fewer buffers than it holds
    log.write_text(record * 2000)
    reader = KernelLog(str(log))
    saved = kernel_log.MAX_RECORDS, kernel_log.MAX_FIRST_RECORDS
    kernel_log.MAX_RECORDS = kernel_log.MAX_FIRST_RECORDS = 2
    try:
        first = reader.read()
        second = reader.read()
    finally:
        kernel_log.MAX_RECORDS, kernel_log.MAX_FIRST_RECORDS = saved
    size = len(record)
    assert len(first) == (2 * kernel_log.MAX_RECORD_BYTES) // size
    assert len(second) > 0 and len(first) + len(second) < 2000
    # a line cut between two reads is read whole
    assert all(e.detail == "x" for e in first + second)


def test_a_device_with_xids_round_trips_through_json() -> None:
    device = DeviceSnapshot(
        index=0,
        name="x",
        uuid="GPU-0",
        xid_errors=(XidEvent(79, 1.7e9, 5, "a", "fell", "nvml+kernel log"),),
        xid_counts=(XidCount(79, 1),),
        xid_sources=("nvml", "kernel log"),
    )
    assert from_json(DeviceSnapshot, to_json(device)) == device
    # a recording made before these fields: none seen, not known where watched
    doc: dict[str, Any] = to_json(dataclasses.replace(device))
    for key in ("xid_errors", "xid_counts", "xid_sources"):
        del doc[key]
    old = from_json(DeviceSnapshot, doc)
    assert (old.xid_errors, old.xid_counts, old.xid_sources) == ((), (), None)
