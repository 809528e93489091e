"""The batches of a large trace decoded by worker processes
(:mod:`gputui.tracefile.farm`): the same timeline and op rows as one process
makes, on every kept trace and on generated ones; and where the workers cannot
give that (a batch that is not JSON, a thread named by a string, a worker that
dies), the file is read again in one process with the same result."""

from __future__ import annotations

import gzip
import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gputui.trace import op_rows
from gputui.tracefile import farm, json_stream, reader, typed
from gputui.tracefile.reader import TraceError, read_trace
from tests.helpers.tracegen import reference_trace
from tests.unit.test_trace_typed import (
    REPO,
    complete,
    kept_traces,
    odd,
    one_odd_value,
    reading,
    regular,
)

REAL_CAN_FORK = farm.can_fork

#: the workers started by the test running
STARTED: list[int] = []


class Farms:
    """Counts the farms started, the batches their workers took and the farms
    that gave up."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.started = self.batches = self.refused = self.failed = 0
        real_init, real_submit, real_read = farm.Farm.__init__, farm.Farm.submit, reader._read

        def init(f: farm.Farm, *args: Any) -> None:
            real_init(f, *args)
            self.started += 1
            STARTED.extend(f.pids)

        def submit(f: farm.Farm, text: memoryview) -> bool:
            took = real_submit(f, text)
            self.batches += took
            self.refused += not took
            return took

        def read(path: Path, progress: Any, typed: bool, workers: int) -> Any:
            try:
                return real_read(path, progress, typed, workers)
            except farm.FarmFailed:
                self.failed += 1
                raise

        monkeypatch.setattr(farm.Farm, "__init__", init)
        monkeypatch.setattr(farm.Farm, "submit", submit)
        monkeypatch.setattr(reader, "_read", read)


@pytest.fixture(autouse=True)
def farm_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """The typed decoder and the workers on every trace, however small, in
    batches of 16 kB, after the first one; the op rows give up on a trace
    without shapes after its first 50 ops, not 10,000 (the workers start once
    they have: most kept traces have fewer)."""
    monkeypatch.setattr(op_rows, "SHAPES_PROBE_OPS", 50)
    monkeypatch.setattr(typed, "SHAPES_PROBE_OPS", 50)
    monkeypatch.setattr(reader, "TYPED_FROM_BYTES", 0)
    monkeypatch.setattr(reader, "TYPED_MIN_JSON", 0)
    monkeypatch.setattr(farm, "FARM_MIN_JSON", 0)
    monkeypatch.setattr(farm, "FARM_FROM_BYTES", 1)
    monkeypatch.setattr(json_stream, "CHUNK", 1 << 14)
    # (a thread another test left in this process would keep the workers from
    # starting; the test of that check puts the real one back)
    monkeypatch.setattr(farm, "can_fork", lambda: True)
    STARTED.clear()


def one_and_farmed(path: Path, workers: int = 2) -> tuple[Any, Any]:
    """What one process and the farm make of ``path``: its reading, or its
    one-line error."""
    out = []
    for n in (0, workers):
        try:
            out.append(reading(read_trace(path, workers=n)))
        except TraceError as exc:
            out.append(("error", str(exc)))
    return out[0], out[1]


def _op(name: str, ts: float, tid: Any, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": 1, "pid": 1, "tid": tid,
            "args": args}  # fmt: skip


def no_children_left() -> bool:
    """Whether every worker this test started has been waited for."""
    for pid in STARTED:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        return False
    return True


@pytest.mark.parametrize("path", kept_traces(), ids=lambda p: str(p.relative_to(p.parents[1])))
def test_the_farm_reads_every_kept_trace_as_one_process(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    farms = Farms(monkeypatch)
    one, farmed = one_and_farmed(path)
    assert farmed == one
    assert one[0] != "error"
    assert farms.failed == 0
    assert no_children_left()


def test_most_kept_traces_are_read_by_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A control for the test above: the workers did take their batches
    (a trace whose first batches say nothing of shapes, or which has threads
    named by strings, is read by one process)."""
    farms = Farms(monkeypatch)
    traces = kept_traces()
    used = 0
    for path in traces:
        before = farms.batches
        read_trace(path, workers=3)
        used += farms.batches > before
    assert used >= 0.9 * len(traces), (used, len(traces))
    assert farms.failed == 0


def test_large_batches_and_many_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches too large for a worker's slot are read by the reader, between
    the workers' (which it takes back first)."""
    path = REPO / "tests/data/traces/healthy.pt.trace.json.gz"
    monkeypatch.setattr(farm, "SLOT_BYTES", 16 << 10)  # batches of 16 kB and a bit more
    farms = Farms(monkeypatch)
    one, farmed = one_and_farmed(path, workers=5)
    assert farmed == one
    assert farms.batches > 5 and farms.refused > 5, (farms.batches, farms.refused)


def test_a_batch_cut_inside_a_string_is_read_again_by_one_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream cuts where an event seems to end; a name holding '},{' can
    fool it, and the worker finds the batch is not JSON: the file is read again
    in one process, which cuts elsewhere."""
    t = reference_trace()
    for i in range(200):
        t.op('weird},{"name": "x' + str(i) + '"},', 300.0 + i, 1.0)
    t.launch(501.0, 1.0, 'kernel<"},">', 502.0, 1.0)
    path = t.write(tmp_path / "t.json")
    farms = Farms(monkeypatch)
    for chunk in (64, 300, 1000):
        monkeypatch.setattr(json_stream, "CHUNK", chunk)
        one, farmed = one_and_farmed(path)
        assert farmed == one and one[0] != "error"
    assert farms.failed >= 1 and farms.started >= 1
    assert no_children_left()


def test_threads_named_by_strings_are_read_by_one_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader numbers such threads in the order they come: a worker that
    meets a new one gives its batches up (one known before the workers start
    keeps them from starting)."""
    evs = []
    for i in range(400):
        tid = f"thread-{i // 50}" if i > 200 else 7
        args = {"External id": i, "Input Dims": [[1]]}
        evs.append(_op(f"op{i % 9}", i, tid, args))
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": evs}))
    farms = Farms(monkeypatch)
    monkeypatch.setattr(json_stream, "CHUNK", 2000)
    one, farmed = one_and_farmed(path)
    assert farmed == one and one[0] != "error"
    assert farms.started == 1 and farms.failed == 1


def test_a_worker_that_dies_leaves_the_file_to_one_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = REPO / "tests/data/traces/healthy.pt.trace.json.gz"
    real = farm._Packer.batch
    calls = [0]

    def dies(packer: farm._Packer, data: bytes) -> bytes:
        calls[0] += 1  # (in the worker: its own count)
        if calls[0] == 3:
            os._exit(9)
        return real(packer, data)

    monkeypatch.setattr(farm._Packer, "batch", dies)
    farms = Farms(monkeypatch)
    one, farmed = one_and_farmed(path)
    assert farmed == one and one[0] != "error"
    assert farms.failed == 1
    assert no_children_left()


def test_a_worker_that_does_not_answer_is_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    path = REPO / "tests/data/traces/healthy.pt.trace.json.gz"

    def hangs(packer: farm._Packer, data: bytes) -> bytes:
        threading.Event().wait(60)
        return b""

    monkeypatch.setattr(farm._Packer, "batch", hangs)
    monkeypatch.setattr(farm, "RESULT_TIMEOUT_S", 0.5)
    farms = Farms(monkeypatch)
    one, farmed = one_and_farmed(path)
    assert farmed == one and farms.failed == 1
    assert no_children_left()


@pytest.mark.parametrize("cut", [0.3, 0.7, 0.999])
def test_a_trace_cut_short_is_the_same_one_line_and_leaves_no_worker(
    tmp_path: Path, cut: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = gzip.decompress((REPO / "tests/data/traces/healthy.pt.trace.json.gz").read_bytes())
    path = tmp_path / "cut.pt.trace.json"
    path.write_bytes(text[: int(len(text) * cut)])
    farms = Farms(monkeypatch)
    one, farmed = one_and_farmed(path)
    assert farmed == one and one[0] == "error" and "truncated" in one[1]
    assert farms.started == 1 and farms.batches > 1
    assert no_children_left()


def test_times_beyond_64_bits_are_sent_as_they_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record whose time does not fit a column travels as a tuple; an op's
    time as a list."""
    evs = []
    for i in range(300):
        ts = 1e25 + i if i % 97 == 5 else i
        evs.append(_op(f"op{i % 5}", ts, 1, {"External id": i, "Input Dims": [[i]]}))
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": evs}))
    monkeypatch.setattr(json_stream, "CHUNK", 3000)
    farms = Farms(monkeypatch)
    one, farmed = one_and_farmed(path)
    assert farmed == one and one[0] != "error"
    assert farms.batches > 3 and farms.failed == 0
    assert max(r.start_us for r in one[2]) > 2**63


def test_no_workers_beside_another_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """A forked child has none of the parent's other threads, and could wait
    forever on a lock one of them held: with one running, no worker starts."""
    path = REPO / "tests/data/traces/healthy.pt.trace.json.gz"
    monkeypatch.setattr(farm, "can_fork", REAL_CAN_FORK)
    farms = Farms(monkeypatch)
    alone = threading.active_count() == 1
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        assert not farm.can_fork()
        read_trace(path, workers=2)
    finally:
        stop.set()
        other.join()
    assert farms.started == 0
    assert farm.can_fork() == alone


def test_how_many_workers() -> None:
    big = farm.FARM_MIN_JSON  # (0 here: every trace is large)
    assert farm.workers_wanted(big, 1) == 0
    assert farm.workers_wanted(big, 2) == 2
    assert farm.workers_wanted(None, 64) == farm.MAX_WORKERS


def test_how_many_workers_by_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()
    assert farm.workers_wanted(farm.FARM_MIN_JSON - 1, 16) == 0
    assert farm.workers_wanted(farm.FARM_MIN_JSON, 16) == min(16, farm.MAX_WORKERS)
    assert farm.workers_wanted(None, 16) == min(16, farm.MAX_WORKERS)  # a large gzip file


def generated(evs: list[Any], chunk: int) -> tuple[Any, Any]:
    """:func:`one_and_farmed` of a trace of ``evs``, read in batches of about
    ``chunk`` bytes."""
    json_stream.CHUNK = chunk  # (the fixture puts it back)
    fd, name = tempfile.mkstemp(suffix=".json")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump({"traceEvents": evs}, fh)
        return one_and_farmed(Path(name))
    finally:
        os.unlink(name)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(regular, min_size=40, max_size=200), st.integers(200, 4000))
def test_generated_traces_read_the_same(evs: list[dict[str, Any]], chunk: int) -> None:
    one, farmed = generated(evs, chunk)
    assert farmed == one


def test_the_command_reads_one_file_with_workers_and_says_the_same(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``gputui analyze FILE``: workers decode a large file (one per CPU, at
    least two here); ``--jobs 1`` reads it alone; the reports are the same."""
    from gputui import cli
    from gputui.commands import analyze_load

    path = str(REPO / "tests/data/traces/healthy.pt.trace.json.gz")
    monkeypatch.setattr(analyze_load, "cpus", lambda: 3)
    farms = Farms(monkeypatch)
    assert cli.main(["analyze", path, "--json"]) == 0
    farmed = capsys.readouterr().out
    assert farms.started == 1 and farms.batches > 5
    assert cli.main(["analyze", path, "--json", "--jobs", "1"]) == 0
    assert capsys.readouterr().out == farmed
    assert farms.started == 1
    assert no_children_left()


def test_events_the_stream_decodes_alone_keep_their_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Names with many ``}, `` make the stream give up cutting batches for a
    while and decode events one at a time (as it does the last event of every
    trace): those come after the batches handed out before them, without
    waiting for them."""
    evs = []
    for i in range(600):
        name = "a}, b}, c}, d}, e}, f}, g}, h}, i}, j" if i % 25 == 3 else f"op{i % 7}"
        evs.append(_op(name, i, 1, {"External id": i, "Input Dims": [[i % 3]]}))
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": evs}))
    monkeypatch.setattr(json_stream, "CHUNK", 2000)
    queued = [0]
    real = farm.Farm.add

    def add(f: farm.Farm, events: list[Any], later: Any) -> None:
        queued[0] += bool(f.order)
        real(f, events, later)

    monkeypatch.setattr(farm.Farm, "add", add)
    farms = Farms(monkeypatch)
    one, farmed = one_and_farmed(path)
    assert farmed == one and one[0] != "error"
    assert farms.failed == 0 and farms.batches > 5
    assert queued[0] > 5, queued


@pytest.mark.parametrize(
    ("cpus", "jobs", "files", "expected"),
    [(8, None, 2, ("parallel", 4)), (8, 2, 2, ("parallel", 1)), (8, None, 9, ("parallel", 0)),
     (8, None, 1, ("serial", 8)), (8, 1, 3, ("serial", 1)), (16, 3, 1, ("serial", 3))],
)  # fmt: skip
def test_the_files_leave_their_cpus_to_the_workers(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    cpus: int,
    jobs: int | None,
    files: int,
    expected: tuple[str, int],
) -> None:
    """Each rank file's process may decode its batches with the CPUs the files
    leave (``--jobs`` the most processes in all)."""
    from gputui.commands import analyze_load

    paths = []
    for i in range(files):
        paths.append(str(tmp_path / f"r{i}.json"))
        Path(paths[-1]).write_text("{}")
    got: list[tuple[str, int]] = []
    monkeypatch.setattr(analyze_load, "cpus", lambda: cpus)
    monkeypatch.setattr(analyze_load, "_serial", lambda *a: got.append(("serial", a[-1])) or [])
    monkeypatch.setattr(analyze_load, "_parallel", lambda *a: got.append(("parallel", a[-1])) or [])
    analyze_load.load(paths, jobs=jobs)
    assert got == [expected]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(regular, min_size=30, max_size=120),
    st.lists(st.one_of(complete, one_odd_value(), odd), min_size=1, max_size=20),
    st.integers(0, 120),
    st.integers(200, 3000),
)
def test_odd_events_among_regular_ones_read_the_same(
    evs: list[dict[str, Any]], odd_evs: list[Any], at: int, chunk: int
) -> None:
    """Odd values (a string thread, a NaN, a list where a number belongs, an
    event that is no object) in the batches the workers take: the same reading
    as one process, by the workers or by reading again alone."""
    evs = [*evs[:at], *odd_evs, *evs[at:]]
    one, farmed = generated(evs, chunk)
    assert farmed == one


@pytest.mark.parametrize("workers", [0, 3])
def test_the_last_progress_says_every_byte_and_every_event(
    workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The progress bar's last word from the reader comes once the workers'
    last batches are taken back: the whole file and all its events (before, it
    stopped at the last batch handed out)."""
    farms = Farms(monkeypatch)
    path = REPO / "tests/data/traces/healthy.pt.trace.json.gz"
    said: list[tuple[int, int]] = []
    tf = read_trace(path, lambda done, events: said.append((done, events)), workers=workers)
    assert (farms.batches > 5) == bool(workers)  # a control: the workers took batches
    assert said[-1] == (path.stat().st_size, tf.timeline.events)
    if workers:  # while batches were out, the events said were fewer
        assert any(events < tf.timeline.events for _, events in said[:-1])
    assert no_children_left()


@pytest.mark.parametrize("how", ["standard", "typed", "farm"])
def test_the_records_of_a_thread_share_its_id(how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One int per thread id, whichever decoder made the records (a decoded
    int per record was 70 MB of a gigabyte trace): the standard decoder, the
    typed one, and the workers' columns taken back."""
    path = REPO / "tests/data/traces/healthy.pt.trace.json.gz"
    farms = Farms(monkeypatch)
    tl = read_trace(path, typed=how != "standard", workers=3 if how == "farm" else 0).timeline
    assert (farms.batches > 5) == (how == "farm")  # (the control: the workers took batches)
    for records in (tl.ranges, tl.runtime):
        threads = {r[3] for r in records}
        assert len(records) > 20 * len(threads)  # many records a thread
        assert len({id(r[3]) for r in records}) == len(threads)
    ints = {id(t): t for t in (r[3] for r in (*tl.ranges, *tl.runtime))}
    assert len(ints) == len(set(ints.values()))  # the ranges and calls share them too
