"""Command line entry point.

``gputui [options]`` starts the monitor (or prints one snapshot with ``--once``);
sub-commands (``record``, ``run``, ``ls``, ``attach``, ``bench``) live in ``gputui.commands``.
Each sub-command module exposes ``register(subparsers)`` which adds its parser and
sets ``func`` to a ``main(args) -> int``.  Imports stay lazy so that ``--once`` never
pays for textual.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import NoReturn

from gputui import __version__, fmt
from gputui.commands import args as types
from gputui.errors import GputuiError

#: the sub-commands, each a module of gputui.commands of the same name
#: (:func:`command_module` imports it)
SUBCOMMANDS = ("record", "run", "ls", "attach", "bench", "exporter", "cluster", "analyze", "serve")

#: the monitor's display options that the full-screen sub-commands share: given
#: before the sub-command (``gputui --ascii attach --demo``) they apply to it
SHARED_FLAGS = ("--ascii",)
#: the monitor's fallback to its demo (``make run`` always passes it): before a
#: sub-command it has nothing to do and is dropped
DEMO_IF_NO_GPU = "--demo-if-no-gpu"


EPILOG = """\
sub-commands:
  record    write snapshots to a recording (gputui record -o FILE)
  run       start a Python job with the gputui hook loaded (gputui run -- python train.py)
  ls        list this user's attachable jobs
  attach    show a hooked job's step times and kernels (gputui attach PID)
  bench     measure this GPU's ceilings: bandwidth, TFLOP/s, PCIe, launch time
  exporter  serve GPU and training metrics to Prometheus (gputui exporter)
  cluster   every node of a cluster, from Prometheus or over SSH (gputui cluster --ssh HOST...)
  analyze   what torch.profiler traces say (gputui analyze TRACE_DIR)
  serve     stream this node's snapshots as JSON lines (gputui serve --stdio)

examples:
  gputui                      live monitor
  gputui --demo               play the embedded recording of a real H100 session
  gputui --demo ddp           ... of two H100s running a DDP job
  gputui --once               print one snapshot and exit
  gputui --once --json        the same snapshot as JSON
  gputui attach 12345 --once  print a hooked job's step statistics
"""


#: the monitor's embedded recordings (``--demo NAME``), the default first
DEMOS = types.MONITOR_DEMOS

#: the most rows --rows takes (a snapshot holds at most 2^17 processes)
MAX_ROWS = 2**17


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad arguments as one line with exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise GputuiError(f"{self.prog}: {message} (see '{self.prog} --help')")

    def _get_formatter(self) -> argparse.HelpFormatter:
        # argparse's own asks shutil for the width, and every add_argument makes one:
        # importing shutil (and the compression modules it loads) is a few ms of
        # every command's start-up.  The same width, read without it.
        columns = fmt.terminal_columns(sys.stdout) or 80
        make: Callable[..., argparse.HelpFormatter] = self.formatter_class  # HelpFormatter's
        return make(prog=self.prog, width=columns - 2)

    def format_help(self) -> str:
        # argparse's usage lines keep their indent under a long command, whatever
        # the width: every line within the output's width (COLUMNS=40 included)
        from gputui.reports.text import fit_lines, output_width

        return fit_lines(super().format_help(), output_width())


def build_monitor_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gputui",
        description="Monitor NVIDIA GPUs and the PyTorch jobs on them.",
        epilog=EPILOG,
        formatter_class=types.ExamplesFormatter,
    )
    source = parser.add_mutually_exclusive_group()
    types.add_demo(source, DEMOS)
    source.add_argument("--replay", metavar="FILE", help="play a recording made by 'gputui record'")
    parser.add_argument(
        DEMO_IF_NO_GPU,
        action="store_true",
        help="run live, or play the demo recording when no NVIDIA driver is found; no effect "
        "with --demo, --replay or before a sub-command (make run passes it)",
    )
    types.add_speed(parser)
    types.add_interval(parser)
    parser.add_argument(
        "--once",
        action="store_true",
        help="print one snapshot and exit (of a recording: its first)",
    )
    types.add_seconds(
        parser,
        "--window",
        0.1,
        60.0,
        "with --once, live: measure rates (GPM activity, PCIe, CPU %%) over S seconds, "
        "0.1-60; without it --once reads instant values only (a recording has its own)",
    )
    parser.add_argument("--json", action="store_true", help="with --once: print JSON")
    rows = parser.add_mutually_exclusive_group()
    rows.add_argument(
        "--rows",
        type=types.integer(1, MAX_ROWS, "a number of rows"),
        default=None,
        metavar="N",
        help=f"with --once: at most N process rows, 1-{MAX_ROWS:,} (those using the most GPU "
        "memory; a line counts the rest); default: all into a pipe or a file, what fits on "
        "a terminal",
    )
    rows.add_argument(
        "--all",
        action="store_true",
        help="with --once: every process row, however many (--json always has every process)",
    )
    parser.add_argument("--readonly", action="store_true", help="never send signals to processes")
    types.add_ascii(parser)
    parser.add_argument("--version", action="version", version=f"gputui {__version__}")
    return parser


def build_subcommand_parser(name: str) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The top parser with sub-command ``name`` registered, and that sub-command's parser."""
    parser = _Parser(prog="gputui")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    command_module(name).register(sub)
    return parser, sub.choices[name]


def command_module(name: str) -> ModuleType:
    """The module of sub-command ``name``, imported only when that sub-command runs
    (``--once`` never pays for the others), each by an import statement of its own
    so that a reader and the import contracts see every one."""
    match name:
        case "record":
            from gputui.commands import record

            return record
        case "run":
            from gputui.commands import run

            return run
        case "ls":
            from gputui.commands import ls

            return ls
        case "attach":
            from gputui.commands import attach

            return attach
        case "bench":
            from gputui.commands import bench

            return bench
        case "exporter":
            from gputui.commands import exporter

            return exporter
        case "cluster":
            from gputui.commands import cluster

            return cluster
        case "analyze":
            from gputui.commands import analyze

            return analyze
        case "serve":
            from gputui.commands import serve

            return serve
    raise KeyError(name)


def normalize(args: Sequence[str]) -> list[str]:
    """The command line as the parsers read it: ``--ascii attach ...`` is read as
    ``attach --ascii ...`` (right after the sub-command, so that a job's command
    after ``run --`` never gets it), and ``--demo-if-no-gpu`` before a sub-command
    is dropped (``make run ARGS="attach --demo"``)."""
    args = list(args)
    lead = 0
    while lead < len(args) and args[lead] in (*SHARED_FLAGS, DEMO_IF_NO_GPU):
        lead += 1
    if lead and lead < len(args) and args[lead] in SUBCOMMANDS:
        shared = [flag for flag in args[:lead] if flag in SHARED_FLAGS]
        return [args[lead], *dict.fromkeys(shared), *args[lead + 1 :]]
    return args


def _unknown_command(extra: Sequence[str], args: Sequence[str]) -> str | None:
    """``gputui nosuchcmd``: a word where a sub-command goes that names none."""
    first = next((word for word in args if word not in SHARED_FLAGS), None)
    if first is None or first not in extra or first.startswith("-"):
        return None
    import difflib

    close = difflib.get_close_matches(first, SUBCOMMANDS, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return (
        f"gputui: unknown command '{fmt.clean(first, 40)}'{hint}; the commands are "
        f"{', '.join(SUBCOMMANDS)} (see 'gputui --help')"
    )


def plain_terminal(args: argparse.Namespace) -> None:
    """``TERM=dumb`` (an editor's shell, a CI log): ``--ascii``, for the screens
    and the printed reports of the commands that take it (the others print
    through the text layer, which reads ``TERM`` itself)."""
    if os.environ.get("TERM") == "dumb" and hasattr(args, "ascii"):
        args.ascii = True


def error_line(message: str, args: Sequence[str], said: bool = True) -> str:
    """An error as its one line: prefixed with the command that says it
    (``gputui analyze: ...``) unless it already is (``said``: the message may
    carry one; a trace file's error starts with its path, which may itself
    begin with "gputui")."""
    if said and (
        message.startswith("gputui: ")
        or any(message.startswith(f"gputui {name}: ") for name in SUBCOMMANDS)
    ):
        return message
    prog = f"gputui {args[0]}" if args and args[0] in SUBCOMMANDS else "gputui"
    return f"{prog}: {message}"


def _misplaced_sub_command(extra: Sequence[str]) -> str | None:
    """``gputui --once ls``: the sub-command given after a monitor option."""
    name = next((word for word in extra if word in SUBCOMMANDS), None)
    if name is None:
        return None
    return f"gputui: '{name}' is a sub-command: give it first (gputui {name} ...)"


def main(argv: Sequence[str] | None = None, leaving: bool = False) -> int:
    """Run the command line ``argv``.  ``leaving``: the process ends right after
    (the ``gputui`` command's one-shot): what the kernel frees anyway is left to it."""
    args_list = normalize(sys.argv[1:] if argv is None else argv)
    try:
        if args_list and args_list[0] in SUBCOMMANDS:
            parser, command = build_subcommand_parser(args_list[0])
            args, extra = parser.parse_known_args(args_list)
            if extra:  # said by the sub-command's parser: "gputui analyze: ..."
                command.error(f"unrecognized arguments: {' '.join(extra)}")
            plain_terminal(args)
            args.leaving = leaving
            return int(args.func(args) or 0)
        monitor_parser = build_monitor_parser()
        # "--demo attach": a sub-command after the option that takes a name
        named = [b for a, b in itertools.pairwise(args_list) if a == "--demo"]
        misplaced = _misplaced_sub_command(named)
        if misplaced is not None:
            raise GputuiError(misplaced)
        args, extra = monitor_parser.parse_known_args(args_list)
        if extra:
            misplaced = _misplaced_sub_command(extra) or _unknown_command(extra, args_list)
            if misplaced is not None:
                raise GputuiError(misplaced)
            monitor_parser.error(f"unrecognized arguments: {' '.join(extra)}")
        if args.json and not args.once:
            raise GputuiError("gputui: --json needs --once")
        if (args.rows is not None or args.all) and not args.once:
            raise GputuiError("gputui: --rows and --all need --once (the monitor scrolls)")
        if (args.rows is not None or args.all) and args.json:
            raise GputuiError(
                "gputui: --rows and --all choose the rows of the text report; --json holds "
                "every process"
            )
        if args.window is not None and not args.once:
            raise GputuiError("gputui: --window needs --once (the monitor measures rates itself)")
        if args.window is not None and (args.demo or args.replay):
            raise GputuiError(
                "gputui: --window measures rates live; a recording's rates are the ones it "
                "recorded (drop --window)"
            )
        from gputui.commands import monitor

        plain_terminal(args)
        return monitor.main(args, leaving=leaving)
    except GputuiError as exc:
        said = type(exc).__name__ != "TraceError"  # its message starts with the path
        print(error_line(str(exc), args_list, said), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `gputui --once | head`: the reader went away; nothing to report.
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")
        return 0
    except Exception as exc:  # the last resort: one line, not a traceback
        if os.environ.get("GPUTUI_DEBUG"):
            raise
        print(
            f"gputui: internal error: {type(exc).__name__}: {exc} "
            "(run with GPUTUI_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return 1


def entry() -> NoReturn:
    """The ``gputui`` command (console script and ``python -m gputui``)."""
    argv = normalize(sys.argv[1:])
    one_shot = "--once" in argv and not (argv and argv[0] in SUBCOMMANDS)
    # `gputui analyze` prints its report and ends: the last trace's records (a
    # quarter of a second a gigabyte to free) and the modules are the kernel's
    leaving = one_shot or bool(argv and argv[0] == "analyze")
    if leaving:
        # Imports and decoding make objects by the ten thousand, none of them in a
        # cycle: the cyclic collector would walk them again and again (a tenth of
        # the monitor's one-shot; the last trace's records, held to the end, at
        # each of the rules' collections) for a process that ends in a moment.
        # Reference counting still frees them.
        gc.disable()
    code = main(argv, leaving=leaving)
    if leaving:
        # The one-shot output (the monitor's, or analyze's report) is written and
        # nothing runs after it: leave without the interpreter's teardown of every
        # module, thread and record, which is measurable in both run times.
        # Flushed first: nothing is lost.
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (BrokenPipeError, OSError):  # the reader went away: nothing to report
            pass
        os._exit(code)
    raise SystemExit(code)


if __name__ == "__main__":
    entry()
