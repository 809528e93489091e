"""A large gzip trace inflated by a thread ahead of the reader
(:class:`gputui.tracefile.json_stream.Inflater`): the same reading and the
same one-line errors as the gzip module's, for one member or several, padded,
cut short or corrupt; and the thread gone when the read ends."""

from __future__ import annotations

import gzip
import threading
import zlib
from pathlib import Path
from typing import Any

import pytest

from gputui.tracefile import farm, json_stream, reader
from gputui.tracefile.reader import TraceError, read_trace
from tests.unit.test_trace_typed import REPO, reading

HEALTHY = REPO / "tests/data/traces/healthy.pt.trace.json.gz"


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The thread on any gzip file, in chunks of 64 kB read 16 kB at a time."""
    monkeypatch.setattr(reader, "TYPED_MIN_JSON", 0)
    monkeypatch.setattr(reader, "TYPED_FROM_BYTES", 0)
    monkeypatch.setattr(json_stream, "INFLATE_CHUNK", 1 << 16)
    monkeypatch.setattr(json_stream, "INFLATE_READ", 1 << 14)


def without_thread(path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    with monkeypatch.context() as mp:
        mp.setattr(json_stream.ByteSource, "ahead", lambda self: None)
        return _read(path)


def _read(path: Path, workers: int = 0) -> Any:
    try:
        return reading(read_trace(path, workers=workers))
    except TraceError as exc:
        return ("error", str(exc))


def inflating_threads() -> int:
    return sum(t.name == "gputui-inflate" for t in threading.enumerate())


class Started:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        real = json_stream.Inflater.__init__

        def init(inf: json_stream.Inflater, *args: Any) -> None:
            real(inf, *args)
            self.n += 1

        monkeypatch.setattr(json_stream.Inflater, "__init__", init)


def members(text: bytes, parts: int, pad: bytes = b"") -> bytes:
    size = len(text) // parts + 1
    return b"".join(gzip.compress(text[i : i + size]) for i in range(0, len(text), size)) + pad


@pytest.mark.parametrize(("parts", "pad"), [(1, b""), (3, b""), (7, b"\0" * 512)])
def test_one_member_or_several_read_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parts: int, pad: bytes
) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(members(gzip.decompress(HEALTHY.read_bytes()), parts, pad))
    started = Started(monkeypatch)
    got = _read(path)
    assert started.n == 1 and got[0] != "error"
    assert got == without_thread(path, monkeypatch)
    assert inflating_threads() == 0


@pytest.mark.parametrize("cut", [0.2, 0.6, 0.999])
def test_a_file_cut_short_is_the_same_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cut: float
) -> None:
    data = HEALTHY.read_bytes()
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: int(len(data) * cut)])
    started = Started(monkeypatch)
    got = _read(path)
    assert started.n == 1
    assert got == without_thread(path, monkeypatch) == got
    assert got[0] == "error" and "truncated (the compressed stream ends early)" in got[1]
    assert inflating_threads() == 0


def test_corrupt_data_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = bytearray(HEALTHY.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)
    path = tmp_path / "bad.json.gz"
    path.write_bytes(bytes(data))
    got, before = _read(path), without_thread(path, monkeypatch)
    assert got[0] == before[0] == "error" and "\n" not in got[1]
    # where zlib finds the damage, or the JSON it inflated to first: one line
    assert "not a readable gzip file" in got[1] or "invalid JSON" in got[1]
    assert inflating_threads() == 0


def test_an_error_of_the_reader_stops_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gzip file whose JSON is not a trace: the reader stops early, and so
    does the thread."""
    path = tmp_path / "x.json.gz"
    path.write_bytes(gzip.compress(b'{"traceEvents": [1, 2, }' + b" " * 300_000))
    got = _read(path)
    assert got[0] == "error" and "invalid JSON" in got[1]
    assert inflating_threads() == 0


def test_after_the_workers_start_the_thread_skips_what_was_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a CPU to spare beside the workers, the thread starts once they are
    forked: it inflates the file again from the start and leaves out the
    bytes the reader already has."""
    monkeypatch.setattr(farm, "FARM_MIN_JSON", 0)
    monkeypatch.setattr(farm, "FARM_FROM_BYTES", 1 << 20)
    monkeypatch.setattr(farm, "MAX_WORKERS", 2)
    monkeypatch.setattr(json_stream, "CHUNK", 1 << 16)
    started = Started(monkeypatch)
    got = _read(HEALTHY, workers=4)
    assert started.n == 1
    assert got == without_thread(HEALTHY, monkeypatch)
    assert inflating_threads() == 0


def test_no_thread_on_two_cpus_with_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """On two CPUs the workers and the reader take both: a thread would slow
    them."""
    monkeypatch.setattr(farm, "FARM_MIN_JSON", 0)
    # (a thread another test left in this process would keep the workers from
    # starting, and the read would have the thread: that case is the next one)
    monkeypatch.setattr(farm, "can_fork", lambda: True)
    started = Started(monkeypatch)
    forked = []
    real = farm.Farm.__init__

    def init(f: farm.Farm, *args: Any) -> None:
        real(f, *args)
        forked.append(f)

    monkeypatch.setattr(farm.Farm, "__init__", init)
    assert _read(HEALTHY, workers=2)[0] != "error"
    assert len(forked) == 1 and started.n == 0


def test_workers_that_cannot_start_leave_the_file_to_the_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another thread running keeps the workers from forking: the file is read
    here, with the inflating thread."""
    monkeypatch.setattr(farm, "FARM_MIN_JSON", 0)
    monkeypatch.setattr(farm, "can_fork", lambda: False)
    started = Started(monkeypatch)
    assert _read(HEALTHY, workers=2) == without_thread(HEALTHY, monkeypatch)
    assert started.n == 1 and inflating_threads() == 0


def test_the_inflated_stream_is_the_gzip_modules(tmp_path: Path) -> None:
    text = gzip.decompress(HEALTHY.read_bytes())
    raw = (tmp_path / "m.gz").open("wb+")
    raw.write(members(text, 5, b"\0" * 9))
    fill = json_stream._members(raw)
    out = bytearray()
    buf = bytearray(7_000)
    while k := fill(buf):
        out += buf[:k]
    assert bytes(out) == text
    raw.close()
    with pytest.raises(zlib.error):
        raw = (tmp_path / "z.gz").open("wb+")
        raw.write(gzip.compress(text)[:100] + b"x" * 5000)
        fill = json_stream._members(raw)
        while fill(buf):
            pass
