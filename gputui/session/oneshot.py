"""One-shot looks at hooked jobs: ``attach --once`` (a live job, or a recording
of one), the rank view's ``--once`` (every local rank of a job, or a recording
of them) and ``attach --memory-snapshot``.

A command builds a :class:`OneShot` from its options and makes one call; the
answer is the report's input, values the printed report and its JSON read
(:mod:`gputui.reports.attach`, :mod:`gputui.reports.ranks`,
:mod:`gputui.reports.memory`): the analyzer has run, nothing is left to compute.
How each thing is read (a hook's history, a capture, the job's GPU) is
:mod:`gputui.session.reading`.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from gputui import fmt
from gputui.analysis.auto_capture import steadiness
from gputui.analysis.diagnosis import Diagnosis, job_diagnosis
from gputui.analysis.engine import analyze, analyze_ranks
from gputui.analysis.evidence import (
    MIN_GPU_SAMPLES,
    MIN_STEPS,
    RanksEvidence,
    findings_waiting,
    job_evidence,
    ordinary,
)
from gputui.analysis.finding import Finding
from gputui.analysis.live_account import LiveAccount, since_capture
from gputui.analysis.memory import MemoryGrowth, memory_growth
from gputui.analysis.mfu import Utilisation
from gputui.analysis.roofline import RooflineReport
from gputui.analysis.steps import StepStats, step_stats
from gputui.client.hook import AttachError, HookClient
from gputui.client.job_group import JobGroup
from gputui.protocol.capture import CaptureResult
from gputui.protocol.fields import SchemaError
from gputui.protocol.memsnap import MemorySnapshotResult
from gputui.protocol.requests import CaptureRequest
from gputui.protocol.schema import Hello
from gputui.recording.attach import AttachRecording, read_attach_recording
from gputui.recording.replay import RecordingError
from gputui.session.autocapture import (
    FAILED,
    OFF,
    REPLACED,
    SKIPPED,
    AutoOutcome,
    auto_id,
    auto_request,
    capture_once,
    capture_wait_s,
    outcome_of,
    settle_cost,
    stall_reason,
    wait_turn,
)
from gputui.session.evidence import evidence, job_utilisation
from gputui.session.feeds import CAPTURE_STEPS, DEMO_LABELS, demo_recording
from gputui.session.rank_feeds import ReplayRanksFeed, rank_input
from gputui.session.rank_view import RankInput, RanksSummary, summarize, sync_start
from gputui.session.reading import (
    HELLO_TIMEOUT_S,
    Collected,
    GpuSampling,
    JobFailed,
    capture_live,
    collect_live,
    profile_live,
    snapshot_live,
)

#: connections opened (and histories read) at once for the ranks of a job
RANK_THREADS = 16


@dataclass(frozen=True)
class OnceOptions:
    """What a one-shot look asks of a job (``attach --once``'s options)."""

    window: int = 1000  #: statistics and rules over the newest ``window`` steps
    timeout_s: float = 300.0  #: the longest wait for the job (its hello: HELLO_TIMEOUT_S)
    gpu_seconds: float = 1.0  #: the job's GPU sampled this long for the GPU rules
    #: a capture first (its steps, warm-up and options; the id and the first step
    #: are the session's)
    capture: CaptureRequest | None = None
    quiet: bool = False  #: no progress lines on standard error (``--json``)
    #: without ``capture``: the automatic capture (once the job is steady, unless
    #: it was captured in the last ten minutes); False: ``--no-capture``
    auto_capture: bool = True


@dataclass(frozen=True)
class Recorded:
    """Where the report of a recording comes from (``--json``'s ``recording``)."""

    label: str
    demo: bool
    #: the file ends early (cut off, or still being written): what to say of it
    ends_early: str | None = None


@dataclass(frozen=True)
class JobReport:
    """``attach --once`` of one job: what was read of it and what the analyzer
    made of that, over the newest ``window`` steps."""

    pid: int | None
    got: Collected
    window: int
    stats: StepStats
    findings: tuple[Finding, ...]
    #: what the analyzer could not look at, so a short list reads right
    notes: tuple[str, ...]
    live_account: LiveAccount | None
    utilisation: Utilisation | None
    roofline: RooflineReport | None
    #: the baseline's growth over every memory sample
    memory_growth: MemoryGrowth | None
    recorded: Recorded | None = None
    #: what the automatic capture did (None: a recording, where none is taken)
    auto_capture: AutoOutcome | None = None

    @classmethod
    def of(
        cls,
        pid: int | None,
        got: Collected,
        window: int,
        recorded: Recorded | None = None,
        auto_capture: AutoOutcome | None = None,
    ) -> JobReport:
        ev = evidence(got, window=window)
        stats = step_stats(got.steps[-window:], ordinary_only=True)
        util = None
        if got.capture is not None and got.capture.options.flops:
            util = job_utilisation(got, ev.stats.steps_per_s)
        return cls(
            pid=pid,
            got=got,
            window=window,
            stats=stats,
            findings=tuple(analyze(ev)),
            notes=_notes(got, stats),
            live_account=since_capture(
                ordinary(got.steps[-window:]), got.capture, got.python_profile
            ),
            utilisation=util,
            roofline=ev.roofline,
            memory_growth=memory_growth(got.memory, stats.steps_per_s),
            recorded=recorded,
            auto_capture=auto_capture,
        )


def _notes(got: Collected, stats: StepStats) -> tuple[str, ...]:
    notes = []
    if stats.count < MIN_STEPS:
        notes.append(findings_waiting(stats.count))
    if got.hello.cuda_in_use and len(got.gpu) < MIN_GPU_SAMPLES:
        why = f" ({got.gpu_note})" if got.gpu_note else ""
        notes.append(f"GPU rules need {MIN_GPU_SAMPLES} samples of the job's GPU{why}")
    if got.capture is None:
        notes.append("kernel-level rules need a capture: --capture N")
    else:
        notes.extend(older_capture_notes(got.capture))
    # (a job with no steps yet has none to number its samples with: no older hook)
    if got.memory and stats.count and all(at is None for _s, at in got.memory):
        notes.append(
            "the memory samples carry no step numbers (an older gputui's hook): memory "
            "growth is judged over their times, and only over two minutes or more of them"
        )
    return tuple(notes)


def older_capture_notes(capture: CaptureResult) -> list[str]:
    """What a capture from an older gputui's hook cannot tell."""
    metrics = capture.trace_metrics
    acct = None if metrics is None else metrics.account
    notes = []
    if acct is None:
        notes.append(
            "the capture has no step account (an older gputui's hook): where the step's "
            "time goes is not split, so each cost is held to what the capture does show "
            "(launches and CPU op times, GPU idle time)"
        )
    elif acct.gpu_idle_us is None and acct.gpu_busy_us is not None:
        # (a job without a GPU has no GPU time to split: no older hook there)
        notes.append(
            "the capture's account does not split the GPU's idle time by what the host did "
            "(an older gputui's hook): host-side costs are held to their buckets"
        )
    if metrics is not None and metrics.markers is None:
        notes.append(
            "the capture does not say whether the job is compiled or training (an older "
            "gputui's hook): advice does not follow the job's kind"
        )
    return notes


@dataclass(frozen=True)
class RanksReport:
    """The rank view's ``--once``: the ranks side by side, the rank rules'
    findings, and the report of the rank named (the first of a recording)."""

    job: JobGroup
    summary: RanksSummary
    findings: tuple[Finding, ...]
    problems: tuple[str, ...]  # ranks that did not answer or failed
    named: JobReport
    recorded: Recorded | None = None
    #: the job's one diagnosis across its ranks (None: fewer than two)
    diagnosis: Diagnosis | None = None


@dataclass(frozen=True)
class MemsnapReport:
    """``attach --memory-snapshot``: the snapshot and the analyzer's findings."""

    pid: int
    result: MemorySnapshotResult
    findings: tuple[Finding, ...]


def diagnose(ranks: RanksEvidence, across: Sequence[Finding]) -> Diagnosis | None:
    """The job's one diagnosis from each rank's own findings and the rank rules'."""
    per_rank = [(r.rank if r.rank is not None else r.pid, analyze(r.job)) for r in ranks.ready]
    return job_diagnosis(per_rank, across)


def memsnap_findings(result: MemorySnapshotResult) -> tuple[Finding, ...]:
    """What the analyzer makes of a memory snapshot alone (its growing sites)."""
    return tuple(analyze(job_evidence((), cuda=True, memory_snapshot=result)))


def connect(pid: int, timeout_s: float) -> HookClient:
    """The job's hook, connected (its hello read within HELLO_TIMEOUT_S at most)."""
    return HookClient.connect(pid, timeout=min(timeout_s, HELLO_TIMEOUT_S))


class OneShot:
    """A one-shot look, with its options: each method reads what one command
    asks for and returns its report's input."""

    def __init__(self, options: OnceOptions | None = None) -> None:
        self.options = options or OnceOptions()

    # -- one job ---------------------------------------------------------------------------------
    def job(self, pid: int) -> JobReport:
        """A live job: its history, its Python profile, the capture asked for, and
        its GPU sampled meanwhile (before the capture: a profiler slows the job
        and changes what its GPU does)."""
        o = self.options
        client = connect(pid, o.timeout_s)
        auto = self._auto_outcome()
        try:
            got = Collected(client.hello)
            gpu = GpuSampling(got, o.gpu_seconds)
            collect_live(client, o.window, o.timeout_s, got)
            profile_live(client, got)
            if o.capture is not None:
                gpu.finish()
                capture_live(client, got, o.capture, o.timeout_s, quiet=o.quiet)
            elif auto is None:
                gpu.finish()
                auto = capture_once(client, got, o.timeout_s, o.quiet)
            gpu.finish()
        finally:
            client.close()
        return JobReport.of(client.pid, got, o.window, auto_capture=auto)

    def _auto_outcome(self) -> AutoOutcome | None:
        """The automatic capture's outcome when it is not to run (``--no-capture``,
        or ``--capture N`` in its place); None when it runs."""
        o = self.options
        if o.capture is not None:
            return AutoOutcome(REPLACED, f"--capture {o.capture.steps} asked for one instead")
        if not o.auto_capture:
            return AutoOutcome(OFF, "off (--no-capture)")
        return None

    def memory_snapshot(self, pid: int, steps: int, max_entries: int) -> MemsnapReport:
        """A memory snapshot of the job's next ``steps`` steps."""
        o = self.options
        client = connect(pid, o.timeout_s)
        try:
            result = snapshot_live(client, steps, max_entries, o.timeout_s, o.quiet)
        finally:
            client.close()
        return MemsnapReport(client.pid, result, memsnap_findings(result))

    # -- a recording -----------------------------------------------------------------------------
    def replay(self, path: str | None = None, demo: str | None = None) -> JobReport | RanksReport:
        """The report of a recorded session (the file ``path``, or the embedded
        demo ``demo``) as if attached when it ended: its ranks' of a recording of
        a job's ranks, else its one job's."""
        if demo is not None:
            recording, label = demo_recording(demo), DEMO_LABELS[demo]
        elif path is not None:
            # the rank view names the file as given, one job's report its name
            recording, label = read_attach_recording(path), f"replay of {path}"
            if not recording.ranks:
                label = f"replay of {Path(path).name}"
        else:
            raise ValueError("a recording's path or a demo's name")
        recorded = Recorded(label, demo is not None, recording.ends_early)
        if recording.ranks:
            return self._ranks_replay(recording, recorded)
        try:
            hello = Hello.from_wire(recording.hello)
        except SchemaError as exc:
            raise RecordingError(f"{label}: the recorded hello is invalid ({exc})") from None
        got = Collected.of_recording(hello, recording.messages)
        return JobReport.of(recording.pid, got, self.options.window, recorded)

    def _ranks_replay(self, recording: AttachRecording, recorded: Recorded) -> RanksReport:
        feed = ReplayRanksFeed(recording, recorded.label)
        feed.connect(autoplay=False)
        feed.advance_to(float("inf"))
        snaps = [(link.state.snapshot(), link.hello) for link in feed.links]
        window = self.options.window
        summary = summarize([rank_input(s, h) for s, h in snaps], feed.now(), window)
        first = feed.links[0]
        named = JobReport.of(first.pid, Collected.of_history(first.hello, snaps[0][0]), window)
        findings = tuple(analyze_ranks(summary.evidence))
        return RanksReport(
            feed.job, summary, findings, (), named, recorded, diagnose(summary.evidence, findings)
        )

    # -- the ranks of a live job -----------------------------------------------------------------
    def ranks(self, job: JobGroup, pid: int) -> RanksReport:
        """Every local rank of ``job``: each one's history read over its own
        connection (at once), the same steps captured on every rank when a
        capture is asked for; ``pid`` names the rank whose own report it holds."""
        o = self.options
        pids = list(job.pids)
        with ThreadPoolExecutor(max_workers=min(RANK_THREADS, len(pids))) as pool:
            opened = list(pool.map(self._connect, pids))
        clients = [c for c in opened if isinstance(c, HookClient)]
        problems = [
            f"pid {p}: {fmt.clean(c)}"
            for p, c in zip(pids, opened, strict=True)
            if isinstance(c, str)
        ]
        if not clients:
            raise AttachError(problems[0] if problems else "gputui attach: no rank answered")
        auto = self._auto_outcome()
        try:
            collected = self._collect(clients, problems)
            if o.capture is not None:
                self._capture(clients, collected, o.capture, problems)
            elif auto is None:
                auto = self._auto_capture(clients, collected, problems)
        finally:
            for client in clients:
                client.close()
        inputs = [_rank_input(got, o.window) for got in collected]
        summary = summarize(inputs, time.time(), o.window)
        named = next((k for k, c in enumerate(clients) if c.pid == pid), 0)
        findings = tuple(analyze_ranks(summary.evidence))
        report = JobReport.of(pid, collected[named], o.window, auto_capture=auto)
        return RanksReport(job, summary, findings, tuple(problems), report)

    def _auto_capture(
        self, clients: list[HookClient], collected: list[Collected], problems: list[str]
    ) -> AutoOutcome:
        """The automatic capture of every rank (one synchronized capture), when
        the job was not captured in the last ten minutes, once every rank is
        steady; its cost on the rank it cost most."""
        o = self.options
        deadline = time.monotonic() + o.timeout_s
        pairs = list(zip(clients, collected, strict=True))
        with ThreadPoolExecutor(max_workers=min(RANK_THREADS, len(pairs))) as pool:
            waits = list(pool.map(lambda p: wait_turn(p[0], p[1], deadline, True), pairs))
        skipped = next((w for w in waits if w is not None and w.state == SKIPPED), None)
        if skipped is not None:
            return skipped
        blocked = next((w for w in waits if w is not None), None)
        if blocked is not None:
            return blocked
        why = min((steadiness(got.steps) for got in collected), key=lambda j: j.run_steps).reason
        cid = auto_id(1)
        if not o.quiet:
            print(
                f"automatic capture: every rank, {CAPTURE_STEPS} steps with FLOPs", file=sys.stderr
            )
        try:
            # a job that stops stepping meanwhile (a rank gone, the others
            # stalled in a collective) does not hold the report for --timeout
            wait = max(capture_wait_s(got, deadline) for got in collected)
            self._capture(clients, collected, auto_request(cid), problems, wait)
        except JobFailed as exc:
            return AutoOutcome(FAILED, fmt.clean(str(exc).removeprefix("gputui attach: ")), cid)
        with ThreadPoolExecutor(max_workers=min(RANK_THREADS, len(pairs))) as pool:
            list(pool.map(lambda p: settle_cost(p[0], p[1], cid, deadline), pairs))
        return outcome_of(collected, cid, why)

    def _connect(self, pid: int) -> HookClient | str:
        try:
            return connect(pid, self.options.timeout_s)
        except AttachError as exc:
            return str(exc)

    def _collect(self, clients: list[HookClient], problems: list[str]) -> list[Collected]:
        """Every rank's history, read at once (each over its own connection)."""
        o = self.options

        def one(client: HookClient) -> Collected | str:
            try:
                return collect_live(client, o.window, o.timeout_s)
            except AttachError as exc:
                return str(exc)

        with ThreadPoolExecutor(max_workers=min(RANK_THREADS, len(clients))) as pool:
            results = list(pool.map(one, clients))
        out: list[Collected] = []
        for client, got in zip(clients, results, strict=True):
            if isinstance(got, str):
                problems.append(fmt.clean(got))
                got = Collected(client.hello)
            out.append(got)
        return out

    def _capture(
        self,
        clients: list[HookClient],
        collected: Sequence[Collected],
        ask: CaptureRequest,
        problems: list[str],
        wait_s: float | None = None,
    ) -> None:
        """Profile the same steps on every rank and wait for each result (at most
        ``wait_s``, else ``--timeout``)."""
        o = self.options
        wait = o.timeout_s if wait_s is None else wait_s
        lasts = [got.steps[-1].index if got.steps else None for got in collected]
        recent = [got.status.recent_step_s for got in collected if got.status is not None]
        step_s = max((r for r in recent if r), default=None)
        start = sync_start(lasts, step_s, ask.warmup)
        request = dataclasses.replace(
            ask, id=ask.id or f"ranks-{os.getpid()}-once", start_step=start
        )
        if not o.quiet:
            end = start + ask.steps - 1
            steps = f"step {start}" if end == start else f"steps {start}..{end}"
            print(f"capture: every rank records {steps}", file=sys.stderr)
        failures: dict[int, str] = {}
        lock = threading.Lock()

        def one(pair: tuple[HookClient, Collected]) -> None:
            client, got = pair
            # an automatic capture (``wait_s``) is given up on a rank that stops
            # stepping before it begins; one the user asked for waits on
            stalled = None if wait_s is None else (lambda: stall_reason(got))
            try:
                capture_live(client, got, request, wait, quiet=True, stalled=stalled)
            except AttachError as exc:
                with lock:
                    failures[client.pid] = str(exc)

        with ThreadPoolExecutor(max_workers=min(RANK_THREADS, len(clients))) as pool:
            list(pool.map(one, zip(clients, collected, strict=True)))
        for client in clients:
            if client.pid in failures:
                problems.append(f"pid {client.pid}: {fmt.clean(failures[client.pid])}")
        if len(failures) == len(clients):
            raise JobFailed(next(iter(failures.values())))


def _rank_input(got: Collected, window: int) -> RankInput:
    """What the rank view's rows and rules read of one rank's one-shot read."""
    gone = got.disconnected
    return RankInput(
        hello=got.hello,
        steps=got.steps[-window:],
        status=got.status,
        memory=got.memory,
        capture=got.capture,
        gpu=got.gpu,
        memory_snapshot=got.memory_snapshot,
        roof=got.roof,
        python_profile=got.python_profile,
        compile_report=got.compile_report,
        gone=None if gone is None else gone.reason,
        gone_clean=bool(gone is not None and gone.clean),
    )
