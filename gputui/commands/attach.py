"""``gputui attach PID``: read a hooked job's step times, memory and kernels.

``--once`` prints a report and exits; ``--capture N --once`` first profiles the
next N steps.  The live screen (no ``--once``) is built by ``make_attach_app``
from a connected :class:`HookClient`; ``--record FILE`` saves that session,
``--replay FILE`` / ``--demo`` play a saved one (no job needed).  ``--inject``
loads the hook into a running job that was started without it (Python >= 3.14,
``sys.remote_exec``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import gputui
from gputui.analysis.steps import Dist, StepStats, step_stats
from gputui.cli import positive_float
from gputui.collectors.hook_client import (
    AttachError,
    CaptureResult,
    CaptureStatus,
    Disconnected,
    HookClient,
    MemoryBatch,
    MemorySample,
    Status,
    StepBatch,
    StepRecord,
    Synced,
)
from gputui.errors import GputuiError
from gputui.protocol import find_socket, paths

SYNC_TIMEOUT_S = 10.0
FAILED_STATES = ("refused", "busy", "cancelled", "failed")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "attach",
        help="show a hooked job's step times and kernels",
        description="Connect to the gputui hook inside a running PyTorch job.",
        epilog=(
            "examples:\n"
            "  gputui attach 12345 --once               step statistics, memory\n"
            "  gputui attach 12345 --capture 5 --once   profile 5 steps, print top kernels\n"
            "  gputui attach --inject 12345 --once      load the hook first (Python >= 3.14)\n"
            "  gputui attach 12345                      the live screen (p: capture)\n"
            "  gputui attach 12345 --record s.jsonl.gz  the live screen, saving the session\n"
            "  gputui attach --replay s.jsonl.gz        play a saved session\n"
            "  gputui attach --demo                     a real H100 training job, recorded"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("pid", type=int, nargs="?", help="process id of the job")
    parser.add_argument("--once", action="store_true", help="print a report and exit")
    parser.add_argument("--json", action="store_true", help="with --once: print JSON")
    parser.add_argument(
        "--capture", type=int, metavar="N", help="profile the next N steps (1-200) first"
    )
    parser.add_argument("--warmup", type=int, default=1, metavar="K", help="warm-up steps (1)")
    parser.add_argument("--shapes", action="store_true", help="capture: record input shapes")
    parser.add_argument("--stacks", action="store_true", help="capture: record Python stacks")
    parser.add_argument("--memory", action="store_true", help="capture: profile allocations")
    parser.add_argument(
        "--window", type=int, default=1000, metavar="N", help="statistics over the last N steps"
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, metavar="S", help="give up waiting after S s"
    )
    parser.add_argument(
        "--inject", action="store_true", help="load the hook into a running job (Python >= 3.14)"
    )
    parser.add_argument("--record", metavar="FILE", help="live screen: save the session to FILE")
    played = parser.add_mutually_exclusive_group()
    played.add_argument("--replay", metavar="FILE", help="play a session saved with --record")
    played.add_argument(
        "--demo", action="store_true", help="play the embedded recording of a real H100 job"
    )
    parser.add_argument(
        "--speed", type=positive_float, default=1.0, metavar="X", help="replay speed (default 1)"
    )
    parser.add_argument(
        "--ascii", action="store_true", help="draw with ASCII characters only (plain terminals)"
    )
    parser.set_defaults(func=main)


DEMO_BANNER = "DEMO: a recording of a real training job on an H100, not this machine"


def main(args: argparse.Namespace) -> int:
    playing = args.replay is not None or args.demo
    if playing:
        for flag, given in (
            ("a pid", args.pid is not None),
            ("--once", args.once),
            ("--capture", args.capture is not None),
            ("--inject", args.inject),
            ("--record", args.record is not None),
        ):
            if given:
                source = "--demo" if args.demo else "--replay"
                raise GputuiError(f"gputui attach: {source} plays a recording; {flag} needs a job")
        return run_replay(args)
    if args.pid is None:
        raise GputuiError("gputui attach: give the pid of a hooked job (or --demo, --replay FILE)")
    if args.json and not args.once:
        raise GputuiError("gputui attach: --json needs --once")
    if args.capture is not None and not 1 <= args.capture <= 200:
        raise GputuiError("gputui attach: --capture must be between 1 and 200 steps")
    if args.record is not None and args.once:
        raise GputuiError("gputui attach: --record saves the live screen's session; drop --once")
    if not args.once:
        _need_terminal(f"gputui attach {args.pid} --once")
    if args.inject:
        inject(args.pid, timeout=min(args.timeout, 30.0))
    client = HookClient.connect(args.pid)
    try:
        if not args.once:
            return run_live(client, args)
        return once(args, client)
    finally:
        client.close()


# -- live screen ------------------------------------------------------------------------
def _need_terminal(instead: str) -> None:
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise GputuiError(
            f"gputui attach: the live screen needs a terminal; for a printed report use '{instead}'"
        )


def run_live(client: HookClient, args: argparse.Namespace) -> int:
    from gputui.tui.attach import LiveFeed, make_attach_app

    feed = LiveFeed(client.pid, client=client, record_path=args.record)
    app = make_attach_app(feed, ascii_only=args.ascii)
    try:
        app.run()
    finally:
        feed.close()
    if feed.recorder is not None:
        print(f"saved {feed.recorder.count} messages to {args.record}", file=sys.stderr)
    return int(app.return_code or 0)


def run_replay(args: argparse.Namespace) -> int:
    from gputui.collectors.replay import RecordingError
    from gputui.tui.attach import ReplayFeed, make_attach_app

    try:
        if args.demo:
            feed, banner = ReplayFeed.demo(speed=args.speed), DEMO_BANNER
        else:
            feed = ReplayFeed.from_file(args.replay, speed=args.speed)
            banner = f"REPLAY: {args.replay}, not this machine"
    except RecordingError as exc:
        raise GputuiError(f"gputui attach: {exc}") from None
    if not feed.recording.messages:
        raise GputuiError(f"gputui attach: {args.replay} holds no messages")
    _need_terminal("gputui attach PID --once")
    app = make_attach_app(feed, ascii_only=args.ascii, banner=banner)
    try:
        app.run()
    finally:
        feed.close()
    return int(app.return_code or 0)


# -- --once -------------------------------------------------------------------------------
class _Collected:
    def __init__(self) -> None:
        self.steps: list[StepRecord] = []
        self.missed = 0
        self.status: Status | None = None
        self.memory: MemorySample | None = None
        self.capture: CaptureResult | None = None
        self.disconnected: Disconnected | None = None

    def add(self, event: Any) -> None:
        if isinstance(event, StepBatch):
            self.steps.extend(event.steps)
            self.missed += event.missed
        elif isinstance(event, Status):
            self.status = event
        elif isinstance(event, MemoryBatch) and event.samples:
            self.memory = event.samples[-1]
        elif isinstance(event, CaptureResult):
            self.capture = event
        elif isinstance(event, Disconnected):
            self.disconnected = event


def _exited(pid: int, event: Disconnected, during: str) -> int:
    print(f"gputui attach: job {pid} exited {during} ({event.reason})", file=sys.stderr)
    return 1


def once(args: argparse.Namespace, client: HookClient) -> int:
    got = _Collected()
    client.subscribe(history=max(0, args.window), memory=True)
    client.start()
    deadline = time.monotonic() + SYNC_TIMEOUT_S
    while True:
        event = client.get(timeout=max(0.0, deadline - time.monotonic()))
        if event is None:
            raise AttachError(f"gputui attach: job {client.pid} did not answer in time")
        got.add(event)
        if isinstance(event, Disconnected):
            return _exited(client.pid, event, "while reading its history")
        if isinstance(event, Synced):
            break
    if args.capture is not None:
        rc = _capture(args, client, got)
        if rc:
            return rc
    stats = step_stats(got.steps[-args.window :] if args.window > 0 else [])
    if args.json:
        print(json.dumps(report_dict(client, got, stats), indent=2, allow_nan=False))
    else:
        print_report(client, got, stats)
    return 0


def _capture(args: argparse.Namespace, client: HookClient, got: _Collected) -> int:
    cid = client.request_capture(
        steps=args.capture,
        warmup=args.warmup,
        shapes=args.shapes,
        stacks=args.stacks,
        memory=args.memory,
    )
    quiet = args.json
    deadline = time.monotonic() + args.timeout
    while True:
        remaining = deadline - time.monotonic()
        event = client.get(timeout=max(0.0, remaining)) if remaining > 0 else None
        if event is None:
            try:
                client.cancel_capture()
            except AttachError:
                pass
            print(
                f"gputui attach: capture did not finish within {args.timeout:g} s "
                "(is the job still stepping?)",
                file=sys.stderr,
            )
            return 1
        if isinstance(event, CaptureResult) and event.id != cid:
            continue  # someone else's capture (or a replay of an older one)
        got.add(event)
        if isinstance(event, Disconnected):
            return _exited(client.pid, event, "before the capture finished")
        if isinstance(event, CaptureStatus) and event.id == cid:
            if event.state in FAILED_STATES:
                print(f"gputui attach: capture {event.state}: {event.reason}", file=sys.stderr)
                return 1
            if not quiet:
                where = "" if event.step is None else f" at step {event.step}"
                print(f"capture: {event.state}{where}", file=sys.stderr)
        if isinstance(event, CaptureResult):
            if event.error:
                print(f"gputui attach: capture failed: {event.error}", file=sys.stderr)
                return 1
            return 0


def _clean(obj: Any) -> Any:
    """JSON-safe copy: NaN/inf (empty distributions) become null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def report_dict(client: HookClient, got: _Collected, stats: StepStats) -> dict[str, Any]:
    return _clean(
        {
            "pid": client.pid,
            "hello": dict(client.hello.raw),
            "status": dict(got.status.raw) if got.status else None,
            "steps_received": len(got.steps),
            "missed": got.missed,
            "stats": stats.as_dict(),
            "memory": None if got.memory is None else got.memory.__dict__,
            "capture": None if got.capture is None else dict(got.capture.raw),
        }
    )


def _ms(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    return f"{seconds * 1000:.2f}"


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def print_report(client: HookClient, got: _Collected, stats: StepStats) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(highlight=False)
    h = client.hello
    console.print(f"[bold]pid {h.pid}[/bold]  {escape(' '.join(h.argv))}")
    env = f"python {h.python}, torch {h.torch or '-'}"
    if h.cuda:
        env += f" (CUDA {h.cuda})"
    if h.device:
        env += f", device {h.device.get('index')} {escape(str(h.device.get('name', '')))}"
    if h.rank is not None:
        env += f", rank {h.rank}/{h.world_size} (local {h.local_rank})"
    console.print(env)
    status = got.status
    if status is not None:
        if status.errors:
            console.print(f"[red]hook errors:[/red] {escape('; '.join(status.errors))}")
        if status.phases_coarse:
            console.print(
                f"[yellow]coarse phases:[/yellow] {escape(' '.join(status.coarse_reasons))}"
            )
    if not stats.count:
        console.print(
            "no steps recorded yet"
            + (
                f" ({stats.excluded_profiled} profiled steps left out)"
                if stats.excluded_profiled
                else ""
            )
        )
    else:
        line = (
            f"steps {stats.first_index}..{stats.last_index} ({stats.count}"
            + (f", {stats.excluded_profiled} profiled left out" if stats.excluded_profiled else "")
            + (f", {got.missed} missed" if got.missed else "")
            + f"): {stats.steps_per_s:.2f} steps/s"
        )
        if stats.samples_per_s is not None:
            inferred = " (batch size inferred)" if stats.samples_inferred else ""
            line += f", {stats.samples_per_s:,.0f} samples/s{inferred}"
        console.print(line)
        console.print(_dist_table("wall time (ms)", stats.wall, stats.phases, Table))
        if stats.gpu is not None:
            console.print(_dist_table("GPU time (ms)", stats.gpu, stats.gpu_phases, Table))
    if got.memory is not None:
        m = got.memory
        console.print(
            f"memory (device {m.device}): allocated {_gib(m.allocated)}, reserved "
            f"{_gib(m.reserved)}, peak {_gib(m.peak_allocated)}, retries {m.alloc_retries}, "
            f"OOMs {m.ooms}"
        )
    if got.capture is not None:
        _print_capture(console, got.capture, Table, escape)


def _dist_table(title: str, total: Dist | None, phases: tuple[Dist, ...], table_cls: Any) -> Any:
    table = table_cls(title=title, title_justify="left", box=None, header_style="bold")
    for col in ("phase", "mean", "p50", "p90", "p99", "share"):
        table.add_column(col, justify="left" if col == "phase" else "right")
    rows = list(phases) + ([total] if total is not None else [])
    for d in rows:
        table.add_row(
            d.name, _ms(d.mean), _ms(d.p50), _ms(d.p90), _ms(d.p99), f"{d.share * 100:.1f}%"
        )
    return table


def _print_capture(console: Any, cap: CaptureResult, table_cls: Any, escape: Any) -> None:
    raw = cap.raw
    when = " (from an earlier capture)" if cap.replay else ""
    console.print(
        f"[bold]capture[/bold] steps {cap.first_step}..{cap.last_step}{when}: "
        f"{raw.get('events', 0)} events, profiler stop {raw.get('stop_ms', '-')} ms"
    )
    if cap.kernels:
        table = table_cls(
            title="top GPU kernels", title_justify="left", box=None, header_style="bold"
        )
        for col in ("kernel", "class", "calls", "total ms", "mean us", "share"):
            table.add_column(col, justify="left" if col in ("kernel", "class") else "right")
        for k in cap.kernels[:15]:
            table.add_row(
                escape(str(k["name"])[:70]),
                k["class"],
                str(k["calls"]),
                f"{k['total_us'] / 1000:.3f}",
                f"{k['mean_us']:.1f}",
                f"{k['share'] * 100:.1f}%",
            )
        console.print(table)
    if cap.gpu_time:
        g = cap.gpu_time
        console.print(
            f"GPU time: span {g['span_us'] / 1000:.2f} ms, busy {g['busy_us'] / 1000:.2f} ms, "
            f"idle {g['idle_us'] / 1000:.2f} ms; compute {g['compute_us'] / 1000:.2f}, comm "
            f"{g['communication_us'] / 1000:.2f}, memcpy {g['memcpy_us'] / 1000:.2f}, memset "
            f"{g['memset_us'] / 1000:.2f} ms"
        )
    if cap.cpu_ops:
        table = table_cls(
            title="top CPU ops (self time)", title_justify="left", box=None, header_style="bold"
        )
        for col in ("op", "calls", "self ms", "total ms", "share"):
            table.add_column(col, justify="left" if col == "op" else "right")
        for op in cap.cpu_ops[:15]:
            table.add_row(
                escape(str(op["name"])[:70]),
                str(op["calls"]),
                f"{op['self_us'] / 1000:.3f}",
                f"{op['total_us'] / 1000:.3f}",
                f"{op['share'] * 100:.1f}%",
            )
        console.print(table)
    if cap.trace_path:
        console.print(f"trace: {escape(cap.trace_path)} (open in https://ui.perfetto.dev)")
    elif raw.get("trace_error"):
        console.print(f"[yellow]trace not written:[/yellow] {escape(raw['trace_error'])}")


# -- --inject -----------------------------------------------------------------------------
_PAYLOAD = """\
import sys, traceback
_result = {result!r}
try:
    if "gputui" not in sys.modules:
        import importlib.util
        _spec = importlib.util.spec_from_file_location(
            "gputui", {init!r}, submodule_search_locations=[{pkg!r}])
        _mod = importlib.util.module_from_spec(_spec)
        sys.modules["gputui"] = _mod
        _spec.loader.exec_module(_mod)
    import gputui.hook
    _hook = gputui.hook.install()
    if _hook is None:
        _msg = "error: install() failed"
    elif _hook.serve_error:
        _msg = "error: " + _hook.serve_error
    else:
        _msg = "ok"
except BaseException:
    _msg = "error: " + traceback.format_exc()
with open(_result + ".tmp", "w") as _fh:
    _fh.write(_msg)
import os
os.replace(_result + ".tmp", _result)
"""


def _interpreter_version(exe: str, pid: int) -> tuple[int, int]:
    try:
        out = subprocess.run(
            [exe, "-I", "-c", "import sys; print('%d %d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AttachError(
            f"gputui attach --inject: cannot run process {pid}'s interpreter ({exc})"
        ) from None
    parts = out.stdout.split()
    if out.returncode != 0 or len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise AttachError(f"gputui attach --inject: process {pid} does not look like Python")
    return int(parts[0]), int(parts[1])


def inject(pid: int, timeout: float = 30.0) -> None:
    """Load the hook into running process ``pid`` with ``sys.remote_exec``."""
    if not paths.pid_alive(pid):
        raise AttachError(f"gputui attach: no process with pid {pid}")
    if find_socket(pid) is not None:
        return  # already hooked
    exe = f"/proc/{pid}/exe"
    major, minor = _interpreter_version(exe, pid)
    if (major, minor) < (3, 14):
        raise AttachError(
            f"gputui attach --inject: process {pid} runs Python {major}.{minor}; loading the "
            "hook into a running job needs Python >= 3.14 (sys.remote_exec). Restart it with "
            "'gputui run -- python ...' or add 'import gputui.hook; gputui.hook.install()'"
        )
    pkg = os.path.dirname(os.path.abspath(gputui.__file__))
    work = tempfile.mkdtemp(prefix="gputui-inject-")  # 0700, ours
    try:
        result = os.path.join(work, "result")
        script = os.path.join(work, "payload.py")
        with open(script, "w") as fh:
            fh.write(_PAYLOAD.format(result=result, init=os.path.join(pkg, "__init__.py"), pkg=pkg))
        call = subprocess.run(
            [exe, "-I", "-c", f"import sys; sys.remote_exec({pid}, {script!r})"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        if call.returncode != 0:
            last = (call.stderr.strip().splitlines() or ["unknown error"])[-1]
            raise AttachError(
                f"gputui attach --inject: sys.remote_exec on {pid} failed: {last} (needs ptrace "
                "permission: see /proc/sys/kernel/yama/ptrace_scope; the job must not set "
                "PYTHON_DISABLE_REMOTE_DEBUG)"
            )
        deadline = time.monotonic() + timeout
        while not os.path.exists(result):
            if time.monotonic() > deadline or not paths.pid_alive(pid):
                raise AttachError(
                    f"gputui attach --inject: process {pid} did not run the hook within "
                    f"{timeout:g} s (the main thread runs injected code between bytecodes; "
                    "it may be blocked in native code)"
                )
            time.sleep(0.05)
        with open(result) as fh:
            outcome = fh.read()
        if outcome != "ok":
            raise AttachError(f"gputui attach --inject: the hook failed in {pid}: {outcome}")
        while find_socket(pid) is None:
            if time.monotonic() > deadline:
                raise AttachError(f"gputui attach --inject: process {pid} opened no socket")
            time.sleep(0.05)
    finally:
        shutil.rmtree(work, ignore_errors=True)
