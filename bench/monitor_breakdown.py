"""Where the running monitor's CPU goes: per thread, per stage, per NVML call.

    python bench/monitor_breakdown.py [--seconds 40] [--warmup 10] [--out FILE] -- GPUTUI-ARGS

Starts ``gputui GPUTUI-ARGS`` (default ``--interval 1``: the live monitor) in a
tmux pane of 120x40 and, inside that process, counts the CPU time
(``time.thread_time``) of the monitor's stages over ``--seconds`` after
``--warmup``: taking a snapshot in (``ingest``: the session's history and
findings, and the panels' text), the screen's update (``compositor``: Textual
drawing the changed lines), each widget's lines, every NVML function the poller
calls (``nvml.*``), and
the cyclic collector's passes by generation (``gc.gen*``).
Each thread's CPU comes from ``/proc/self/task`` (in clock ticks), and the
screen's and the poller's also from their own CPU clocks
(``threads_exact_ms_per_s``: to the microsecond, where a tick is 0.25 ms a
second over 40 s).  The figures are milliseconds of CPU per second of wall
time; JSON on standard output (and in ``--out``).

``--fake-nvml PIDFILE`` runs against the tests' fake NVML with one GPU whose
processes are the pids in PIDFILE (no GPU needed; the fake's Python counts in
the poller thread).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _timed(
    acc: dict[str, list[float]],
    on: list[bool],
    label: str,
    fn: Any,
    by_type: bool,
    depth: list[int] | None = None,
) -> Any:
    """``fn`` timed under ``label``; with ``depth`` (shared by the wrappers of one
    label) only the outermost call counts, so that an override that calls the
    method it overrides is not counted twice."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        if depth is not None:
            depth[0] += 1
        try:
            return fn(*args, **kwargs)
        finally:
            if depth is not None:
                depth[0] -= 1
            if on[0] and (depth is None or depth[0] == 0):
                key = f"{label}[{type(args[0]).__name__}]" if by_type and args else label
                entry = acc[key]
                entry[0] += 1
                entry[1] += time.thread_time() - start

    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


def _profiled(profile: Any, on: list[bool], fn: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not on[0]:
            return fn(*args, **kwargs)
        profile.enable()
        try:
            return fn(*args, **kwargs)
        finally:
            profile.disable()

    return wrapper


def _top(profile: Any, wall: float, count: int = 45) -> list[str]:
    """The functions under a profiled stage by cumulative time (ms per second of
    wall time, under the profiler's own overhead)."""
    import pstats

    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    rows = sorted(stats.items(), key=lambda kv: -kv[1][3])[:count]
    return [
        f"{cum * 1000 / wall:8.3f} cum {tot * 1000 / wall:8.3f} own {calls:6d}  "
        f"{Path(file).name}:{line}({name})"
        for (file, line, name), (_cc, calls, tot, cum, _callers) in rows
    ]


def _threads() -> dict[str, tuple[str, int]]:
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[tid] = (name, int(fields[11]) + int(fields[12]))
    return out


def _thread_clocks() -> dict[str, float]:
    """CPU seconds of the screen's thread (the main one) and the poller's, from
    each thread's own CPU clock."""
    out = {}
    for thread in threading.enumerate():
        if thread is threading.main_thread():
            label = "screen"
        elif thread.name == "gputui-poller":
            label = "poller"
        else:
            continue
        try:
            clock = time.pthread_getcpuclockid(thread.ident or 0)
            out[label] = time.clock_gettime(clock)
        except (OSError, AttributeError):  # a thread gone meanwhile; not Linux
            continue
    return out


def inside(args: argparse.Namespace) -> None:
    """The monitor itself, with its stages counted."""
    acc: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    on = [False]
    sys.path.insert(0, str(ROOT))
    from textual._compositor import Compositor
    from textual.app import App
    from textual.screen import Screen
    from textual.widget import Widget

    from gputui.session import monitor as session
    from gputui.tui import app as appmod

    for cls, name, label, by_type in (
        (appmod.GputuiApp, "_take", "ingest", False),
        (Screen, "_compositor_refresh", "compositor", False),
        (Compositor, "render_update", "compositor.render_update", False),
        (App, "_display", "compositor.display", False),
    ):
        setattr(cls, name, _timed(acc, on, label, getattr(cls, name), by_type))
    from gputui.tui.widgets.processes import ProcessTable
    from gputui.tui.widgets.text_panel import TextPanel

    # each widget's lines: Textual's drawing and the widgets' own (the main thread
    # draws: one depth for all)
    depth = [0]
    drawing: tuple[type[Widget], ...] = (Widget, TextPanel, ProcessTable)
    for widget_cls in drawing:
        if "render_lines" in vars(widget_cls):
            timed = _timed(acc, on, "lines", widget_cls.render_lines, True, depth)
            setattr(widget_cls, "render_lines", timed)  # noqa: B010
    session.findings = _timed(acc, on, "ingest.findings", session.findings, False)

    if args.fake_nvml:
        from gputui.nvml import startup as nvml_open
        from tests.helpers.fake_gpus import busy_node
        from tests.helpers.fake_nvml import FakeNvml

        pids = [int(line) for line in Path(args.fake_nvml).read_text().split()]
        nvml: Any = FakeNvml(busy_node(pids, 1))
        nvml_open.import_pynvml = lambda: nvml
    else:
        import pynvml

        nvml = pynvml
    for name in dir(nvml):
        if name.startswith(("nvmlDevice", "nvmlGpm", "nvmlSystem")):
            fn = getattr(nvml, name)
            if callable(fn):
                setattr(nvml, name, _timed(acc, on, f"nvml.{name}", fn, False))

    # the cyclic collector's passes, by generation, on whichever thread ran them
    import gc

    gc_start: dict[int, float] = {}

    def on_gc(phase: str, info: dict[str, int]) -> None:
        tid = threading.get_ident()
        if phase == "start":
            gc_start[tid] = time.thread_time()
        elif on[0] and tid in gc_start:
            entry = acc[f"gc.gen{info.get('generation', '?')}"]
            entry[0] += 1
            entry[1] += time.thread_time() - gc_start.pop(tid)

    gc.callbacks.append(on_gc)

    profiles: dict[str, Any] = {}
    if args.profile:
        import asyncio
        import cProfile

        from gputui.sources import live as source_mod

        targets = {
            "loop": (asyncio.BaseEventLoop, "_run_once"),
            "poller": (source_mod.LiveSource, "sample"),
            "ingest": (appmod.GputuiApp, "_take"),
            "compositor": (Screen, "_compositor_refresh"),
        }
        for label in args.profile:
            cls, name = targets[label]
            profiles[label] = profile = cProfile.Profile()
            setattr(cls, name, _profiled(profile, on, getattr(cls, name)))

    def measure() -> None:
        time.sleep(args.warmup)
        before = _threads()
        clocks = _thread_clocks()
        on[0] = True
        start = time.monotonic()
        time.sleep(args.seconds)
        on[0] = False
        wall = time.monotonic() - start
        after = _threads()
        clocks_after = _thread_clocks()
        tick_ms = 1000.0 / os.sysconf("SC_CLK_TCK")
        result = {
            "seconds": round(wall, 2),
            "threads_ms_per_s": {
                f"{name}:{tid}": round((ticks - before.get(tid, (name, 0))[1]) * tick_ms / wall, 3)
                for tid, (name, ticks) in after.items()
            },
            "threads_exact_ms_per_s": {
                label: round((clocks_after[label] - clocks[label]) * 1000 / wall, 3)
                for label in clocks.keys() & clocks_after.keys()
            },
            "stages_ms_per_s": {
                key: {"calls": int(count), "ms_per_s": round(cpu * 1000 / wall, 3)}
                for key, (count, cpu) in sorted(acc.items(), key=lambda kv: -kv[1][1])
            },
        }
        for label, profile in profiles.items():
            result[f"profile_{label}"] = _top(profile, wall)
        Path(args.result).write_text(json.dumps(result, indent=1))
        os.kill(os.getpid(), 2)

    threading.Thread(target=measure, daemon=True).start()
    from gputui import cli

    try:
        cli.main(args.gputui or ["--interval", "1"])
    except BaseException:  # the interrupt that ends the measurement
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--fake-nvml", metavar="PIDFILE")
    parser.add_argument(
        "--profile",
        action="append",
        choices=["loop", "poller", "ingest", "compositor"],
        help="also profile this stage (cProfile: slower, for where, not how much)",
    )
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("gputui", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.gputui and args.gputui[0] == "--":
        args.gputui = args.gputui[1:]
    if args.result:
        inside(args)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        inner = [sys.executable, __file__, "--result", str(result)]
        inner += ["--seconds", str(args.seconds), "--warmup", str(args.warmup)]
        if args.fake_nvml:
            inner += ["--fake-nvml", str(args.fake_nvml)]
        for label in args.profile or []:
            inner += ["--profile", label]
        inner += ["--", *(args.gputui or ["--interval", "1"])]
        socket = f"gputui-breakdown-{os.getpid()}"
        # the monitor draws on standard error: the pane is its terminal
        command = shlex.join(inner) + "; sleep 30"
        subprocess.run(
            ["tmux", "-L", socket, "new-session", "-d", "-x", "120", "-y", "40", command],
            check=True,
            cwd=ROOT,
        )
        deadline = time.monotonic() + args.warmup + args.seconds + 60
        try:
            while not result.exists() and time.monotonic() < deadline:
                time.sleep(0.5)
            time.sleep(0.5)
            pane = subprocess.run(
                ["tmux", "-L", socket, "capture-pane", "-p"], capture_output=True, text=True
            ).stdout
        finally:
            subprocess.run(["tmux", "-L", socket, "kill-server"], check=False)
        if not result.exists():
            print("no result; the pane:\n" + pane, file=sys.stderr)
            return 1
        text = result.read_text()
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
