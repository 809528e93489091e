"""The attach screen's Python view (key y): the training thread's hot functions
with their shares, phase, kind and file:line, the call path of the selected
one, the DataLoader workers' functions (or why there are none), and what it
says when there is no profile (sampler off, an older hook, a recording without
one).  Names from the job are cleaned."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from gputui.protocol.hello import Status
from gputui.protocol.profile import (
    SAMPLER_OFF,
    PathFrame,
    ProfileFunction,
    PythonProfile,
    SamplerInfo,
)
from gputui.recording.attach import AttachRecorder
from gputui.session.attach import AttachState
from gputui.tui.attach import LiveFeed, ReplayFeed, make_attach_app
from gputui.tui.attach.python_view import FunctionTable, HeadPanel, PythonScreen
from tests.helpers import hookutil
from tests.helpers import memsnap as h
from tests.helpers.deadlines import WAIT_S
from tests.helpers.screen import drawn
from tests.helpers.synthetic import wait_for

HELLO = dataclasses.replace(
    h.HELLO, status=Status(sampler=SamplerInfo(interval_s=0.01, samples=10))
)
TORCH = "/venv/lib/python3.11/site-packages/torch/"
FRAMES = (
    PathFrame("/home/u/train.py", "main", 90),
    PathFrame("/home/u/train.py", "train", 61),
    PathFrame(
        "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py", "loop", 300, "torch"
    ),
    PathFrame("/home/u/data.py", "Data.__getitem__", 20),
)


def profile(workers: PythonProfile | None = None, note: str | None = None) -> PythonProfile:
    return PythonProfile(
        t=1_700_000_000.0,
        window_s=30.0,
        sampled_s=10.0,
        site_s=9.0,
        samples=1000,
        interval_s=0.01,
        functions=(
            ProfileFunction(
                "/home/u/data.py",
                "augment",
                "user",
                12,
                10,
                1.0,
                7.2,
                {"augment": 1.0},
                7.1,
                {"augment": 7.1},
                path=(0, 1),
            ),
            ProfileFunction(
                "/home/u/train.py",
                "train",
                "user",
                61,
                50,
                0.2,
                10.0,
                {"forward": 0.2},
                1.5,
                {"forward": 1.0, "backward": 0.5},
                path=(0,),
            ),
            ProfileFunction(
                "/venv/lib/python3.11/site-packages/numpy/core/fromnumeric.py",
                "sort",
                "lib",
                1000,
                990,
                6.0,
                6.0,
                {"augment": 6.0},
            ),
        ),
        frames=FRAMES,
        workers=workers,
        worker_processes=0 if workers is None else 2,
        workers_note=note,
    )


WORKERS = dataclasses.replace(
    profile(),
    window_s=28.0,
    sampled_s=40.0,
    samples=4000,
    functions=(
        ProfileFunction(
            "/home/u/data.py",
            "hot_numpy",
            "user",
            44,
            40,
            30.0,
            31.0,
            {},
            31.0,
            {},
            path=(2, 3),
        ),
    ),
)


class ProfileFeed:
    """A live job whose hook has sent one profile."""

    is_replay = False
    pid = 4242
    label = "pid 4242"

    def __init__(self, prof: PythonProfile | None, hello: Any = HELLO) -> None:
        self.prof = prof
        self.hello = hello

    def connect(self, state: AttachState) -> None:
        state.set_hello(self.hello)
        if self.prof is not None:
            state.add(self.prof)

    def now(self) -> float:
        return 1_700_000_000.0

    def request_capture(self, steps: int, flops: bool = False) -> str:
        raise AssertionError("not asked for")

    def request_memory_snapshot(self, steps: int) -> str:
        raise AssertionError("not asked for")

    def close(self) -> None:
        pass


def texts(app: Any) -> dict[str, str]:
    screen = app.screen
    if not isinstance(screen, PythonScreen):
        return {}
    return {p.id: p.plain for p in screen.query(HeadPanel) if p.display}


def table(app: Any, which: str = "#py-main") -> FunctionTable:
    return app.screen.query_one(which, FunctionTable)  # type: ignore[no-any-return]


async def open_view(app: Any, pilot: Any, replay: bool = False) -> None:
    """y on the attach screen (``replay``: the whole recording played first)."""
    await pilot.pause()
    if replay:
        app.screen.replay_to()
    await pilot.press("y")
    await wait_for(pilot, lambda: isinstance(app.screen, PythonScreen))


async def test_y_shows_the_hot_functions_and_the_call_path_of_the_selected_one() -> None:
    app = make_attach_app(ProfileFeed(profile(WORKERS)))  # type: ignore[arg-type]
    async with app.run_test(size=(120, 40)) as pilot:
        await open_view(app, pilot)
        await wait_for(pilot, lambda: table(app).row_count == 3)
        # most time first: the job's own code by its site time, numpy by its self time
        assert table(app).names() == ["augment", "sort", "train"]
        row = table(app).selected
        assert row is not None and row.time == "71.0%" and row.self_share == "10.0%"
        assert row.total == "72.0%" and row.phase == "augment" and row.kind == "user"
        assert row.where == "u/data.py:12"
        text = texts(app)
        assert "last 30 s, 1,000 samples, 100 Hz" in text["py-head"]
        path = text["py-path"].splitlines()
        assert "Call path of augment" in path[0]
        assert [line.split()[0] for line in path[1:]] == ["main", "train", ">"]
        assert "u/train.py:61" in path[2] and "u/data.py:12" in path[3]
        await pilot.press("down")
        await wait_for(pilot, lambda: "Call path of sort" in texts(app)["py-path"])
        assert table(app).selected.kind == "library"  # type: ignore[union-attr]
        assert "no callers sampled" in texts(app)["py-path"]
        await pilot.press("down")  # train runs in two phases
        await wait_for(pilot, lambda: "Call path of train" in texts(app)["py-path"])
        assert table(app).selected.phase == "forward 67%"  # type: ignore[union-attr]
        # the workers: their own table, shares of their time, their own paths
        assert "DataLoader workers (2 processes, last 28 s" in texts(app)["py-workers-head"]
        assert table(app, "#py-workers").names() == ["hot_numpy"]
        assert table(app, "#py-workers").selected.time == "77.5%"  # type: ignore[union-attr]
        await pilot.press("tab")
        await wait_for(pilot, lambda: "Call path of hot_numpy" in texts(app)["py-path"])
        assert "loop" in texts(app)["py-path"] and "Data.__getitem__" in texts(app)["py-path"]
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, PythonScreen))


async def test_without_workers_the_view_says_why() -> None:
    note = "DataLoader workers not hooked: started with spawn, without gputui"
    app = make_attach_app(ProfileFeed(profile(note=note)))  # type: ignore[arg-type]
    async with app.run_test(size=(80, 24)) as pilot:
        await open_view(app, pilot)
        await wait_for(pilot, lambda: note in texts(app).get("py-workers-head", ""))
        assert not app.screen.query_one("#py-workers", FunctionTable).display
        await pilot.press("y")  # y closes it too
        await wait_for(pilot, lambda: not isinstance(app.screen, PythonScreen))


async def test_the_sampler_turned_off_is_said() -> None:
    off = SamplerInfo(SAMPLER_OFF, 0.01, 0, "turned off by GPUTUI_SAMPLER=0")
    hello = dataclasses.replace(h.HELLO, status=Status(sampler=off))
    app = make_attach_app(ProfileFeed(None, hello))  # type: ignore[arg-type]
    async with app.run_test(size=(80, 24)) as pilot:
        await open_view(app, pilot)
        await wait_for(pilot, lambda: "GPUTUI_SAMPLER=0" in texts(app).get("py-head", ""))
        assert "sampler is off" in texts(app)["py-head"]
        assert table(app).row_count == 0


async def test_an_older_hook_and_the_demo_recording_say_there_is_no_profile() -> None:
    """The demo was recorded before the sampler: its hook sends no profile."""
    app = make_attach_app(ReplayFeed.demo(), autostart=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await open_view(app, pilot, replay=True)
        await wait_for(pilot, lambda: "predates the Python sampler" in texts(app)["py-head"])


async def test_a_recorded_profile_replays(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl.gz"
    rec = AttachRecorder(path, HELLO.to_wire(), 4242, note="test")
    rec.write(h.step_batch(0, 20))
    rec.write(profile(WORKERS).to_wire())
    rec.close()
    app = make_attach_app(ReplayFeed.from_file(path), autostart=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await open_view(app, pilot, replay=True)
        await wait_for(pilot, lambda: table(app).row_count == 3)
        assert table(app, "#py-workers").names() == ["hot_numpy"]


async def test_names_from_the_job_are_cleaned() -> None:
    hostile = "aug\x1b]0;owned\x07\x1b[2Jment"
    prof = profile()
    fn = dataclasses.replace(prof.functions[0], function=hostile, phases_s={hostile: 1.0})
    frames = (dataclasses.replace(FRAMES[0], function="ma\x1b[31min"), *FRAMES[1:])
    prof = dataclasses.replace(prof, functions=(fn, *prof.functions[1:]), frames=frames)
    app = make_attach_app(ProfileFeed(prof))  # type: ignore[arg-type]
    async with app.run_test(size=(120, 40)) as pilot:
        await open_view(app, pilot)
        await wait_for(pilot, lambda: "Call path of" in texts(app).get("py-path", ""))
        shown = "\n".join(texts(app).values()) + "".join(
            str(cell) for r in table(app).ordered_rows for cell in table(app).get_row(r.key)
        )
        assert "\x1b" not in shown and "\x07" not in shown and "\\x1b" in shown


# -- live: a real CPU training job, recorded and replayed ------------------------------------
@pytest.mark.slow
async def test_live_the_view_names_the_hot_function_and_the_recording_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with hookutil.isolated_dirs() as dirs:
        env = hookutil.make_env(*dirs)
        monkeypatch.setenv("GPUTUI_SOCKET_DIR", env["GPUTUI_SOCKET_DIR"])
        args = ["--steps", "0", "--install", "--hot", "numpy", "--hot-ms", "30"]
        job = hookutil.start_job(env, tmp_path, [*args, "--workers", "1"])
        record = tmp_path / "session.jsonl.gz"
        try:
            feed = LiveFeed(job.pid, record_path=record)
            feed.watch_gpu = False
            app = make_attach_app(feed)
            async with app.run_test(size=(100, 30)) as pilot:
                await open_view(app, pilot)
                names = lambda: table(app).names()[:1]  # noqa: E731
                await wait_for(pilot, lambda: names() == ["hot_numpy"], WAIT_S)
                assert "Call path of hot_numpy" in texts(app)["py-path"]
                assert "train" in texts(app)["py-path"]
                await wait_for(pilot, lambda: table(app, "#py-workers").row_count > 0, WAIT_S)
        finally:
            job.stop()
    app = make_attach_app(ReplayFeed.from_file(record), autostart=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await open_view(app, pilot, replay=True)
        await wait_for(pilot, lambda: table(app).names()[:1] == ["hot_numpy"])
        assert table(app, "#py-workers").row_count > 0


async def test_ascii_names_the_view_in_ascii() -> None:
    """--ascii: long names are elided with ASCII, the kinds and paths too."""
    long_name = "a_function_with_a_rather_long_name_" * 3
    prof = profile(WORKERS)
    fn = dataclasses.replace(prof.functions[0], function=long_name)
    prof = dataclasses.replace(prof, functions=(fn, *prof.functions[1:]))
    app = make_attach_app(ProfileFeed(prof), ascii_only=True)  # type: ignore[arg-type]
    async with app.run_test(size=(80, 24)) as pilot:
        await open_view(app, pilot)
        await wait_for(pilot, lambda: table(app).row_count == 3)
        await pilot.pause()
        shown = "\n".join(drawn(app))
        assert "a_function_with" in shown
        assert not sorted({c for c in shown if not c.isascii()})


CPU_RECORDING = Path(__file__).parents[1] / "data" / "cpu_python.jsonl.gz"


async def test_a_real_cpu_jobs_recording_shows_its_hot_function_and_workers() -> None:
    """tests/jobs/train_cpu.py, a step mostly numpy in hot_numpy() (phase
    augment), two forked workers sleeping 10 ms a batch: recorded live."""
    app = make_attach_app(ReplayFeed.from_file(CPU_RECORDING), autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_view(app, pilot, replay=True)
        await wait_for(pilot, lambda: table(app).row_count > 0)
        top = table(app).selected
        assert top is not None and top.name == "hot_numpy" and top.phase == "augment"
        assert float(top.time.rstrip("%")) > 50
        path = texts(app)["py-path"]
        assert [line.split()[0] for line in path.splitlines()[1:]][-2:] == ["train", ">"]
        workers = table(app, "#py-workers").names()
        assert "SleepyBatches.__getitem__" in workers and "train" not in workers
        assert "2 processes" in texts(app)["py-workers-head"]


async def test_y_opens_the_view_of_a_rank_from_the_footer() -> None:
    """A rank's attach screen over the rank view, at 80 columns: q (back) and y
    are in the footer, and y opens the view.  The 2-rank recording's hooks
    predate the sampler."""
    from textual.widgets._footer import FooterKey

    from gputui.session.rank_feeds import ReplayRanksFeed
    from gputui.tui.attach import AttachScreen
    from gputui.tui.attach.rank_screen import RanksApp
    from tests.tui.test_tui_ranks import AT_S, RECORDING

    app = RanksApp(ReplayRanksFeed.from_file(RECORDING), autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        app.ranks_screen.replay_to(AT_S)
        await pilot.pause()
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, AttachScreen))
        keys = lambda: {k.key for k in app.screen.query(FooterKey) if k.display}  # noqa: E731
        await wait_for(pilot, lambda: "q" in keys())
        assert "y" in keys()
        await pilot.press("y")
        await wait_for(pilot, lambda: isinstance(app.screen, PythonScreen))
        await wait_for(pilot, lambda: "predates the Python sampler" in texts(app)["py-head"])
