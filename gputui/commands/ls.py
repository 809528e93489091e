"""``gputui ls``: this user's jobs that have the hook loaded."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gputui.collectors.hook_client import AttachError, hook_summary
from gputui.protocol import list_sockets


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "ls",
        help="list this user's attachable jobs",
        description="List this user's running jobs that have the gputui hook loaded.",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=main)


def collect() -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = []
    for pid in sorted(list_sockets()):
        try:
            hello = hook_summary(pid, timeout=2.0)
        except AttachError as exc:
            jobs.append({"pid": pid, "error": str(exc)})
            continue
        jobs.append(
            {
                "pid": pid,
                "command": list(hello.argv),
                "steps": hello.steps,
                "recent_step_s": hello.recent_step_s,
                "rank": hello.rank,
                "local_rank": hello.local_rank,
                "world_size": hello.world_size,
                "device": None if hello.device is None else hello.device.to_wire(),
                "torch": hello.torch,
                "python": hello.python,
            }
        )
    return jobs


def main(args: argparse.Namespace) -> int:
    jobs = collect()
    if args.json:
        print(json.dumps(jobs, indent=2))
        return 0
    if not jobs:
        print("no hooked jobs (start one with 'gputui run -- python train.py')", file=sys.stderr)
        return 0
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from gputui import fmt

    table = Table(box=None, pad_edge=False, header_style="bold")
    for col, justify in (
        ("PID", "right"),
        ("RANK", "right"),
        ("STEPS", "right"),
        ("STEP", "right"),
        ("COMMAND", "left"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for job in jobs:
        if "error" in job:
            table.add_row(str(job["pid"]), "", "", "", Text(fmt.clean(job["error"]), style="red"))
            continue
        rank = "" if job["rank"] is None else f"{job['rank']}/{job['world_size']}"
        step = job["recent_step_s"]
        table.add_row(
            str(job["pid"]),
            rank,
            str(job["steps"]),
            "" if step is None else f"{step * 1000:.1f} ms",
            Text(fmt.clean_all(job["command"])),
        )
    Console(highlight=False).print(table)
    return 0
