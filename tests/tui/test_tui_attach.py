"""The attach screen: live against real CPU training jobs (started with `gputui run`),
pinned snapshots of the real H100 recording, and its pure parts.

Pinned screens: update only after looking at them
(``pytest tests/test_tui_attach.py --snapshot-update``, then open the report).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gputui import cli
from gputui.analysis.memory import memory_growth
from gputui.client.hook import Disconnected
from gputui.protocol.capture import CaptureResult, CaptureStatus
from gputui.protocol.schema import MemoryBatch, MemorySample, StepBatch, StepRecord
from gputui.recording.attach import read_attach_recording
from gputui.session.attach import AttachState, build_view, capture_busy, capture_progress
from gputui.trace.kernels import short_kernel_name
from gputui.tui.app import make_app
from gputui.tui.attach import AttachScreen, LiveFeed, ReplayFeed, make_attach_app
from gputui.tui.attach.capture_panels import CapturePanel, ClassPanel, NameLine
from gputui.tui.attach.header import AttachHeader
from gputui.tui.attach.memory_panel import MemoryPanel
from gputui.tui.attach.phase_table import PhaseTable
from gputui.tui.attach.step_bars import StepBars
from gputui.tui.attach.table import CPU_OPS, KERNELS, CaptureTable
from gputui.tui.screens.monitor import MonitorScreen
from gputui.tui.widgets.processes import ProcessTable
from tests.helpers import hookutil
from tests.helpers.deadlines import WAIT_S
from tests.helpers.synthetic import live_like_source, make_snapshots, replay_source, wait_for

DEMO_BANNER = "DEMO: a recording of a real training job on an H100, not this machine"
#: the moment of the recording the pinned screens show: just after the capture,
#: so the profiled steps (P), the slow step after them (!) and the kernels are on screen
SNAPSHOT_AT_S = 31.5


# -- live: a real CPU training job --------------------------------------------------------
@pytest.fixture(scope="module")
def env() -> Iterator[dict[str, str]]:
    with hookutil.isolated_dirs() as dirs, pytest.MonkeyPatch.context() as mp:
        environment = hookutil.make_env(*dirs)
        # The viewer runs in this process: it must look for sockets where the jobs put them.
        mp.setenv("GPUTUI_SOCKET_DIR", environment["GPUTUI_SOCKET_DIR"])
        yield environment


@pytest.fixture(scope="module")
def job(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[hookutil.Job]:
    j = hookutil.start_phase_job(env, tmp_path_factory.mktemp("job"))
    yield j
    j.stop()


def screen_of(app: Any) -> AttachScreen:
    screen = app.screen
    assert isinstance(screen, AttachScreen)
    return screen


async def until(pilot: Any, condition: Any, timeout_s: float = WAIT_S) -> None:
    await wait_for(pilot, condition, timeout_s)


@pytest.mark.slow
async def test_live_steps_and_phases(job: hookutil.Job, tmp_path: Path) -> None:
    record = tmp_path / "session.jsonl.gz"
    feed = LiveFeed(job.pid, record_path=record)
    app = make_attach_app(feed, auto_capture=False)  # the screen before any capture
    async with app.run_test(size=(120, 40)) as pilot:
        screen = screen_of(app)
        await until(pilot, lambda: screen.view is not None and screen.view.stats.count >= 20)
        # panels redraw on the 4 Hz timer: wait for the one after the view above
        await until(pilot, lambda: "does not use CUDA" in screen.query_one(MemoryPanel).plain)
        # The hook sends its status before the end of the backlog: a redraw can fall
        # between the two, so wait for the header that has seen both.
        await until(pilot, lambda: "connected" in screen.query_one(AttachHeader).plain)
        view = screen.view
        assert view is not None
        header = screen.query_one(AttachHeader).plain
        assert f"pid {job.pid}" in header and "train_cpu.py" in header
        assert "steps/s" in header and "connected" in header
        assert "CPU (no CUDA device)" in header and "rank -/-" in header
        # Every bar is its step: the phases add up to the step's wall time within 5%.
        for col in view.columns[-20:]:
            assert col.segments
            assert abs(sum(s for _n, s in col.segments) - col.total_s) <= 0.05 * col.total_s
        phases = {d.name: d for d in view.stats.phases}
        assert {"data", "forward", "backward", "optimizer", "user_sleep"} <= set(phases)
        assert phases["data"].p50 >= 0.004 and phases["user_sleep"].p50 >= 0.002
        assert abs(sum(d.share for d in phases.values()) - 1.0) < 0.05
        table = screen.query_one(PhaseTable).plain
        for name in ("data", "forward", "backward", "optimizer", "user_sleep", "step"):
            assert name in table
        assert "p50" in table and "p99" in table
        assert "no CUDA memory: the job does not use CUDA" in screen.query_one(MemoryPanel).plain
        assert "none yet: p profiles" in screen.query_one(CapturePanel).plain
        # g on a CPU job: there are no GPU times to switch to.
        await pilot.press("g")
        assert not screen.gpu_mode
    recorded = read_attach_recording(record)
    assert recorded.pid == job.pid and recorded.hello["pid"] == job.pid
    assert sum(1 for _t, m in recorded.messages if m["type"] == "steps") >= 1


@pytest.mark.slow
async def test_capture_on_cpu_shows_cpu_ops(job: hookutil.Job) -> None:
    app = make_attach_app(LiveFeed(job.pid), auto_capture=False)  # p's capture alone
    async with app.run_test(size=(120, 40)) as pilot:
        screen = screen_of(app)
        await until(pilot, lambda: screen.view is not None and screen.view.snap.synced)
        await pilot.press("p")

        def done() -> bool:
            view = screen.view
            return view is not None and view.capture is not None and not view.snap.capture_wanted

        await until(pilot, done)
        await pilot.pause()
        # The hook went through its states (each shown by the progress line meanwhile).
        assert screen.state.snapshot().capture_status.state == "processing"  # type: ignore[union-attr]
        table = screen.query_one(CaptureTable)
        assert table.effective_mode == CPU_OPS  # no kernels on CPU: CPU ops instead
        assert table.row_count >= 3 and any(n.startswith("aten::") for n in table.names())
        panel = screen.query_one(CapturePanel).plain
        assert "CPU job: CPU ops below" in panel
        assert "ui.perfetto.dev" in panel and "trace" in panel
        assert "Top CPU ops" in screen.query_one(ClassPanel).plain
        # The profiled steps came flagged from the job and are marked as such.
        # The bars show the newest steps only, and by now the job may have
        # stepped past the profiled ones (a loaded machine takes seconds to
        # finish a capture): the marks are checked on a view of every step the
        # screen holds.  (How P looks on the bars: the pinned screens below.)
        snap = screen.state.snapshot()
        capture = snap.capture
        assert capture is not None and capture.first_step is not None
        assert capture.last_step is not None
        full = build_view(snap, screen.view.now_s, columns=len(snap.steps))  # type: ignore[union-attr]
        marked = {c.index for c in full.columns if c.profiled}
        assert set(range(capture.first_step, capture.last_step + 1)) <= marked
        table.focus()
        await pilot.press("down")
        assert "CPU op:" in screen.query_one(NameLine).plain


async def test_job_exit_shows_disconnected(env: dict[str, str], tmp_path: Path) -> None:
    victim = hookutil.start_job(env, tmp_path, ["--install", "--steps", "0"], job=hookutil.STEP_JOB)
    app = make_attach_app(LiveFeed(victim.pid))
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            screen = screen_of(app)
            await until(pilot, lambda: screen.view is not None and len(screen.view.columns) >= 3)
            steps_before = len(screen.view.columns)  # type: ignore[union-attr]
            victim.proc.kill()
            victim.proc.wait(timeout=WAIT_S)
            header = screen.query_one(AttachHeader)
            await until(pilot, lambda: "DISCONNECTED" in header.plain)
            assert "r: reconnect" in header.plain
            # The last data stays on the screen.
            assert len(screen.view.columns) >= steps_before  # type: ignore[union-attr]
            assert "Step wall" in screen.query_one(StepBars).plain
            await pilot.press("r")
            await until(pilot, lambda: f"process {victim.pid} has exited" in header.plain)
    finally:
        victim.stop()


async def test_monitor_a_pushes_attach_screen_and_escape_returns() -> None:
    # Live-like source, no factory given: the default attach screen is wired in.  The
    # synthetic hooked pid is not a hooked job here, so the screen says why it cannot
    # connect; escape returns to the process list.
    app = make_app(live_like_source(make_snapshots(n_gpus=2, n_procs=4, n_steps=3)), 3600.0)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.session.snapshot_count >= 1)
        table = app.screen.query_one(ProcessTable)
        hooked = next(k for k in table.order if (r := table.row(k)) and r.proc and r.proc.hooked)
        table.select_key(hooked)
        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, AttachScreen))
        header = app.screen.query_one(AttachHeader)
        await wait_for(pilot, lambda: "NOT CONNECTED" in header.plain)
        assert "gputui attach" in header.plain
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, MonitorScreen))


async def test_monitor_on_a_recording_cannot_attach() -> None:
    app = make_app(replay_source(make_snapshots(n_gpus=2, n_procs=4, n_steps=3)), 3600.0)
    assert app.attach_factory is None
    titles: list[str] = []
    original = app.notify

    def record(message: str, **kw: Any) -> None:
        titles.append(f"{kw.get('title', '')}|{message}")
        original(message, **kw)

    app.notify = record  # type: ignore[method-assign]
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.session.snapshot_count >= 1)
        table = app.screen.query_one(ProcessTable)
        hooked = next(k for k in table.order if (r := table.row(k)) and r.proc and r.proc.hooked)
        table.select_key(hooked)
        await pilot.press("a")
        assert any("recorded process" in t for t in titles)
        assert isinstance(app.screen, MonitorScreen)


# -- the real H100 recording --------------------------------------------------------------
@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Clock times on screen come from the recording; the time zone must be fixed too.
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def demo_app() -> Any:
    return make_attach_app(ReplayFeed.demo(), banner=DEMO_BANNER, autostart=False)


async def play(pilot: Any) -> None:
    await pilot.pause()
    screen_of(pilot.app).replay_to(SNAPSHOT_AT_S)
    await pilot.pause()


def test_snapshot_demo_120x40(snap_compare: Any, utc: None) -> None:
    assert snap_compare(demo_app(), terminal_size=(120, 40), run_before=play)


def test_snapshot_demo_80x24(snap_compare: Any, utc: None) -> None:
    assert snap_compare(demo_app(), terminal_size=(80, 24), run_before=play)


def test_snapshot_demo_help_80x24(snap_compare: Any, utc: None) -> None:
    async def run_before(pilot: Any) -> None:
        await play(pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    assert snap_compare(demo_app(), terminal_size=(80, 24), run_before=run_before)


async def test_demo_replay_values(utc: None) -> None:
    app = demo_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await play(pilot)
        screen = screen_of(app)
        view = screen.view
        assert view is not None and view.capture is not None
        # "now" is the recording's own time, not this machine's clock.
        assert abs(view.now_s - (ReplayFeed.demo().hello.status.t + SNAPSHOT_AT_S)) < 1.0
        assert len(view.capture.kernels) == 30 and view.capture.trace_path
        assert [c for c in view.columns if c.profiled] and [c for c in view.columns if c.slow]
        assert any(o.why == "warm-up" and o.index == 0 for o in view.outliers)
        table = screen.query_one(CaptureTable)
        assert table.effective_mode == KERNELS and table.row_count == 30
        await pilot.press("o")
        assert table.effective_mode == CPU_OPS
        await pilot.press("o", "g")
        assert screen.gpu_mode and "GPU (ms)" in screen.query_one(PhaseTable).plain
        await pilot.press("p")  # a recording: refused with a note, nothing sent
        header = screen.query_one(AttachHeader).plain
        assert "H100 80GB HBM3" in header and "torch 2.11.0+cu130" in header
        assert "CUDA 13.0" in header and "samples/s" in header and "replay 32/70s" in header


async def test_a_capture_result_is_shown_at_once_not_at_the_next_tick(utc: None) -> None:
    """The reader thread wakes the screen: the capture's kernels and findings are
    on screen without waiting for the refresh timer (stopped here)."""
    import dataclasses
    import threading

    app = demo_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await play(pilot)
        screen = screen_of(app)
        assert screen.view is not None and screen.view.capture is not None
        assert screen._timer is not None
        screen._timer.pause()
        before = screen.refreshes
        old = screen.state.snapshot().capture
        assert old is not None
        fresh = dataclasses.replace(old, id="later", kernels=old.kernels[:3])
        reader = threading.Thread(target=screen.state.add, args=(fresh,))
        reader.start()
        reader.join(WAIT_S)
        await until(pilot, lambda: screen.refreshes > before)
        view = screen.view
        assert view is not None and view.snap.capture is fresh
        assert len(view.capture.kernels) == 3 if view.capture else False


async def test_r_follows_a_restarted_job_or_says_it_is_gone(
    env: dict[str, str], tmp_path: Path
) -> None:
    """The job was restarted (same command, new pid): r attaches to the new one
    and says so; with no such job, r says the process is gone, in one line that
    keeps its keys visible."""
    args = ["--steps", "0"]
    first = hookutil.start_job(env, tmp_path, args, via_run=True, job=hookutil.STEP_JOB)
    feed = LiveFeed(first.pid)
    feed.watch_gpu = False
    app = make_attach_app(feed)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            screen = screen_of(app)
            await until(pilot, lambda: screen.state.snapshot().synced)
            first.stop()
            await until(pilot, lambda: screen.state.snapshot().disconnected is not None)
            second = hookutil.start_job(env, tmp_path, args, via_run=True, job=hookutil.STEP_JOB)
            try:
                await pilot.press("r")
                await until(pilot, lambda: feed.pid == second.pid)
                await until(pilot, lambda: screen.state.snapshot().synced)
                await until(
                    pilot, lambda: f"pid {second.pid}" in screen.query_one(AttachHeader).plain
                )
            finally:
                second.stop()
            await until(pilot, lambda: screen.state.snapshot().disconnected is not None)
            await pilot.press("r")
            header = screen.query_one(AttachHeader)
            await until(pilot, lambda: "has exited, and no hooked job" in header.plain)
            line = header.plain.splitlines()[2]
            assert line.rstrip().endswith("r: reconnect") and "esc" not in line
            assert len(line) <= 120
    finally:
        first.stop()


# -- pure parts ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "short"),
    [
        (
            "void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<"
            "c10::BFloat16>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::"
            "BFloat16>, std::array<char*, 3ul>)",
            "vectorized_elementwise_kernel<CUDAFunctor_add>",
        ),
        (
            "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<c10::BFloat16, "
            "at::native::func_wrapper_t<c10::BFloat16, at::native::sum_functor<c10::BFloat16, "
            "float, c10::BFloat16>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
            "unsigned int, c10::BFloat16, 4, 8> >(at::native::ReduceOp<c10::BFloat16, at::nat",
            "reduce_kernel<sum_functor>",
        ),
        (
            "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
            "(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::"
            "UnaryOpFunctor<float, 2, 1, 1>, at::native::Sqrt<float> >(at::native::(anonym",
            "multi_tensor_apply_kernel<UnaryOpFunctor, Sqrt>",
        ),
        (
            "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, "
            "false>(int, float, float const*, float const*, float const*, float*, float*, float*)",
            "vectorized_layer_norm_kernel",
        ),
        (
            "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT",
            "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT",
        ),
        (
            "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1",
            "cudnn:sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1",
        ),
        (
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
        ),
    ],
)
def test_short_kernel_names(name: str, short: str) -> None:
    assert short_kernel_name(name) == short


def step(i: int, wall: float, flags: int = 0, t: float = 0.0) -> StepRecord:
    rest = wall - 0.4 * wall - 0.4 * wall
    return StepRecord(
        i, t, wall, {"forward": 0.4 * wall, "backward": 0.4 * wall, "other": rest}, flags=flags
    )


def test_outliers_and_marks() -> None:
    state = AttachState()
    walls = [2.0, 0.05] + [0.01] * 40 + [0.05] + [0.01] * 10
    records = [step(i, w, flags=1 if i in (20, 21) else 0) for i, w in enumerate(walls)]
    records[20] = step(20, 0.04, flags=1)
    state.add(StepBatch(tuple(records), 0, False))
    view = build_view(state.snapshot(), 0.0)
    by_index = {c.index: c for c in view.columns}
    assert by_index[0].warmup and by_index[1].warmup and not by_index[5].warmup
    assert by_index[42].slow and not by_index[41].slow
    # Profiled steps are marked, not counted as slow outliers or in the percentiles.
    assert by_index[20].profiled and view.stats.excluded_profiled == 2
    assert [(o.index, o.why) for o in view.outliers] == [
        (42, "slow"),
        (1, "warm-up"),
        (0, "warm-up"),
    ]


def test_capture_progress_follows_the_hook_states() -> None:
    state = AttachState()
    state.add(StepBatch(tuple(step(i, 0.01) for i in range(100)), 0, False))
    state.set_capture_wanted("c1")
    seen = [capture_progress(state.snapshot())]
    for st, at in (("armed", None), ("warmup", 99), ("recording", 98), ("processing", None)):
        state.add(CaptureStatus(st, "c1", None, at, steps=5))
        seen.append(capture_progress(state.snapshot()))
    assert seen == [
        "capture requested, waiting for the hook",
        "capture armed: starts at the next step boundary",
        "capture warm-up at step 99",
        "capture recording: step 2/5 (from step 98)",
        "capture processing: stopping the profiler, reducing the trace",
    ]
    state.add(CaptureResult.from_wire({"id": "c1", "first_step": 98, "last_step": 102}))
    assert capture_progress(state.snapshot()) is None
    assert state.snapshot().capture_wanted is None
    state.add(CaptureStatus("refused", "c2", "a profiler is already running"))
    assert capture_progress(state.snapshot()) == "capture refused: a profiler is already running"


def test_reconnect_history_is_not_counted_twice() -> None:
    state = AttachState()
    batch = StepBatch(tuple(step(i, 0.01) for i in range(10)), 0, False)
    state.add(batch)
    state.add(Disconnected("gone", clean=False))
    state.add(batch)  # the backlog a reconnect asks for
    state.add(StepBatch((step(10, 0.01),), 2, False))
    snap = state.snapshot()
    assert [s.index for s in snap.steps] == list(range(11))
    assert snap.steps_received == 11 and snap.missed == 2


def sample(allocated: int) -> MemorySample:
    return MemorySample(0.0, 0, allocated, allocated * 2, allocated, allocated, allocated * 2, 0, 0)


def test_memory_growth_flags_a_leak_not_the_step_swing() -> None:
    gib = 2**30
    # Samples land anywhere in a step: the allocation swings by 2 GiB within each step.
    flat = [(sample(4 * gib + (i % 3) * gib), i * 10) for i in range(30)]
    growth = memory_growth(flat)
    assert growth is not None and growth.steps > 0 and not growth.growing
    leak = [(sample(4 * gib + (i % 3) * gib + i * 20 * 2**20), i * 10) for i in range(30)]
    growth = memory_growth(leak)
    assert growth is not None and growth.growing
    assert 1.5 * 2**20 < growth.per_step_bytes < 2.5 * 2**20
    state = AttachState()
    state.add(StepBatch((step(0, 0.01),), 0, False))
    state.add(MemoryBatch(tuple(sample(gib) for _ in range(3))))
    assert build_view(state.snapshot(), 0.0).memory is not None


# -- command line -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["attach"], "give the pid"),
        (["attach", "--demo", "123"], "--demo plays a recording; a pid needs a job"),
        (["attach", "--demo", "--capture", "3"], "--capture needs a job"),
        (["attach", "--replay", "/nonexistent.jsonl.gz"], "recording not found"),
        (["attach", "--demo", "--speed", "0"], "must be between 0.01 and 1000"),
        (["attach", "123", "--record", "x.gz", "--once"], "drop --once"),
        (["attach", "--demo", "--replay", "x"], "not allowed with argument"),
    ],
)
def test_cli_errors_are_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_cli_live_screen_needs_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    assert not os.isatty(1) or not os.isatty(0)
    assert cli.main(["attach", "--demo"]) == 2
    assert "needs a terminal" in capsys.readouterr().err


def test_a_capture_answered_before_the_request_call_returns_is_not_left_pending() -> None:
    from gputui.protocol.capture import CaptureResult

    state = AttachState()
    state.add(CaptureResult(id="c7"))  # the reader delivered it first
    state.set_capture_wanted("c7")
    snap = state.snapshot()
    assert snap.capture_wanted is None and not capture_busy(snap)
    state.set_capture_wanted("c8")
    assert capture_busy(state.snapshot())


async def test_the_phase_panel_shows_the_step_account(utc: None) -> None:
    """The step's account as a stacked bar under the phases; the demo's capture
    predates the account, so the rest of the step stays unsplit, said so."""

    app = demo_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await play(pilot)
        screen = screen_of(app)
        acct = screen.view.account
        assert acct is not None and acct.capture_step is None and acct.share("rest") > 0.9
        text = screen.query_one(PhaseTable).build(48).plain
        assert "acct █" in text and "unsplit" in text and "*every step" in text
