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
from typing import TYPE_CHECKING, Any

from gputui.commands import args as types
from gputui.errors import GputuiError
from gputui.protocol import memsnap, messages

if TYPE_CHECKING:
    from gputui.analysis.steps import StepStats
    from gputui.client.hook import HookClient
    from gputui.session.oneshot import Collected

# The client, the session and the reports are imported where they are used:
# `gputui attach --help` and a refused command line load none of them.

#: the longest wait for a job's hello, whatever --timeout allows for a capture
HELLO_TIMEOUT_S = 10.0
#: the hook keeps this many step records
MAX_WINDOW = 16384


SUMMARY = "show a hooked job's step times and kernels"
DESCRIPTION = "Connect to the gputui hook inside a running PyTorch job."
EXAMPLES = (
    "examples:\n"
    "  gputui attach 12345 --once               step statistics, memory\n"
    "  gputui attach 12345 --capture 5 --once   profile 5 steps, print top kernels\n"
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
    parser.add_argument("--once", action="store_true", help="print a report and exit")
    parser.add_argument(
        "--json", action="store_true", help="with --once or --memory-snapshot: print JSON"
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
    parser.add_argument("--shapes", action="store_true", help="capture: record input shapes")
    parser.add_argument("--stacks", action="store_true", help="capture: record Python stacks")
    parser.add_argument("--memory", action="store_true", help="capture: profile allocations")
    parser.add_argument(
        "--flops",
        action="store_true",
        help="capture: record FLOPs and shapes; print each top op's achieved TFLOP/s and "
        "bandwidth on this GPU's roofline (gputui bench's ceilings, else the datasheet)",
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
    parser.add_argument(
        "--gpu-seconds",
        type=types.seconds(0.0, 60.0),
        default=None,
        metavar="S",
        help="with --once: sample the job's GPU for S s for the analyzer, 0-60 (1)",
    )
    parser.add_argument(
        "--timeout",
        type=types.seconds(0.1, 3600.0),
        default=None,
        metavar="S",
        help="give up waiting for the job (hello: at most 10 s) after S s, 0.1-3600 (300)",
    )
    parser.add_argument(
        "--inject", action="store_true", help="load the hook into a running job (Python >= 3.14)"
    )
    parser.add_argument(
        "--single",
        action="store_true",
        help="attach to this process only, not to the other ranks of its job",
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
    if args.demo is not None and args.demo not in DEMOS:
        if args.demo.isdigit() and args.pid is None:  # "--demo 123": the default demo, a pid
            args.demo, args.pid = next(iter(DEMOS)), types.pid(args.demo)
        else:
            names = ", ".join(repr(name) for name in DEMOS)
            raise GputuiError(
                f"gputui attach: argument --demo: invalid choice: {args.demo!r} (choose from "
                f"{names}) (see 'gputui attach --help')"
            )
    playing = args.replay is not None or args.demo
    given = _given(args)
    if args.json and not args.once and args.memory_snapshot is None:
        raise GputuiError("gputui attach: --json needs --once (or --memory-snapshot)")
    if "memory_entries" in given and args.memory_snapshot is None:
        raise GputuiError("gputui attach: --memory-entries goes with --memory-snapshot N")
    if playing:
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
        ):
            if on:
                source = "--demo" if args.demo else "--replay"
                raise GputuiError(f"gputui attach: {source} plays a recording; {flag} needs a job")
        return replay_once(args) if args.once else run_replay(args)
    if args.pid is None:
        raise GputuiError("gputui attach: give the pid of a hooked job (or --demo, --replay FILE)")
    options = [
        flag
        for flag, on in (
            ("--warmup", "warmup" in given),
            ("--shapes", args.shapes),
            ("--stacks", args.stacks),
            ("--memory", args.memory),
            ("--flops", args.flops),
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
    snapshot = args.memory_snapshot is not None
    if snapshot and (args.capture is not None or args.record is not None):
        raise GputuiError("gputui attach: --memory-snapshot runs alone (no --capture, --record)")
    if args.record is not None:
        types.check_writable("gputui attach", args.record)
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

            return attach_ranks.main(args, job)
    from gputui.client.hook import HookClient

    client = HookClient.connect(args.pid, timeout=min(args.timeout, HELLO_TIMEOUT_S))
    try:
        if snapshot:
            from gputui.commands import attach_memory

            return attach_memory.main(
                client,
                args.memory_snapshot,
                args.memory_entries,
                args.timeout,
                args.json,
                args.ascii,
            )
        if not args.once:
            _need_terminal(f"gputui attach {args.pid} --once")
            return run_live(client, args)
        return once(args, client)
    finally:
        client.close()


# -- live screen ------------------------------------------------------------------------
def _need_terminal(instead: str) -> None:
    from gputui.commands.tty import need_terminal

    need_terminal("gputui attach", instead)


def run_live(client: HookClient, args: argparse.Namespace) -> int:
    from gputui.commands.tty import run_screen
    from gputui.tui.attach import LiveFeed, make_attach_app

    feed = LiveFeed(client.pid, client=client, record_path=args.record)
    return run_screen(make_attach_app(feed, ascii_only=args.ascii), feed, args.record)


def _ranks_recording(args: argparse.Namespace) -> int | None:
    """A recording of several ranks plays in the rank view (or its report)."""
    from gputui.recording.attach import read_attach_recording
    from gputui.recording.replay import RecordingError

    try:
        if args.demo:
            from gputui.session.feeds import demo_recording

            recording = demo_recording(args.demo)
            label, banner = f"demo: {DEMOS[args.demo]}", RANKS_DEMO_BANNER
            instead = f"gputui attach --demo {args.demo} --once"
        else:
            recording = read_attach_recording(args.replay)
            label, banner = f"replay of {args.replay}", f"REPLAY: {args.replay}, not this machine"
            instead = "gputui attach --replay FILE --once"
        if not recording.ranks:
            return None
        if not args.once:
            _need_terminal(instead)
        from gputui.commands import attach_ranks

        return attach_ranks.replay(args, recording, label, banner)
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
    app = make_attach_app(feed, ascii_only=args.ascii, banner=banner)
    try:
        app.run()
    finally:
        feed.close()
    return int(app.return_code or 0)


# -- --once -------------------------------------------------------------------------------
def once(args: argparse.Namespace, client: HookClient) -> int:
    from gputui.session import oneshot

    got = oneshot.Collected(client.hello)
    gpu = oneshot.GpuSampling(got, args.gpu_seconds)
    oneshot.collect_live(client, args.window, args.timeout, got)
    oneshot.profile_live(client, got)
    if args.capture is not None:
        # the GPU is sampled before the capture: a profiler slows the job and
        # changes what its GPU does
        gpu.finish()
        request = {
            "steps": args.capture,
            "warmup": args.warmup,
            "shapes": args.shapes,
            "stacks": args.stacks,
            "memory": args.memory,
            "flops": args.flops,
        }
        oneshot.capture_live(client, got, request, args.timeout, quiet=args.json)
    gpu.finish()
    _print_report(args, client.pid, got, oneshot.stats_of(got, args.window))
    return 0


def _print_report(
    args: argparse.Namespace,
    pid: int | None,
    got: Collected,
    stats: StepStats,
    recording: dict[str, Any] | None = None,
    banner: str | None = None,
) -> None:
    from gputui.reports import attach as attach_report
    from gputui.reports.jsondoc import print_json

    if args.json:
        doc = attach_report.report_dict(pid, got, stats, args.window)
        if recording is not None:
            doc["recording"] = recording
        print_json(doc)
    else:
        attach_report.print_report(
            got, stats, banner=banner, window=args.window, ascii_only=args.ascii
        )


def replay_once(args: argparse.Namespace) -> int:
    """The report of a recorded session, as if attached when it ended."""
    from gputui.client.hook import parse_event
    from gputui.recording.attach import gpu_sample
    from gputui.recording.replay import RecordingError
    from gputui.session import oneshot
    from gputui.session.feeds import ReplayFeed

    ranks = _ranks_recording(args)
    if ranks is not None:
        return ranks
    try:
        feed = ReplayFeed.demo() if args.demo else ReplayFeed.from_file(args.replay)
    except RecordingError as exc:
        raise GputuiError(f"gputui attach: {exc}") from None
    got = oneshot.Collected(feed.hello)
    for _t, msg in feed.recording.messages:
        sample = gpu_sample(msg)
        if sample is not None:  # the job's GPU, as the recording viewer saw it
            got.add_gpu(sample)
            continue
        event = parse_event(msg)
        if event is not None:
            got.add(event)
    if not got.gpu and got.hello.cuda_in_use:
        got.gpu_note = "the recording holds no samples of the job's GPU"
    _print_report(
        args,
        feed.pid,
        got,
        oneshot.stats_of(got, args.window),
        recording={"label": feed.label, "demo": bool(args.demo)},
        banner=DEMO_BANNER if args.demo else f"REPLAY: {args.replay}, not this machine",
    )
    return 0
