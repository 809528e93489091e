"""``gputui run [--] cmd ...``: run a job with the hook loaded, no code change.

The hook is loaded by a ``sitecustomize`` module put first on PYTHONPATH (it
chains to any other ``sitecustomize``).  gputui then *execs* the command: the job
keeps gputui's pid, gets signals directly, and its exit status is the status of
``gputui run`` itself.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import gputui
from gputui.commands import args as types
from gputui.errors import GputuiError


def bootstrap_dir() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(gputui.__file__)), "hook", "_bootstrap")


def hook_env(
    base: dict[str, str],
    batch_size: int | None = None,
    capture_every_s: float | None = None,
    gpu_timing: bool = True,
) -> dict[str, str]:
    """The environment that makes every Python process of a job load the hook."""
    env = dict(base)
    boot = bootstrap_dir()
    old = env.get("PYTHONPATH", "")
    parts = [p for p in old.split(os.pathsep) if p and os.path.abspath(p) != boot]
    env["PYTHONPATH"] = os.pathsep.join([boot, *parts])
    env["GPUTUI_HOOK_PKG"] = os.path.dirname(os.path.abspath(gputui.__file__))
    opts: dict[str, Any] = {"gpu_timing": gpu_timing}
    if batch_size:
        opts["batch_size"] = batch_size
    if capture_every_s:
        opts["capture_every_s"] = capture_every_s
    env["GPUTUI_HOOK_OPTS"] = json.dumps(opts)
    env["GPUTUI_RUN"] = "1"
    return env


SUMMARY = "run a Python job with the gputui hook loaded"
DESCRIPTION = (
    "Run COMMAND with the gputui hook loaded into its Python processes "
    "(through sitecustomize on PYTHONPATH), so 'gputui attach PID' works "
    "without changing the training script. The exit status is the job's."
)
EXAMPLES = "example: gputui run --batch-size 64 -- python train.py --epochs 3"


def register(subparsers: Any) -> None:
    parser = types.command(subparsers, "run", SUMMARY, DESCRIPTION, EXAMPLES)
    parser.add_argument(
        "--batch-size",
        type=types.integer(1, 2**31 - 1),
        metavar="N",
        help="samples per batch, for samples/s, 1-2147483647",
    )
    types.add_seconds(
        parser,
        "--capture-every",
        1.0,
        86400.0,
        "take a 5-step profiler capture every S seconds, 1-86400 (off by default)",
    )
    parser.add_argument(
        "--no-gpu-timing", action="store_true", help="do not record CUDA events at phase edges"
    )
    parser.add_argument("cmd", nargs=argparse.REMAINDER, metavar="COMMAND", help="the job")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise GputuiError("gputui run: no command given (e.g. gputui run -- python train.py)")
    env = hook_env(
        dict(os.environ),
        batch_size=args.batch_size,
        capture_every_s=args.capture_every,
        gpu_timing=not args.no_gpu_timing,
    )
    try:
        os.execvpe(cmd[0], cmd, env)
    except FileNotFoundError:
        raise GputuiError(f"gputui run: command not found: {cmd[0]}") from None
    except PermissionError:
        raise GputuiError(f"gputui run: permission denied: {cmd[0]}") from None
    except OSError as exc:
        raise GputuiError(f"gputui run: cannot run {cmd[0]}: {exc.strerror}") from None
    return 0  # not reached: exec replaced this process
