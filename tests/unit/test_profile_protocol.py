"""The Python profile on the wire: its messages round-trip and are checked
field by field, hostile values never raise anything but SchemaError, and the
addition is compatible both ways: a viewer that does not know it attaches and
reads everything else; a viewer that knows it, attached to a hook that
predates it, says the profile is unavailable."""

from __future__ import annotations

import copy
import dataclasses
import gzip
import json
import os
import socket
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gputui.hook
from gputui.client import hook as hook_client
from gputui.client.hook import Disconnected, HookClient, Invalid, parse_event, profile_unavailable
from gputui.protocol import framing, messages, paths, wire
from gputui.protocol.fields import SchemaError
from gputui.protocol.hello import Hello
from gputui.protocol.profile import (
    KIND_TORCH,
    MAX_FILENAME,
    MAX_ROWS,
    SAMPLER_OFF,
    SAMPLER_ON,
    GetPythonProfile,
    ProfileFunction,
    ProfileLine,
    PythonProfile,
    SamplerInfo,
)
from gputui.protocol.schema import HookError, Pong, Status, StepBatch, Synced
from gputui.protocol.wire import decode, encode_message
from tests.helpers import hookutil
from tests.helpers.wire_strategies import JSON, PROFILE, mutate
from tests.helpers.wire_strategies import paths as key_paths

DEMO = Path(__file__).resolve().parents[2] / "gputui" / "data" / "attach_demo.jsonl.gz"
EXAMPLES = int(os.environ.get("GPUTUI_PROPERTY_EXAMPLES", "120"))


def sample_profile() -> PythonProfile:
    return PythonProfile(
        t=1.5,
        window_s=40.0,
        sampled_s=39.5,
        samples=3950,
        interval_s=0.01,
        functions=(
            ProfileFunction(
                "/p/data.py",
                "augment",
                "user",
                12,
                10,
                8.0,
                28.5,
                {"data": 8.0},
                28.0,
                {"data": 28},
            ),
            ProfileFunction("/t/torch/nn/functional.py", "linear", KIND_TORCH, 5, 1, 1.0, 1.0),
            ProfileFunction("/v/site-packages/np/sort.py", "sort", "lib", 9, 2, 20.0, 20.0),
        ),
        lines=(ProfileLine("/p/data.py", 12, "augment", "user", 7.0, 27.5, 27.0),),
        phases_s={"data": 30.0, "forward": 9.5},
        kinds_s={"user": 38.0, "torch": 1.5},
        functions_seen=120,
        lines_seen=300,
        truncated=True,
        notes=("a note",),
    )


# -- the messages ------------------------------------------------------------------------------
def test_round_trips() -> None:
    for msg in (sample_profile(), PythonProfile(), GetPythonProfile()):
        assert decode(json.loads(json.dumps(msg.to_wire()))) == msg
    status = Status(t=1.0, steps=3, sampler=SamplerInfo(SAMPLER_ON, 0.01, 120))
    assert decode(json.loads(json.dumps(status.to_wire()))) == status
    hello = Hello(pid=7, status=status)
    assert decode(json.loads(json.dumps(hello.to_wire()))) == hello
    assert decode(PROFILE) == PythonProfile.from_wire(PROFILE)


def test_a_status_without_a_sampler_stays_as_older_hooks_sent_it() -> None:
    wire_status = Status(t=1.0).to_wire()
    assert "sampler" not in wire_status
    assert Status.from_wire(wire_status).sampler is None


def test_shares_and_tops() -> None:
    profile = sample_profile()
    assert profile.share(19.75) == pytest.approx(0.5)
    assert PythonProfile().share(1.0) == 0.0
    # the job's own function by its site time (augment: 28 s, numpy's sort on
    # its behalf included) leads; by self time numpy's sort does
    assert [r.function for r in profile.top(3)] == ["augment", "sort", "linear"]
    assert [r.function for r in profile.top_site()] == ["augment"]
    assert [r.function for r in profile.top_self(2)] == ["sort", "augment"]
    assert [r.function for r in profile.top_total(2)] == ["augment", "sort"]
    assert profile.functions[0].time_s == 28.0 and profile.functions[2].time_s == 20.0
    assert profile.functions[0].label == "augment (/p/data.py:12)"


def _with(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(PROFILE)
    node: Any = obj
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return obj


@pytest.mark.parametrize(
    ("obj", "field", "problem"),
    [
        (_with(("functions", 0, "kind"), "c++"), "functions[0].kind", "expected one of"),
        (_with(("functions", 0, "self_s"), -1.0), "functions[0].self_s", "outside"),
        (_with(("functions", 0, "file"), "x" * (MAX_FILENAME + 1)), "functions[0].file", "limit"),
        (_with(("functions", 0, "function"), 7), "functions[0].function", "expected a string"),
        (_with(("functions", 0, "phases_s"), []), "functions[0].phases_s", "expected an object"),
        (_with(("functions", 0, "line"), -3), "functions[0].line", "outside"),
        (_with(("functions",), [{}] * (MAX_ROWS + 1)), "python_profile.functions", "items"),
        (_with(("lines", 1, "total_s"), float("nan")), "lines[1].total_s", "outside"),
        (_with(("kinds_s",), {"gpu": 1.0}), "python_profile.kinds_s", "unknown kind"),
        (_with(("samples",), "many"), "python_profile.samples", "expected an integer"),
        (_with(("notes",), ["x" * 2000]), "python_profile.notes[0]", "characters"),
        (
            {"v": 1, "type": "status", "sampler": {"state": "sleeping"}},
            "status.sampler.state",
            "unknown state",
        ),
    ],
)
def test_rejections_name_the_field(obj: dict[str, Any], field: str, problem: str) -> None:
    with pytest.raises(SchemaError) as err:
        decode(obj)
    assert field in str(err.value) and problem in str(err.value)
    event = parse_event(obj)
    assert isinstance(event, Invalid) and field in event.error


def test_a_profile_frame_from_the_hook_fits_and_decodes() -> None:
    frame = encode_message(sample_profile())
    assert len(frame) < framing.MAX_FRAME
    assert framing.FrameReader().feed(frame)[0]["type"] == messages.PYTHON_PROFILE


def test_a_viewers_request_sent_by_a_hook_is_invalid() -> None:
    event = parse_event(GetPythonProfile().to_wire())
    assert isinstance(event, Invalid) and "request" in event.error


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_damaged_profiles_raise_only_schema_errors(data: st.DataObject) -> None:
    found = [p for p in key_paths(PROFILE, per_list=3) if p[0] not in ("v", "type")]
    obj = mutate(data.draw, copy.deepcopy(PROFILE), found, JSON)
    try:
        msg = decode(obj)
    except SchemaError as exc:
        assert exc.field and "\n" not in str(exc)
        return
    assert isinstance(msg, PythonProfile)
    # what passed re-encodes as strict JSON and decodes to itself
    again = framing.FrameReader().feed(encode_message(msg))
    assert decode(again[0]) == msg


# -- the profile through a real hook ------------------------------------------------------------
@pytest.fixture
def sampler_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Any]:
    """Installs the hook in this process after setting the environment given
    to the returned function; this thread becomes its training thread."""
    sock_dir = tempfile.mkdtemp(prefix="gtp-", dir="/tmp")
    os.rmdir(sock_dir)
    monkeypatch.setenv(paths.ENV_SOCKET_DIR, sock_dir)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    def install(**env: str) -> Any:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        hook = gputui.hook.install()
        assert hook is not None and hook.server is not None
        hookutil.steps(3)  # this thread is the one sampled from now on
        return hook

    yield install
    gputui.hook.uninstall()
    if os.path.isdir(sock_dir):
        os.rmdir(sock_dir)


def _until_synced(client: HookClient) -> list[Any]:
    events = []
    for event in client.events(timeout=10):
        events.append(event)
        if isinstance(event, (Synced, Disconnected)):
            return events
    raise AssertionError(f"no Synced: {events}")


def _next(client: HookClient, kind: type, timeout: float = 10.0) -> Any:
    for event in client.events(timeout=timeout):
        if isinstance(event, kind):
            return event
        assert not isinstance(event, (Disconnected, Invalid)), event
    raise AssertionError(f"no {kind.__name__}")


def test_a_viewer_gets_the_profile_on_subscribe_and_on_request(sampler_env: Any) -> None:
    hook = sampler_env()
    hookutil.wait_for(lambda: hook.sampler.snapshot() is not None, 10, "samples")
    client = HookClient.connect(os.getpid())
    try:
        assert client.sampler is not None and client.sampler.state == SAMPLER_ON
        assert client.profile_unavailable() is None
        client.subscribe(history=10)
        client.start()
        events = _until_synced(client)
        profiles = [e for e in events if isinstance(e, PythonProfile)]
        assert len(profiles) == 1 and client.profile == profiles[0]
        assert profiles[0].samples > 0 and profiles[0].interval_s == hook.sampler.interval_s
        # this test's own function is on the sampled thread's stack
        assert any(r.file == __file__ for r in profiles[0].functions)
        # then about every 2 s, unasked
        pushed = _next(client, PythonProfile)
        assert pushed.samples > profiles[0].samples
        client.request_profile()
        answer = _next(client, PythonProfile)
        assert client.profile is answer and answer.samples >= pushed.samples
    finally:
        client.close()


def test_a_failing_profile_is_reported_and_the_session_goes_on(
    sampler_env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = sampler_env()

    def broken(notes: tuple[str, ...] = ()) -> None:
        raise RuntimeError("no profile today")

    monkeypatch.setattr(hook.sampler, "snapshot", broken)
    client = HookClient.connect(os.getpid())
    try:
        client.subscribe(history=10)
        client.start()
        events = _until_synced(client)
        assert any(isinstance(e, StepBatch) for e in events)
        client.request_profile()
        error = _next(client, HookError)
        assert "the Python profile failed: RuntimeError" in error.error
        client.ping()
        _next(client, Pong)  # the I/O thread still serves
    finally:
        client.close()
    assert any("python profile" in e and "no profile today" in e for e in hook.errors.values())


def test_with_the_sampler_off_the_viewer_is_told_why(sampler_env: Any) -> None:
    hook = sampler_env(GPUTUI_SAMPLER="0")
    assert hook.sampler.info().state == SAMPLER_OFF
    client = HookClient.connect(os.getpid())
    try:
        note = client.profile_unavailable()
        assert note is not None and "off" in note and "GPUTUI_SAMPLER=0" in note
        client.subscribe()
        client.start()
        assert not any(isinstance(e, PythonProfile) for e in _until_synced(client))
        client.request_profile()
        error = _next(client, HookError)
        assert "off" in error.error and "GPUTUI_SAMPLER=0" in error.error
        assert client.profile is None
    finally:
        client.close()


def test_a_viewer_older_than_the_profile_still_attaches(
    sampler_env: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A viewer of the release before the sampler knows neither message: to it
    they are unknown types (ignored, as the protocol promises), and the
    status's ``sampler`` an unknown key."""
    hook = sampler_env()
    hookutil.wait_for(lambda: hook.sampler.snapshot() is not None, 10, "samples")
    monkeypatch.delitem(wire._DECODERS, messages.PYTHON_PROFILE)
    monkeypatch.delitem(wire._DECODERS, messages.GET_PYTHON_PROFILE)
    client = HookClient.connect(os.getpid())
    raw: list[str] = []
    try:
        client.subscribe(history=10)
        client.start(on_raw=lambda msg: raw.append(str(msg.get("type"))))
        events = _until_synced(client)
    finally:
        client.close()
    assert messages.PYTHON_PROFILE in raw  # sent, and ignored
    assert not any(isinstance(e, (Invalid, PythonProfile)) for e in events)
    assert any(isinstance(e, StepBatch) for e in events)
    assert any(isinstance(e, Status) for e in events)
    # and the whole --once report of such a viewer
    from gputui import cli

    assert cli.main(["attach", str(os.getpid()), "--once", "--timeout", "10"]) == 0
    out = capsys.readouterr().out
    assert "invalid" not in out and "steps" in out


class OldHook:
    """A hook of the release before the sampler: the demo recording's hello
    (no ``sampler`` in its status), a synced answer to a subscribe, and
    "unknown request type" for any request it did not know, as its server
    said it."""

    KNOWN = {"subscribe", "capture", "capture_cancel", "ping", "memory_snapshot"}

    def __init__(self, sock_dir: Path) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(sock_dir / f"{os.getpid()}.sock"))
        self.listener.listen(1)
        lines = gzip.open(DEMO, "rt").read().splitlines()
        self.hello = json.loads(lines[1])
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        reader = framing.FrameReader()
        with conn:
            conn.sendall(framing.encode_obj(self.hello))
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                for msg in reader.feed(data):
                    kind = msg.get("type")
                    if kind == "subscribe":
                        conn.sendall(framing.encode("synced", steps=0))
                    elif kind not in self.KNOWN:
                        error = {"error": f"unknown request type {str(kind)[:64]!r}"}
                        conn.sendall(framing.encode("error", **error))

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def sock_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="gtq-", dir="/tmp"))
    os.chmod(path, 0o700)
    monkeypatch.setenv(paths.ENV_SOCKET_DIR, str(path))
    yield path
    for item in path.iterdir():
        item.unlink()
    path.rmdir()


def test_a_viewer_on_a_hook_older_than_the_profile_says_it_is_unavailable(
    sock_dir: Path,
) -> None:
    old = OldHook(sock_dir)
    client = HookClient.connect(os.getpid())
    try:
        assert client.hello.status.sampler is None and client.sampler is None
        note = client.profile_unavailable()
        assert note is not None and "unavailable" in note and "predates" in note
        client.subscribe()
        client.start()
        assert isinstance(_until_synced(client)[-1], Synced)
        client.request_profile()
        error = _next(client, HookError)
        assert "unknown request type 'get_python_profile'" in error.error
        assert client.profile is None
    finally:
        client.close()
        old.close()


def test_unavailable_notes() -> None:
    assert profile_unavailable(SamplerInfo(SAMPLER_ON, 0.01, 5)) is None
    off = profile_unavailable(SamplerInfo(SAMPLER_OFF, reason="turned off by GPUTUI_SAMPLER=0"))
    assert off == "unavailable: the Python sampler is off (turned off by GPUTUI_SAMPLER=0)"
    failed = profile_unavailable(SamplerInfo("failed", reason="RuntimeError: x"))
    assert failed == "unavailable: the Python sampler failed (RuntimeError: x)"
    assert "predates" in (profile_unavailable(None) or "")
    assert hook_client.profile_unavailable is profile_unavailable


def test_the_profile_of_a_recording_replays_as_an_event() -> None:
    event = parse_event(PROFILE)
    assert isinstance(event, PythonProfile) and event.top(1)[0].function == "augment"
    assert event.top_self(1)[0].function == "sort"
    mapping: Mapping[str, Any] = event.to_wire()
    assert mapping["type"] == messages.PYTHON_PROFILE


def test_a_recorded_session_keeps_its_profiles(sampler_env: Any, tmp_path: Path) -> None:
    """``attach --record`` writes every message as it came: the profiles too,
    and they replay as the same events."""
    from gputui.recording.attach import AttachRecorder, read_attach_recording

    hook = sampler_env()
    hookutil.wait_for(lambda: hook.sampler.snapshot() is not None, 10, "samples")
    client = HookClient.connect(os.getpid())
    path = tmp_path / "session.jsonl.gz"
    recorder = AttachRecorder(path, client.hello_raw, os.getpid())
    try:
        client.subscribe(history=10)
        client.start(on_raw=recorder.write)
        events = _until_synced(client)
    finally:
        client.close()
        recorder.close()
    live = [e for e in events if isinstance(e, PythonProfile)]
    recording = read_attach_recording(path)
    assert Hello.from_wire(recording.hello).status.sampler is not None
    replayed = [parse_event(msg) for _t, msg in recording.messages]
    assert [e for e in replayed if isinstance(e, PythonProfile)] == live != []


# -- call paths and the DataLoader workers -------------------------------------------------------
def test_paths_and_workers_decode_and_round_trip() -> None:
    profile = PythonProfile.from_wire(PROFILE)
    augment = profile.top(1)[0]
    assert [(x.function, x.line) for x in profile.path_of(augment)] == [
        ("<module>", 14),
        ("step", 30),
    ]
    workers = profile.workers
    assert workers is not None and profile.worker_processes == 2
    top = workers.top(1)[0]
    assert top.function == "Data.__getitem__" and workers.share(top.time_s) > 0.7
    assert workers.path_of(top)[0].function == "_worker_loop"
    assert decode(json.loads(json.dumps(profile.to_wire()))) == profile
    # the workers' profile is nested once: a workers key inside it is not read
    nested = copy.deepcopy(PROFILE)
    nested["workers"]["workers"] = {"samples": "not read"}
    assert PythonProfile.from_wire(nested).workers == workers


def test_an_older_hooks_profile_has_no_paths_and_says_nothing_of_workers() -> None:
    old = copy.deepcopy(PROFILE)
    for key in ("frames", "workers", "worker_processes"):
        del old[key]
    del old["functions"][0]["path"]
    profile = PythonProfile.from_wire(old)
    assert profile.path_of(profile.top(1)[0]) == () and profile.frames == ()
    assert profile.workers is None and profile.workers_note is None
    # and what a newer hook sends adds keys only: an older reader's keys are all there
    new = PythonProfile.from_wire(PROFILE).to_wire()
    assert set(old) <= set(new)


def test_the_time_outside_torch_round_trips_and_an_older_hook_sends_none() -> None:
    """The split a newer hook sends round-trips; a profile without it (an
    older hook's, or a recording of one) reads as not split, and writes back
    without the keys (its JSON unchanged)."""
    split = dataclasses.replace(
        sample_profile(),
        functions=(
            dataclasses.replace(sample_profile().functions[2], outside_s=19.5),
            *sample_profile().functions[:2],
        ),
        outside_s=20.5,
        outside_phases_s={"other": 19.5, "forward": 1.0},
    )
    wire_form = json.loads(json.dumps(split.to_wire()))
    assert wire_form["outside_phases_s"] == {"other": 19.5, "forward": 1.0}
    assert wire_form["functions"][0]["outside_s"] == 19.5
    assert "outside_s" not in wire_form["functions"][1]  # none: left out
    assert decode(wire_form) == split
    old = PythonProfile.from_wire(PROFILE)
    assert old.outside_s is None and old.outside_phases_s is None
    assert all(f.outside_s == 0.0 for f in old.functions)
    again = old.to_wire()
    assert "outside_phases_s" not in again and "outside_s" not in again
    assert all("outside_s" not in f for f in again["functions"])
    with pytest.raises(SchemaError, match="outside_phases_s"):
        decode({**wire_form, "outside_phases_s": {"other": -1.0}})


def test_the_time_off_the_cpu_round_trips_and_an_older_hook_sends_none() -> None:
    """A newer hook's off-CPU time round-trips; an older hook's profile (or a
    recording of one) has none: no function is said to wait, and the host
    code's share off the CPU is unknown, not 0."""
    from gputui.analysis.host_code import HotFunction, host_code

    fn = dataclasses.replace(sample_profile().functions[0], off_cpu_s=3.0)
    timed = dataclasses.replace(
        sample_profile(),
        functions=(fn, *sample_profile().functions[1:]),
        off_cpu_s=4.0,
        outside_off_cpu_s=3.5,
    )
    wire_form = json.loads(json.dumps(timed.to_wire()))
    assert (wire_form["off_cpu_s"], wire_form["functions"][0]["off_cpu_s"]) == (4.0, 3.0)
    assert "off_cpu_s" not in wire_form["functions"][1]  # none: left out
    assert decode(wire_form) == timed
    assert HotFunction(fn, 0.5).off_cpu == pytest.approx(3.0 / fn.time_s)
    old = PythonProfile.from_wire(PROFILE)
    assert old.off_cpu_s is None and old.outside_off_cpu_s is None
    assert all(f.off_cpu_s == 0.0 for f in old.functions)
    assert "off_cpu_s" not in old.to_wire()
    found = host_code(old)
    assert found is None or found.off_cpu is None
    with pytest.raises(SchemaError, match="off_cpu_s"):
        decode({**wire_form, "off_cpu_s": -1.0})


@pytest.mark.parametrize(
    ("obj", "field", "problem"),
    [
        (_with(("functions", 0, "path"), [0, 7]), "functions[0].path", "past the frames"),
        (_with(("functions", 0, "path"), ["a"]), "functions[0].path[0]", "frame index"),
        (_with(("functions", 0, "path"), list(range(99))), "functions[0].path", "items"),
        (_with(("frames", 0, "kind"), "gpu"), "frames[0].kind", "expected one of"),
        (_with(("workers", "samples"), -1), "workers.samples", "outside"),
        (_with(("workers_note",), 5), "python_profile.workers_note", "expected a string"),
        # a name from the job that is not printable is quoted: the field is one line
        (_with(("functions", 0, "phases_s"), {"a\nb": None}), "phases_s.'a\\nb'", "number"),
    ],
    ids=["index-past", "not-an-index", "too-long", "bad-kind", "workers-field", "note", "name"],
)
def test_bad_paths_and_workers_name_the_field(
    obj: dict[str, Any], field: str, problem: str
) -> None:
    with pytest.raises(SchemaError) as err:
        decode(obj)
    assert field in str(err.value) and problem in str(err.value)
    assert "\n" not in str(err.value)


def test_a_recording_keeps_one_profile_per_period_and_the_last(tmp_path: Path) -> None:
    """The hook sends a profile every 2 s; a recording keeps one per
    PROFILE_EVERY_S, and the newest one held back is written at close."""
    from gputui.recording.attach import AttachRecorder, read_attach_recording

    path = tmp_path / "s.jsonl.gz"
    recorder = AttachRecorder(path, Hello(pid=7).to_wire(), 7)
    for t in range(5):
        msg = copy.deepcopy(PROFILE)
        msg["t"] = 1795632522.0 + t
        recorder.write(msg)
        recorder.write({"v": 1, "type": "status", "t": 1795632522.0 + t})
    recorder.close()
    kept = [
        m["t"] for _t, m in read_attach_recording(path).messages if m["type"] == "python_profile"
    ]
    assert kept == [1795632522.0, 1795632526.0]
    statuses = [m for _t, m in read_attach_recording(path).messages if m["type"] == "status"]
    assert len(statuses) == 5
