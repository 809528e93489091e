"""Where the monitor's resident memory goes, by the C library's settings.

    python bench/bench_malloc.py [--tree DIR] [--rounds 4] [--source ARGS] [--out FILE]

Runs the monitor of ``--tree`` (default: this checkout) in tmux at 120x40, in
turns, as it is and with one setting changed from outside:

- ``as-is``: ``python -m gputui --interval 1``;
- ``arena1``: the same with ``MALLOC_ARENA_MAX=1`` (glibc: one malloc arena for
  every thread);
- ``trim``: the same with ``malloc_trim(0)`` called once, 6 s after the start
  (the heaps' free pages handed back to the kernel);
- ``no-ssl``: the same with ``import ssl`` made to fail (asyncio then loads
  without OpenSSL's libraries).

For each window (after ``--warmup`` seconds, over ``--seconds``) it prints the
CPU in % of a core, the RSS and anonymous RSS, the threads, how many malloc
arenas glibc reserved (their 64 MiB reservations, counted from the process's
maps), whether OpenSSL is mapped, and the largest anonymous mappings.  On a
machine without a GPU, ``--source "--demo"`` runs the demo recording instead.
A checkout that already does what a mode does shows no difference in it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_tui  # the tmux helpers

#: the wrapper of the ``trim`` and ``no-ssl`` modes: the setting, then gputui's entry
WRAPPER = """\
import ctypes, sys, threading
mode = sys.argv.pop(1)
if mode == "trim":
    libc = ctypes.CDLL(None)
    threading.Timer(6.0, lambda: libc.malloc_trim(0)).start()
elif mode == "no-ssl":
    sys.modules["ssl"] = None
sys.argv[0] = "gputui"
from gputui import cli
cli.entry()
"""

MODES = ("as-is", "arena1", "trim", "no-ssl")


@dataclasses.dataclass
class Mapping:
    kb: int
    perm: str
    name: str
    rss_kb: int = 0


def mappings(pid: int) -> list[Mapping]:
    out: list[Mapping] = []
    with open(f"/proc/{pid}/smaps") as fh:
        for line in fh:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5 and ":" in head[3]:
                start, end = (int(x, 16) for x in head[0].split("-"))
                out.append(
                    Mapping((end - start) // 1024, head[1], head[5] if len(head) > 5 else "")
                )
            elif line.startswith("Rss:") and out:
                out[-1].rss_kb = int(head[1])
    return out


def window(command: str, tree: Path, warmup: float, seconds: float) -> dict[str, object]:
    proc = bench_tui.start_in_tmux(command, tree=tree)
    try:
        time.sleep(warmup)
        cpu0, t0 = bench_tui.tree_cpu_s(proc), time.monotonic()
        time.sleep(seconds)
        cpu1, t1 = bench_tui.tree_cpu_s(proc), time.monotonic()
        maps = mappings(proc.pid)
        with open(f"/proc/{proc.pid}/status") as fh:
            status = dict(line.split(":", 1) for line in fh)
        threads = len(os.listdir(f"/proc/{proc.pid}/task"))
    finally:
        bench_tui.stop_tmux()
    anonymous = [m for m in maps if m.name in ("", "[heap]")]
    largest = sorted(anonymous, key=lambda m: -m.rss_kb)[:6]
    return {
        "cpu_pct": round(100.0 * (cpu1 - cpu0) / (t1 - t0), 3),
        "rss_mb": round(int(status["VmRSS"].split()[0]) / 1024, 1),
        "anon_mb": round(int(status["RssAnon"].split()[0]) / 1024, 1),
        "threads": threads,
        # an arena heap is its used part and a ---p rest, 64 MiB together
        "arena_reserves": sum(
            1 for m in maps if not m.name and m.perm == "---p" and 1024 < m.kb < 65536
        ),
        "openssl_mapped": any("libssl" in m.name for m in maps),
        "largest_anonymous_kb": [(m.rss_kb, m.kb, m.name) for m in largest],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--tree", type=Path, default=bench_tui.ROOT)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--warmup", type=float, default=4.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--source", default="", help='e.g. "--demo" without a GPU')
    parser.add_argument("--modes", nargs="*", default=list(MODES), choices=MODES)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    tree = args.tree.resolve()
    gputui_args = f"{args.source} --interval 1".strip()
    python = shlex.quote(sys.executable)
    with tempfile.TemporaryDirectory() as tmp:
        wrapper = Path(tmp) / "wrapper.py"
        wrapper.write_text(WRAPPER)
        commands = {
            "as-is": f"{python} -m gputui {gputui_args}",
            "arena1": f"env MALLOC_ARENA_MAX=1 {python} -m gputui {gputui_args}",
            "trim": f"{python} {shlex.quote(str(wrapper))} trim {gputui_args}",
            "no-ssl": f"{python} {shlex.quote(str(wrapper))} no-ssl {gputui_args}",
        }
        rows = []
        for r in range(args.rounds):
            for mode in args.modes:
                row = {
                    "mode": mode,
                    "round": r,
                    **window(commands[mode], tree, args.warmup, args.seconds),
                }
                print(json.dumps(row), flush=True)
                rows.append(row)
    summary = {
        mode: {
            "rss_mb": [row["rss_mb"] for row in rows if row["mode"] == mode],
            "cpu_pct_median": statistics.median(
                float(row["cpu_pct"]) for row in rows if row["mode"] == mode
            ),  # type: ignore[arg-type]
        }
        for mode in args.modes
    }
    print(json.dumps(summary))
    if args.out:
        args.out.write_text(
            json.dumps({"tree": str(tree), "windows": rows, "summary": summary}, indent=1)
        )


if __name__ == "__main__":
    main()
