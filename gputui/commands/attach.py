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
import sys
from typing import TYPE_CHECKING, Any

from gputui.commands import args as types
from gputui.errors import GputuiError
from gputui.protocol import memsnap, messages

if TYPE_CHECKING:
    from gputui.session.oneshot import OnceOptions

# The client, the session and the reports are imported where they are used:
# `gputui attach --help` and a refused command line load none of them.

#: the hook keeps this many step records
MAX_WINDOW = 16384


SUMMARY = "show a hooked job's step times and kernels"
DESCRIPTION = "Connect to the gputui hook inside a running PyTorch job."
EXAMPLES = (
    "examples:\n"
    "  gputui attach 12345 --once               steps, memory, kernels (a capture once steady)\n"
    "  gputui attach 12345 --once --no-capture  the same without profiling the job\n"
    "  gputui attach 12345 --capture 5 --once   profile the next 5 steps, print top kernels\n"
    "  gputui attach 12345 --memory-snapshot 5  allocation sites and leaks of 5 steps\n"
    "  gputui attach --inject 12345 --once      load the hook first (Python >= 3.14)\n"
    "  gputui attach 12345                      the live screen (p: capture, m: memory)\n"
    "  gputui attach 12345 --record s.jsonl.gz  the live screen, saving the session\n"
    "  gputui attach --replay s.jsonl.gz        play a saved session\n"
    "  gputui attach --replay s.jsonl.gz --once the report of a saved session\n"
    "  gputui attach --demo                     a real H100 training job, recorded\n"
    "  gputui attach --demo ddp                 a real DDP job on two H100s: the rank view\n"
    "\n"
    "A rank of a multi-rank job (torchrun), or its launcher's pid, attaches to every\n"
    "local rank of the job: the rank view (Enter: one rank), or with --once the\n"
    "ranks side by side; --single attaches to that one process only."
)


def register(subparsers: Any) -> None:
    parser = types.command(subparsers, "attach", SUMMARY, DESCRIPTION, EXAMPLES)
    parser.add_argument("pid", type=types.pid, nargs="?", help="process id of the job")
    types.add_switches(
        parser,
        ("--once", "print a report and exit"),
        ("--json", "with --once or --memory-snapshot: print JSON"),
    )
    parser.add_argument(
        "--capture",
        type=types.integer(1, messages.CAPTURE_MAX_STEPS),
        metavar="N",
        help=f"profile the next N steps first, 1-{messages.CAPTURE_MAX_STEPS}",
    )
    parser.add_argument(
        "--warmup",
        type=types.integer(0, messages.CAPTURE_MAX_WARMUP),
        default=None,
        metavar="K",
        help=f"with --capture: warm-up steps before it, 0-{messages.CAPTURE_MAX_WARMUP} (1)",
    )
    types.add_switches(
        parser,
        ("--shapes", "capture: record input shapes"),
        ("--stacks", "capture: record Python stacks"),
        ("--memory", "capture: profile allocations"),
    )
    parser.add_argument(
        "--flops",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="capture: record FLOPs and shapes (every capture does, unless --no-flops); print "
        "each top op's achieved TFLOP/s and bandwidth on this GPU's roofline (gputui bench's "
        "ceilings, else the datasheet)",
    )
    parser.add_argument(
        "--no-capture",
        action="store_true",
        help="no automatic capture (without it, a job with no capture in the last 10 minutes "
        "is profiled for 5 steps with FLOPs once steady; the screen's a key does the same)",
    )
    parser.add_argument(
        "--memory-snapshot",
        type=types.integer(1, memsnap.MAX_STEPS),
        metavar="N",
        help=f"record CUDA allocation history for the next N steps, 1-{memsnap.MAX_STEPS}; "
        "print allocation sites, growing ones, fragmentation and the snapshot file",
    )
    parser.add_argument(
        "--memory-entries",
        type=types.integer(memsnap.MIN_ENTRIES, memsnap.MAX_ENTRIES),
        default=None,
        metavar="M",
        help=f"with --memory-snapshot: allocator events kept, {memsnap.MIN_ENTRIES:,}-"
        f"{memsnap.MAX_ENTRIES:,} ({memsnap.DEFAULT_ENTRIES:,})",
    )
    parser.add_argument(
        "--window",
        type=types.integer(1, MAX_WINDOW),
        default=1000,
        metavar="N",
        help=f"statistics over the last N steps, 1-{MAX_WINDOW} (1000)",
    )
    types.add_seconds(
        parser,
        "--gpu-seconds",
        0.0,
        60.0,
        "with --once: sample the job's GPU for S s for the analyzer, 0-60 (1)",
    )
    types.add_seconds(
        parser,
        "--timeout",
        0.1,
        3600.0,
        "give up waiting for the job (hello: at most 10 s) after S s, 0.1-3600 (300)",
    )
    types.add_switches(
        parser,
        ("--inject", "load the hook into a running job (Python >= 3.14)"),
        ("--single", "attach to this process only, not to the other ranks of its job"),
    )
    parser.add_argument("--record", metavar="FILE", help="live screen: save the session to FILE")
    played = parser.add_mutually_exclusive_group()
    played.add_argument("--replay", metavar="FILE", help="play a session saved with --record")
    types.add_demo(played, DEMOS, checked=False)
    types.add_speed(parser)
    types.add_ascii(parser)
    parser.set_defaults(func=main)


DEMO_BANNER = "DEMO: a recording of a real training job on an H100, not this machine"
#: the embedded sessions (``--demo NAME``: gputui.session.feeds' DEMO_RESOURCES)
DEMOS = {
    "h100": "a transformer training on an H100",
    "ddp": "a DDP job on two H100s, one rank slower (the rank view)",
}
RANKS_DEMO_BANNER = "DEMO: a recording of a real DDP job on two H100s, not this machine"


#: options given as None unless the user gives them (a flag that does nothing
#: where it is given is refused, never ignored), and their values otherwise
DEFAULTS = {
    "warmup": 1,
    "gpu_seconds": 1.0,
    "timeout": 300.0,
    "memory_entries": memsnap.DEFAULT_ENTRIES,
}


def _given(args: argparse.Namespace) -> set[str]:
    """The DEFAULTS options given on the command line; the others get their defaults."""
    given = {name for name in DEFAULTS if getattr(args, name) is not None}
    for name, value in DEFAULTS.items():
        if name not in given:
            setattr(args, name, value)
    return given


def main(args: argparse.Namespace) -> int:
    _check(args)
    if args.replay is not None or args.demo:
        return _replay_once(args) if args.once else run_replay(args)
    # The live screen's need of a terminal is checked last, once the job is
    # found and connected to: `attach PID --once`, which the refusal names,
    # must not then fail for a reason known before.
    if args.inject:
        from gputui.commands.inject import inject

        inject(args.pid, timeout=min(args.timeout, 30.0))
    elif not args.single:
        from gputui.client.job_group import find_job

        job = find_job(args.pid)
        if job is not None and job.multi_rank:
            from gputui.commands import attach_ranks

            if not args.once:
                return attach_ranks.run_live(
                    job, args.pid, args.record, args.ascii, auto_capture=not args.no_capture
                )
            return attach_ranks.once(job, args.pid, options(args), args.json, args.ascii)
    if args.memory_snapshot is not None:
        from gputui.commands import attach_memory

        steps, entries = args.memory_snapshot, args.memory_entries
        return attach_memory.once(args.pid, steps, entries, options(args), args.json, args.ascii)
    if not args.once:
        return run_live(args)
    return once(args.pid, options(args), args.json, args.ascii)


def _check(args: argparse.Namespace) -> None:
    """Refuse what does nothing where it is given (one line, exit 2); the options
    not given get their defaults."""
    if args.demo is not None and args.demo not in DEMOS:
        if args.demo.isdigit() and args.pid is None:  # "--demo 123": the default demo, a pid
            args.demo, args.pid = next(iter(DEMOS)), types.pid(args.demo)
        else:
            names = ", ".join(repr(name) for name in DEMOS)
            raise GputuiError(
                f"gputui attach: argument --demo: invalid choice: {args.demo!r} (choose from "
                f"{names}) (see 'gputui attach --help')"
            )
    given = _given(args)
    if args.json and not args.once and args.memory_snapshot is None:
        raise GputuiError("gputui attach: --json needs --once (or --memory-snapshot)")
    if "memory_entries" in given and args.memory_snapshot is None:
        raise GputuiError("gputui attach: --memory-entries goes with --memory-snapshot N")
    if args.replay is not None or args.demo:
        # what measures or waits for a live job does nothing on a recording: said, not ignored
        for flag, on in (
            ("a pid", args.pid is not None),
            ("--capture", args.capture is not None),
            ("--warmup", "warmup" in given),
            ("--memory-snapshot", args.memory_snapshot is not None),
            ("--inject", args.inject),
            ("--record", args.record is not None),
            ("--gpu-seconds", "gpu_seconds" in given),
            ("--timeout", "timeout" in given),
            ("--single", args.single),
            ("--no-capture", args.no_capture),
        ):
            if on:
                source = "--demo" if args.demo else "--replay"
                raise GputuiError(f"gputui attach: {source} plays a recording; {flag} needs a job")
        return
    if args.pid is None:
        raise GputuiError("gputui attach: give the pid of a hooked job (or --demo, --replay FILE)")
    _check_live(args, given)


def _check_live(args: argparse.Namespace, given: set[str]) -> None:
    options = [
        flag
        for flag, on in (
            ("--warmup", "warmup" in given),
            ("--shapes", args.shapes),
            ("--stacks", args.stacks),
            ("--memory", args.memory),
            ("--flops" if args.flops else "--no-flops", args.flops is not None),
        )
        if on
    ]
    if options and (args.capture is None or not args.once):
        raise GputuiError(
            f"gputui attach: {options[0]} is a capture option: add --once --capture N "
            "(on the live screen, l opens the roofline and captures with FLOPs)"
        )
    if "gpu_seconds" in given and not args.once:
        raise GputuiError(
            "gputui attach: --gpu-seconds is for --once (the live screen samples the job's "
            "GPU all along)"
        )
    if args.record is not None and args.once:
        raise GputuiError("gputui attach: --record saves the live screen's session; drop --once")
    if args.memory_snapshot is not None and (
        args.capture is not None or args.record is not None or args.no_capture
    ):
        raise GputuiError(
            "gputui attach: --memory-snapshot runs alone (no --capture, --no-capture, --record)"
        )
    if args.no_capture and args.capture is not None:
        raise GputuiError(
            "gputui attach: --capture N asks for a capture and --no-capture for none: "
            "give one of them (--capture N takes the automatic capture's place)"
        )
    if args.record is not None:
        types.check_writable("gputui attach", args.record)


def options(args: argparse.Namespace) -> OnceOptions:
    """What the one-shot look asks of the job."""
    from gputui.protocol.requests import CaptureRequest
    from gputui.session.oneshot import OnceOptions

    capture = None
    if args.capture is not None:
        capture = CaptureRequest(
            steps=args.capture,
            warmup=args.warmup,
            shapes=args.shapes,
            stacks=args.stacks,
            memory=args.memory,
            flops=args.flops is not False,  # every capture carries FLOPs (docs/hook.md)
        )
    return OnceOptions(
        window=args.window,
        timeout_s=args.timeout,
        gpu_seconds=args.gpu_seconds,
        capture=capture,
        quiet=args.json,
        auto_capture=not args.no_capture,
    )


# -- live screen ------------------------------------------------------------------------
def _need_terminal(instead: str) -> None:
    from gputui.commands.tty import need_terminal

    need_terminal("gputui attach", instead)


def run_live(args: argparse.Namespace) -> int:
    from gputui.commands.tty import run_screen
    from gputui.session.oneshot import connect
    from gputui.tui.attach import LiveFeed, make_attach_app

    client = connect(args.pid, args.timeout)
    try:
        _need_terminal(f"gputui attach {args.pid} --once")
        feed = LiveFeed(client.pid, client=client, record_path=args.record)
        app = make_attach_app(feed, ascii_only=args.ascii, auto_capture=not args.no_capture)
        return run_screen(app, feed, args.record)
    finally:
        client.close()


def _ranks_recording(args: argparse.Namespace) -> int | None:
    """A recording of several ranks plays in the rank view."""
    from gputui.recording.attach import read_attach_recording
    from gputui.recording.replay import RecordingError

    try:
        if args.demo:
            from gputui.session.feeds import DEMO_LABELS, demo_recording

            recording = demo_recording(args.demo)
            label, banner = DEMO_LABELS[args.demo], RANKS_DEMO_BANNER
            instead = f"gputui attach --demo {args.demo} --once"
        else:
            recording = read_attach_recording(args.replay)
            label, banner = f"replay of {args.replay}", f"REPLAY: {args.replay}, not this machine"
            instead = "gputui attach --replay FILE --once"
        if not recording.ranks:
            return None
        _need_terminal(instead)
        from gputui.commands import attach_ranks

        return attach_ranks.replay(recording, label, banner, args.speed, args.ascii)
    except RecordingError as exc:
        raise GputuiError(f"gputui attach: {exc}") from None


def run_replay(args: argparse.Namespace) -> int:
    from gputui.recording.replay import RecordingError
    from gputui.tui.attach import ReplayFeed, make_attach_app

    ranks = _ranks_recording(args)
    if ranks is not None:
        return ranks
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
    _need_terminal(
        "gputui attach --demo --once"
        if args.demo
        else f"gputui attach --replay {args.replay} --once"
    )
    notice = feed.recording.ends_early
    app = make_attach_app(feed, ascii_only=args.ascii, banner=banner, notice=notice)
    try:
        app.run()
    finally:
        feed.close()
        if notice is not None:
            print(f"gputui attach: {notice}", file=sys.stderr)
    return int(app.return_code or 0)


# -- --once -------------------------------------------------------------------------------
def once(pid: int, options: OnceOptions, as_json: bool, ascii_only: bool) -> int:
    """The report of a live job."""
    from gputui.reports import attach as attach_report
    from gputui.session.oneshot import OneShot

    attach_report.output(OneShot(options).job(pid), as_json, ascii_only)
    return 0


def _replay_once(args: argparse.Namespace) -> int:
    """The report of a recorded session, as if attached when it ended (its
    ranks side by side, for a recording of a job's ranks)."""
    from gputui.recording.replay import RecordingError
    from gputui.reports import attach as attach_report
    from gputui.reports import ranks as ranks_report
    from gputui.session.oneshot import OneShot, RanksReport

    try:
        report = OneShot(options(args)).replay(args.replay, args.demo)
    except RecordingError as exc:
        raise GputuiError(f"gputui attach: {exc}") from None
    if isinstance(report, RanksReport):
        banner = RANKS_DEMO_BANNER if args.demo else f"REPLAY: {args.replay}, not this machine"
        ranks_report.output(report, args.json, args.ascii, banner)
    else:
        banner = DEMO_BANNER if args.demo else f"REPLAY: {args.replay}, not this machine"
        attach_report.output(report, args.json, args.ascii, banner)
    if report.recorded is not None and report.recorded.ends_early is not None:
        from gputui.reports.text import say

        say(f"gputui attach: {report.recorded.ends_early}")
    return 0
