"""Reading Chrome traces: every shape torch writes, and one clear line for the rest."""

from __future__ import annotations

import gzip
import json
import os
import threading
from pathlib import Path

import pytest

from gputui.tracefile import json_stream
from gputui.tracefile import reader as trace_file
from gputui.tracefile.reader import TraceError, find_traces, read_trace
from tests.helpers.deadlines import WAIT_S
from tests.helpers.tracegen import GEMM, TraceBuilder, reference_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
#: every guard holds on both readers: the typed one and the standard decoder's
READERS = pytest.mark.parametrize("typed", [True, False], ids=["typed", "stdlib"])


@pytest.fixture(autouse=True)
def typed_from_the_first_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    """The typed decoder on every batch, however small the trace."""
    monkeypatch.setattr(trace_file, "TYPED_FROM_BYTES", 0)
    monkeypatch.setattr(trace_file, "TYPED_MIN_JSON", 0)


def reference_timeline(tmp_path: Path) -> trace_file.Timeline:
    return read_trace(reference_trace().write(tmp_path / "ref.json")).timeline


def same(a: trace_file.Timeline, b: trace_file.Timeline) -> None:
    assert (a.gpu, a.runtime, a.ranges, a.events) == (b.gpu, b.runtime, b.ranges, b.events)


def test_records_and_header(tmp_path: Path) -> None:
    t = reference_trace()
    t.meta["distributedInfo"] = {"backend": "nccl", "rank": 3, "world_size": 8}
    tf = read_trace(t.write(tmp_path / "r.pt.trace.json.gz"))
    assert (tf.rank, tf.world_size) == (3, 8)
    assert tf.devices[0].name == "NVIDIA H100 80GB HBM3"
    assert tf.devices[0].compute_capability == "9.0"
    tl = tf.timeline
    # flow, metadata and the profiler's own span are not records
    assert len(tl.gpu) == 7 and len(tl.runtime) == 7 and len(tl.ranges) == 5
    memcpy = next(a for a in tl.gpu if a.kind == "memcpy")
    assert (memcpy.start_us, memcpy.end_us, memcpy.stream, memcpy.device) == (80, 90, 7, 0)
    call = next(r for r in tl.runtime if r.correlation == memcpy.correlation)
    assert call.name == "cudaMemcpyAsync" and call.kind == "runtime"
    assert tf.json_bytes > tf.file_bytes > 0


@pytest.mark.parametrize("form", ["gzip", "compact", "bare-array", "bom", "trailing-comma"])
@READERS
def test_every_layout_reads_the_same(typed: bool, tmp_path: Path, form: str) -> None:
    doc = reference_trace().document()
    if form == "gzip":
        path = tmp_path / "t.json.gz"
        path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    elif form == "compact":  # torch's own writer: one event per line, no spaces
        events = ",\n".join(json.dumps(e, separators=(",", ":")) for e in doc.pop("traceEvents"))
        head = json.dumps(doc)[:-1]
        path = tmp_path / "t.json"
        path.write_text(head + ',"traceEvents":[\n' + events + "\n]}\n")
    elif form == "bare-array":
        path = tmp_path / "t.json"
        path.write_text(json.dumps(doc["traceEvents"]))
    elif form == "bom":
        path = tmp_path / "t.json"
        path.write_text("\ufeff" + json.dumps(doc))
    else:
        text = json.dumps(doc)
        path = tmp_path / "t.json"
        path.write_text(
            text.replace(
                '"name": "PyTorch Profiler (0)", "args": {"Op count": 0}}]',
                '"name": "PyTorch Profiler (0)", "args": {"Op count": 0}},]',
            )
        )
        assert ",]" in path.read_text()
    same(read_trace(path, typed=typed).timeline, reference_timeline(tmp_path))


@READERS
def test_tiny_chunks_and_braces_inside_strings(
    typed: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Values split across reads, and names holding '},' (which a batch decode
    must not cut at) read the same as with whole-file decoding."""
    t = reference_trace()
    t.op('weird},{"name": "x"},', 300.0, 1.0)
    t.launch(301.0, 1.0, 'kernel<"},">', 302.0, 1.0)
    path = t.write(tmp_path / "t.json")
    whole = read_trace(path, typed=typed).timeline
    for chunk in (1, 7, 64):
        monkeypatch.setattr(json_stream, "CHUNK", chunk)
        same(read_trace(path, typed=typed).timeline, whole)
    assert any(r.name == 'weird},{"name": "x"},' for r in whole.ranges)


@READERS
def test_utf8_text_split_anywhere(
    typed: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Names written as UTF-8 (not as \\u escapes), a character cut by a read,
    and a header value longer than the first window of text with such names
    before it: the same records and header as one decode of the whole file."""
    t = reference_trace()
    t.op("пересчёт_✓_😀", 300.0, 1.0)
    t.launch(301.0, 1.0, "ядро<é>", 302.0, 1.0)
    doc = t.document()
    doc = {"note": "ü" * 3000 + "😀" * 2000, **doc, "after": ["é" * 5000]}
    path = tmp_path / "t.json"
    path.write_bytes(json.dumps(doc, ensure_ascii=False).encode())
    expected = json.loads(path.read_bytes())["traceEvents"]
    whole = read_trace(path, typed=typed)
    assert whole.meta["note"] == doc["note"] and whole.meta["after"] == doc["after"]
    assert any(r.name == "пересчёт_✓_😀" for r in whole.timeline.ranges)
    assert any(g.name == "ядро<é>" for g in whole.timeline.gpu)
    assert whole.timeline.events == len(expected)
    for chunk in (1, 2, 3, 7, 64, 4097):
        monkeypatch.setattr(json_stream, "CHUNK", chunk)
        again = read_trace(path, typed=typed)
        same(again.timeline, whole.timeline)
        assert again.meta == whole.meta


@pytest.mark.parametrize("chunk", [1, 5, 1 << 20])
def test_not_utf8_anywhere_in_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """Every byte is checked, in whichever chunk it comes: a byte that is not
    UTF-8 far into the file, or a character the file ends inside."""
    monkeypatch.setattr(json_stream, "CHUNK", chunk)
    text = json.dumps(reference_trace().document()).encode()
    assert text.endswith(b"}")
    bad = text[:-1] + b', "x": "\xff"}'
    path = tmp_path / "bad.json"
    path.write_bytes(bad)
    with pytest.raises(TraceError, match="not UTF-8"):
        read_trace(path)
    path.write_bytes(text[:-1] + b', "x": "\xe2\x9c')  # 2 bytes of a 3-byte character
    with pytest.raises(TraceError, match="truncated inside a UTF-8 character"):
        read_trace(path)


def test_a_decoder_that_keeps_a_view_of_the_text_keeps_its_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batches are decoded from the stream's own buffer, which is written
    over as the file is read: a value that still holds those bytes after its
    batch (a msgspec Raw kept) keeps them, and the stream reads on in a copy."""
    import msgspec

    kept: list[msgspec.Raw] = []

    def keep_a_name(view: memoryview) -> bool:
        events = msgspec.json.decode(view, type=list[dict[str, msgspec.Raw]])
        kept.append(events[0]["name"])
        return True

    names = [f"op{i:06d}" for i in range(2000)]
    events = [{"ph": "X", "name": n, "ts": i, "dur": 1} for i, n in enumerate(names)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    monkeypatch.setattr(json_stream, "CHUNK", 4096)
    with path.open("rb") as raw:
        source = json_stream.ByteSource(raw, path.stat().st_size, "t", [0])
        json_stream.JsonStream(source.read_into, "t", keep_a_name).document(lambda items: None)
    assert len(kept) > 5  # several batches, the buffer written over after each
    got = [json.loads(bytes(r)) for r in kept]
    assert set(got) <= set(names) and got == sorted(got) and len(set(got)) == len(got)


@pytest.mark.parametrize("typed", [None, lambda view: False])
def test_a_run_at_the_very_top_of_the_text_is_decoded_from_a_copy(typed: object) -> None:
    """With no consumed byte before a run to hold its '[', the run is decoded
    from a copy, and the text itself is left as it was."""
    text = b'{"a": 1}, {"b": 2}, {"c": 3}'
    chunks = [text]

    def read_into(target: bytearray, at: int) -> int:
        if not chunks:
            return 0
        data = chunks.pop()
        target[at : at + len(data)] = data
        return len(data)

    stream = json_stream.JsonStream(read_into, "t", typed)  # type: ignore[arg-type]
    stream.fill()
    got: list[object] = []
    assert stream.pos == 0 and stream._batch(got.extend)
    assert got == [{"a": 1}, {"b": 2}] and bytes(stream.buf[: stream.n]) == text
    assert bytes(stream.buf[stream.pos : stream.n]).strip() == b'{"c": 3}'


def test_real_traces_read_like_json_load() -> None:
    """On real H100 traces the streaming reader sees every event json.load sees."""
    for path in sorted(DATA.glob("*.gz"))[:4]:
        events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
        timeline = read_trace(path).timeline
        assert timeline.events == len(events)
        complete = [e for e in events if "dur" in e and "cat" in e and e["cat"] != "Trace"]
        assert len(timeline.gpu) + len(timeline.runtime) + len(timeline.ranges) == len(complete)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "empty file"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "not UTF-8"),
        (b"hello world", "not a JSON trace"),
        (b'{"schemaVersion": 1, "deviceProperties": []}', "no traceEvents"),
        (b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 2}', "truncated"),
        (b'{"traceEvents": [{"ph": "X", "ts": 1, "du', "truncated"),
        (b'{"traceEvents": [{"ph": "X" "ts": 1}]}', "invalid JSON"),
        (b'{"traceEvents": []} trailing', "extra data"),
        (b"[1, 2", "truncated"),
    ],
)
@READERS
def test_bad_files_are_one_clear_line(
    typed: bool, tmp_path: Path, content: bytes, problem: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(TraceError) as err:
        read_trace(path, typed=typed)
    assert problem in str(err.value)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


@READERS
def test_truncated_gzip(typed: bool, tmp_path: Path) -> None:
    data = gzip.compress(json.dumps(reference_trace().document()).encode())
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match="truncated"):
        read_trace(path, typed=typed)
    path.write_bytes(b"\x1f\x8b" + b"\x00" * 40)
    with pytest.raises(TraceError, match="gzip"):
        read_trace(path, typed=typed)


@READERS
def test_not_a_regular_file(typed: bool, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    done = threading.Event()
    errors: list[str] = []

    def read() -> None:
        try:
            read_trace(fifo, typed=typed)
        except TraceError as exc:
            errors.append(str(exc))
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(WAIT_S), "reading a FIFO must not block"
    assert errors and "not a regular file" in errors[0]
    with pytest.raises(TraceError, match="not a regular file"):
        read_trace("/dev/null", typed=typed)
    with pytest.raises(TraceError, match="No such file"):
        read_trace(tmp_path / "missing.json", typed=typed)


@READERS
def test_size_limits(typed: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = reference_trace().write(tmp_path / "t.json")
    monkeypatch.setattr(trace_file, "MAX_FILE_BYTES", 100)
    with pytest.raises(TraceError, match="more than the"):
        read_trace(path, typed=typed)
    monkeypatch.setattr(trace_file, "MAX_FILE_BYTES", 1 << 30)
    monkeypatch.setattr(json_stream, "MAX_JSON_BYTES", 1000)
    with pytest.raises(TraceError, match="of JSON"):
        read_trace(path, typed=typed)


@READERS
def test_decompression_bomb(typed: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = reference_trace().document()
    doc["padding"] = " " * 2_000_000  # compresses about 1000x
    path = tmp_path / "bomb.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    monkeypatch.setattr(json_stream, "RATIO_FLOOR", 1 << 20)
    with pytest.raises(TraceError, match="decompresses to more than"):
        read_trace(path, typed=typed)
    monkeypatch.setattr(json_stream, "MAX_RATIO", 10_000)
    assert read_trace(path, typed=typed).timeline.gpu


def test_find_traces(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for name in ("b.pt.trace.json.gz", "a.pt.trace.json", "notes.json", "x.txt"):
        (run / name).write_text("{}")
    assert [p.name for p in find_traces([str(run)])] == ["a.pt.trace.json", "b.pt.trace.json.gz"]
    other = tmp_path / "other"
    other.mkdir()
    (other / "trace.json").write_text("{}")
    (other / "more.json.gz").write_text("{}")
    assert [p.name for p in find_traces([str(other)])] == ["more.json.gz", "trace.json"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TraceError, match="no trace files"):
        find_traces([str(empty)])
    with pytest.raises(TraceError, match="no such file"):
        find_traces([str(tmp_path / "nope")])


@READERS
def test_odd_but_valid_events(typed: bool, tmp_path: Path) -> None:
    """Strings where numbers are expected, missing fields, a stream without a
    correlation id: read, not refused."""
    t = TraceBuilder()
    t.launch(0.0, 5.0, GEMM, 10.0, 5.0)
    t.events[-3]["args"]["stream"] = "7"  # the kernel (before the two flow events)
    t.events.append(
        {
            "ph": "X",
            "cat": "kernel",
            "name": "no_corr",
            "pid": 0,
            "tid": 7,
            "ts": 20.0,
            "dur": 1.0,
            "args": {"stream": 7, "device": 0},
        }
    )
    t.events.append({"ph": "X", "cat": "cpu_op", "ts": "soon", "dur": 1.0, "name": "x"})
    t.events.append({"ph": "X", "cat": "cpu_op", "ts": 5.0, "dur": 1.0, "name": None})
    t.events.append(["not", "an", "event"])  # type: ignore[arg-type]
    tl = read_trace(t.write(tmp_path / "t.json"), typed=typed).timeline
    assert [a.stream for a in tl.gpu] == [7, 7]
    assert tl.gpu[1].correlation == -1
    assert tl.skipped == 2
    assert any(r.name == "" for r in tl.ranges)


@READERS
def test_older_capitalised_categories(typed: bool, tmp_path: Path) -> None:
    t = reference_trace()
    renames = {
        "kernel": "Kernel",
        "gpu_memcpy": "Memcpy",
        "cuda_runtime": "Runtime",
        "cpu_op": "Operator",
    }
    for ev in t.events:
        ev["cat"] = renames.get(ev["cat"], ev["cat"])
    old = read_trace(t.write(tmp_path / "old.json"), typed=typed).timeline
    same(old, reference_timeline(tmp_path))


def test_tensorboard_trace_handler_directory(tmp_path: Path) -> None:
    """What torch.profiler writes for TensorBoard (here on the CPU), as a directory."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    model = torch.nn.Linear(32, 32)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=1, active=3, repeat=1),
        on_trace_ready=tensorboard_trace_handler(str(tmp_path), use_gzip=True),
    ) as prof:
        for _ in range(5):
            model(torch.randn(8, 32)).sum().backward()
            prof.step()
    files = find_traces([str(tmp_path)])
    assert len(files) == 1 and files[0].name.endswith(".pt.trace.json.gz")
    tf = read_trace(files[0])
    steps = [r.name for r in tf.timeline.step_ranges()]
    assert len(steps) == 3 and all(s.startswith("ProfilerStep#") for s in steps)
    assert any(r.name == "aten::addmm" for r in tf.timeline.ranges)
