"""Multi-rank jobs for real: `gputui run -- torchrun --nproc-per-node 2` (and 4),
gloo, DDP on a small model, one rank planted slow in its data loading.

One job per size is shared by the tests of this module (torchrun starts in
10-25 s on two cores).  The 2-rank job ends hung (its slow rank stops in its
data loader for good); the 4-rank job ends with a rank gone.  What is checked:
`ls` lists the job once; `attach` by any rank's pid or the launcher's reads every
rank; the straggler finding names the slow rank, and the others' measured wait
is within 20% of how much longer the slow rank's data loading measured in the
same steps (the planted delay on an idle machine, more on a loaded one, where
sleeps overshoot); the same steps are profiled on every rank;
the rank view opens a rank and stays up while the job hangs, saying who is stuck
where; a rank that exits is reported as gone.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gputui.client.job_group import parent_pid
from gputui.protocol import list_sockets
from gputui.recording.attach import read_attach_recording
from gputui.session import rank_view as ranks_model
from tests.helpers import hookutil
from tests.helpers.deadlines import START_S, WAIT_S
from tests.helpers.synthetic import wait_for

pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # torchrun jobs

JOB = hookutil.REPO / "bench" / "jobs" / "train_ddp_cpu.py"
TORCHRUN = Path(sys.executable).with_name("torchrun")
#: the planted delay: the slow rank's data loading takes this much longer
DELAY_S = 0.02
#: steps every rank has sent before the straggler's numbers are checked: means
#: over that many are what the others wait, not a hiccup of the first steps
STEPS = 200


@dataclass
class Torchrun:
    proc: subprocess.Popen[str]
    env: dict[str, str]
    ranks: list[int]  # pids, by socket discovery (rank order is the job's business)
    files: Path

    @property
    def launcher(self) -> int:
        return self.proc.pid  # gputui run execs torchrun: the agent keeps the pid

    def gputui(self, *args: str) -> Any:
        out = hookutil.gputui(self.env, *args)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout) if "--json" in args else out.stdout

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # torchrun stops its workers
            try:
                self.proc.wait(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        for pid in self.ranks:  # a rank torchrun could not stop (stuck in a syscall)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.proc.communicate(timeout=WAIT_S)


def start(nproc: int, files: Path, *job_args: str) -> Iterator[Torchrun]:
    with hookutil.isolated_dirs() as dirs, pytest.MonkeyPatch.context() as mp:
        env = hookutil.make_env(*dirs)
        # The in-process viewers look where the job's hooks put their sockets.
        mp.setenv("GPUTUI_SOCKET_DIR", env["GPUTUI_SOCKET_DIR"])
        cmd = [
            sys.executable, "-m", "gputui", "run", "--",
            str(TORCHRUN), "--standalone", f"--nproc-per-node={nproc}",
            str(JOB), "--steps", "0", "--data-sleep", "0.002", *job_args,
        ]  # fmt: skip
        proc = subprocess.Popen(
            cmd, env=env, cwd=str(hookutil.REPO), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        job = Torchrun(proc, env, [], files)

        def up() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"torchrun exited:\n{proc.communicate()[0]}")
            job.ranks = [p for p in list_sockets() if parent_pid(p) == proc.pid]
            return len(job.ranks) == nproc

        try:
            hookutil.wait_for(up, START_S, f"{nproc} ranks to open their sockets")
            yield job
        finally:
            job.stop()


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Torchrun]:
    files = tmp_path_factory.mktemp("two")
    yield from start(
        2, files, "--slow-rank", "1", "--slow-data-s", str(DELAY_S),
        "--hang-rank", "1", "--hang-file", str(files / "hang"),
    )  # fmt: skip


@pytest.fixture(scope="module")
def four(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Torchrun]:
    files = tmp_path_factory.mktemp("four")
    yield from start(
        4, files, "--slow-rank", "2", "--slow-data-s", str(DELAY_S),
        "--stop-rank", "3", "--stop-file", str(files / "stop"),
    )  # fmt: skip


def straggler_report(job: Torchrun, pid: int) -> dict[str, Any]:
    """``attach PID --once --json`` once the straggler rule has named the
    straggler and every rank has sent STEPS steps."""
    found: dict[str, Any] = {}

    def named() -> bool:
        found.update(job.gputui("attach", str(pid), "--once", "--json"))
        return all(r["steps_received"] >= STEPS for r in found["ranks"]) and any(
            f["rule"] == "ranks.straggler" for f in found["job"]["findings"]
        )

    hookutil.wait_for(named, START_S, "the straggler finding")
    return found


def check_straggler(report: dict[str, Any], slow_rank: int, world: int) -> None:
    ranks = {r["rank"]: r for r in report["ranks"]}
    assert sorted(ranks) == list(range(world)) and report["job"]["world_size"] == world
    assert report["job"]["missing_ranks"] == 0 and report["job"]["missing_note"] is None
    (f,) = [f for f in report["job"]["findings"] if f["rule"] == "ranks.straggler"]
    assert f["scope"] == f"rank {slow_rank}" and "data +" in f["evidence"]
    assert "data loading" in f["fix"]
    slow = ranks[slow_rank]
    for r, row in ranks.items():
        if r == slow_rank:
            continue
        # What this rank waits for the slow one: its comm time beyond the slow
        # rank's own (the transfer both pay).
        wait = row["comm_s"] - slow["comm_s"]
        # The control, measured over the same steps: how much longer the slow
        # rank's data loading took.  On an idle machine that is the planted
        # delay; on a loaded one its sleeps overshoot, and what the others wait
        # grows with it.
        extra = data_s(slow) - data_s(row)
        assert extra > 0.5 * DELAY_S, (r, extra)
        assert 0.8 * extra <= wait <= 1.2 * extra, (r, wait, extra)
        assert row["compute_s"] < slow["compute_s"] - 0.8 * extra, (r, row, slow)


def data_s(row: dict[str, Any]) -> float:
    """A rank's mean seconds per step in its data loading (its share of the
    mean step, which is its compute and comm time)."""
    return float(row["phase_shares"]["data"]) * (row["compute_s"] + row["comm_s"])


# -- two ranks -----------------------------------------------------------------------------
def test_the_automatic_capture_profiles_every_rank_at_once(two: Torchrun) -> None:
    """The job has no capture: `attach LAUNCHER --once` takes one of every rank,
    the same steps, with FLOPs, and says what it cost (the first test of the
    job: the others find this capture recent)."""
    report = two.gputui("attach", str(two.launcher), "--once", "--json")
    auto = report["auto_capture"]
    assert auto["state"] == "done", auto
    caps = [r["capture"] for r in report["ranks"]]
    assert all(c is not None and c["cpu_ops"] for c in caps), caps
    assert len({(c["first_step"], c["last_step"]) for c in caps}) == 1
    named = report["capture"]  # the rank named's whole capture
    assert named["id"] == auto["id"] and named["auto"] and named["options"]["flops"]
    assert auto["cost"] is not None and auto["cost"]["profiled_steps"] >= 5
    text = two.gputui("attach", str(two.launcher), "--once")
    assert "automatic capture: not needed: the job was captured at" in text


def test_ls_lists_the_job_once(two: Torchrun) -> None:
    (entry,) = two.gputui("ls", "--json")
    assert entry["world_size"] == 2 and entry["local_ranks"] == 2
    assert entry["launcher_pid"] == two.launcher
    assert sorted(r["pid"] for r in entry["ranks"]) == sorted(two.ranks)
    assert [r["rank"] for r in entry["ranks"]] == [0, 1]
    text = two.gputui("ls")
    assert "0-1/2" in text and str(two.launcher) in text


def test_attach_by_the_launcher_names_the_straggler(two: Torchrun) -> None:
    report = straggler_report(two, two.launcher)
    check_straggler(report, slow_rank=1, world=2)
    assert report["job"]["launcher_pid"] == two.launcher
    text = two.gputui("attach", str(two.launcher), "--once")
    assert "rank 1 is the straggler" in text and "job: 2 local ranks of 2" in text


def test_the_same_steps_are_profiled_on_every_rank(two: Torchrun) -> None:
    report = two.gputui("attach", str(two.ranks[0]), "--once", "--capture", "2", "--json")
    spans = {(r["capture"]["first_step"], r["capture"]["last_step"]) for r in report["ranks"]}
    assert len(spans) == 1, spans
    ((first, last),) = spans
    assert last - first == 1
    assert all(r["capture"]["cpu_ops"] for r in report["ranks"])


async def test_the_rank_view_while_a_rank_hangs(
    two: Torchrun, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from gputui.client.job_group import find_job
    from gputui.session.rank_feeds import LiveRanksFeed
    from gputui.tui.attach.rank_screen import AlertPanel, RanksApp
    from gputui.tui.attach.screen import AttachScreen

    job = find_job(two.launcher)
    assert job is not None and job.multi_rank
    record = tmp_path / "ranks.jsonl.gz"
    feed = LiveRanksFeed(job, record_path=record)
    feed.watch_gpu = False
    app = RanksApp(feed)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.ranks_screen
        await wait_for(pilot, lambda: screen.first_full_at is not None)
        await wait_for(pilot, lambda: any(f.rule == "ranks.straggler" for f in screen.findings))
        assert screen.summary is not None and len(screen.summary.rows) == 2
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, AttachScreen))
        rank_screen = app.screen
        assert isinstance(rank_screen, AttachScreen)
        await wait_for(pilot, lambda: rank_screen.view is not None and rank_screen.view.stats.count)
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen)
        # The slow rank's data loader stops for good; rank 0 waits in its all-reduce.
        monkeypatch.setattr(ranks_model, "STALL_S", 1.0)
        (two.files / "hang").touch()
        alert = screen.query_one(AlertPanel)

        def says_who() -> bool:
            text = alert.build(200).plain
            return "rank 1 stuck in data" in text and "rank 0 waiting in backward" in text

        await wait_for(pilot, says_who)
        before = screen.refreshes
        await wait_for(pilot, lambda: screen.refreshes > before + 1)  # still drawing
        rows = {r.rank: r for r in screen.summary.rows}
        assert rows[1].state == ranks_model.STALLED and rows[0].state == ranks_model.STALLED
    feed.close()
    # The session was recorded rank by rank, and plays back as the same job.
    recording = read_attach_recording(record)
    assert sorted(r.pid for r in recording.ranks) == sorted(job.pids)
    for stream in recording.ranks:
        assert any(m["type"] == "steps" and m["steps"] for _t, m in stream.messages)


# -- four ranks -------------------------------------------------------------------------------
async def test_the_rank_view_captures_every_rank_at_once(
    four: Torchrun, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rank view of a job with no capture: one synchronized automatic
    capture of every rank, and what it cost on the line under the capture's.
    The capture starts a lead ahead of the leading rank, long enough for the
    request to reach every rank first; on a loaded machine half a second was
    not (one rank got it a step late and recorded from then on), so the lead
    here is generous."""
    from gputui.client.job_group import find_job
    from gputui.session import rank_view
    from gputui.session.autocapture import DONE
    from gputui.session.rank_feeds import LiveRanksFeed
    from gputui.tui.attach.rank_screen import RankCapturePanel, RanksApp

    monkeypatch.setattr(rank_view, "SYNC_LEAD_S", 5.0)

    job = find_job(four.launcher)
    assert job is not None and job.multi_rank
    feed = LiveRanksFeed(job)
    feed.watch_gpu = False
    app = RanksApp(feed)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.ranks_screen
        auto = screen.auto
        assert auto is not None
        await wait_for(pilot, lambda: auto.state == DONE, START_S)
        caps = [link.state.snapshot().capture for link in feed.links]
        assert all(c is not None and c.id == auto.capture_id and c.auto for c in caps), caps
        assert len({(c.first_step, c.last_step) for c in caps if c is not None}) == 1
        panel = screen.query_one(RankCapturePanel)
        await wait_for(pilot, lambda: "automatic capture with FLOPs on rank" in panel.plain)
        assert "cost the job" in panel.plain
    feed.close()


def test_four_ranks(four: Torchrun) -> None:
    (entry,) = four.gputui("ls", "--json")
    assert entry["world_size"] == 4 and entry["local_ranks"] == 4
    report = straggler_report(four, four.ranks[-1])
    check_straggler(report, slow_rank=2, world=4)


def test_a_rank_that_exits(four: Torchrun, monkeypatch: pytest.MonkeyPatch) -> None:
    from gputui.client.job_group import find_job
    from gputui.session.rank_feeds import LiveRanksFeed, rank_input

    job = find_job(four.launcher)
    assert job is not None and len(job.pids) == 4
    feed = LiveRanksFeed(job)
    feed.watch_gpu = False
    monkeypatch.setattr(ranks_model, "STALL_S", 1.0)
    try:
        feed.connect()
        hookutil.wait_for(
            lambda: all(link.state.snapshot().synced for link in feed.links), WAIT_S, "history"
        )
        (four.files / "stop").touch()  # rank 3 leaves its loop and exits

        def summary() -> ranks_model.RanksSummary:
            snaps = [(link.state.snapshot(), link.hello) for link in feed.links]
            return ranks_model.summarize([rank_input(s, h) for s, h in snaps], feed.now())

        first: list[ranks_model.RanksSummary] = []

        def gone() -> ranks_model.RanksSummary | None:
            s = summary()
            states = {r.rank: r.state for r in s.rows}
            if states[3] != ranks_model.EXITED:
                return None
            if not first:
                first.append(s)
            # Rank 3 left without its collectives: the others wait for it in
            # the all-reduce until gloo sees its connections close and ends
            # them too (how soon depends on the machine's load).
            settled = all(states[r] in (ranks_model.STALLED, ranks_model.EXITED) for r in (0, 1, 2))
            return s if settled else None

        # (a rank counts as stalled after ten of its usual steps, and gloo ends
        # the others when it sees rank 3's connections close: a loaded machine
        # stretches both, so this waits as long as the ranks took to start)
        s = hookutil.wait_for(gone, START_S, "rank 3 gone and the others waiting or gone")
        assert first[0].alert is not None
        assert "rank 3 exited (the job is exiting)" in first[0].alert
        assert s.alert is not None and "rank 3 exited (the job is exiting)" in s.alert
        stalled = [r.rank for r in s.rows if r.state == ranks_model.STALLED]
        if stalled:
            # the ranks that reached the all-reduce wait in backward; the slow
            # rank may still be in its data loading when it counts as stalled
            # (on a loaded machine its phase lasts past the 1 s): each stalled
            # rank is named with the phase it is in
            assert "waiting in backward" in s.alert
            named = {
                int(rank)
                for group in re.findall(r"ranks? ([\d,]+) (?:stuck|waiting) in \w+", s.alert)
                for rank in group.split(",")
            }
            assert set(stalled) <= named
    finally:
        feed.close()
    # Afterwards the launcher's pid reads the ranks left, and says how many of
    # its four have gone; once gloo has ended them all, the job is gone and
    # attach says so on one line.
    out = hookutil.gputui(four.env, "attach", str(four.launcher), "--once", "--json")
    if out.returncode == 0:
        report = json.loads(out.stdout)
        left = len(report["ranks"])
        assert 1 <= left <= 3 and report["job"]["missing_ranks"] == 4 - left, report["job"]
        assert report["job"]["remote_ranks"] == 0
        note = report["job"]["missing_note"]
        assert f"{4 - left} of this node's 4 ranks have no hook socket" in note
    else:
        assert out.returncode == 2, out.stderr
        assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
