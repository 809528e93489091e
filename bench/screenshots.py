"""Render the monitor headless into screenshots/ (SVG, and PNG when a converter exists).

    .venv/bin/python bench/screenshots.py                 # the embedded demo recording
    .venv/bin/python bench/screenshots.py --replay FILE   # any recording
    .venv/bin/python bench/screenshots.py --synthetic     # generated data (no demo yet)

The attach views (``attach-*``) play the embedded attach recording
(gputui/data/attach_demo.jsonl.gz: a real bf16 transformer training job on an
H100) up to just after its profiler capture.  The rank views (``ranks-*``) play
tests/samples/attach-ranks-v2.jsonl.gz, a real 2-rank DDP job on CPU recorded
with bench/record_ranks.py, after its synchronized capture.  The memory
snapshot views (``memory-*``) need an attach recording that holds one
(``--memory-recording FILE``, e.g. from ``bench/record_attach.py
--memory-at``): played to its end, then key m.

Without ``--replay``/``--synthetic`` it uses gputui/data/demo.jsonl.gz and falls back
to synthetic data when that file is missing.  Each view plays up to five minutes
of the recording into the app first, so the history graphs are full.  PNGs come
from cairosvg (``pip install cairosvg``) or rsvg-convert (Debian ``librsvg2-bin``);
the SVG's web font is swapped for a local monospace one so cells line up.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gputui.recording.replay import RecordingError, ReplaySource  # noqa: E402
from gputui.tui.app import GputuiApp, make_app  # noqa: E402
from gputui.tui.screens.detail import ProcessDetailScreen  # noqa: E402
from gputui.tui.widgets.processes import ProcessTable  # noqa: E402

DEMO_BANNER = "DEMO - recording of a real H100 session, not this machine"
SYNTHETIC_BANNER = "SYNTHETIC DATA - generated for screenshots, not a real machine"
#: samples played before the screenshot: five minutes at 1 s
WARMUP_SAMPLES = 300
#: where the embedded demo is shown: both GPU processes running, the training job
#: power-capped, the history holding the earlier memory-bound and FP32 phases
DEMO_AT = 121
PNG_FONT = "DejaVu Sans Mono"

Setup = Callable[[Any], Awaitable[None]]


#: how many pauses a screen gets to settle before its screenshot is taken anyway
SETTLE_TRIES = 50


async def settled(app: Any, pilot: Any, title: str) -> str:
    """The screen's SVG once two exports a pause apart are the same.  A change
    can take more than one turn of the loop to draw (rows, then the scrollbar
    they call for, then the layout around it), and the screens' own timers run
    meanwhile: one pause captured one state or another from run to run."""
    svg = app.export_screenshot(title=title)
    for _ in range(SETTLE_TRIES):
        await pilot.pause()
        again = app.export_screenshot(title=title)
        if again == svg:
            return svg
        svg = again
    return svg


async def _nothing(pilot: Any) -> None:
    return None


async def _detail(pilot: Any) -> None:
    table = pilot.app.screen.query_one(ProcessTable)
    # Prefer a hooked process (it shows the attach hint), else the top one.
    hooked = [k for k in table.order if (r := table.row(k)) and r.proc and r.proc.hooked]
    if hooked:
        table.select_key(hooked[0])
    await pilot.press("enter")
    while not isinstance(pilot.app.screen, ProcessDetailScreen):
        await pilot.pause(0.01)
    await pilot.pause()


async def _help(pilot: Any) -> None:
    await pilot.press("question_mark")
    await pilot.pause()


async def _tree(pilot: Any) -> None:
    await pilot.press("t")
    await pilot.pause()


#: the attach screenshots show the recording at this second: just after the capture,
#: so the profiled steps, the slow step after them and the kernel table are on screen
ATTACH_AT_S = 31.5
ATTACH_BANNER = "DEMO - recording of a real training job on an H100, not this machine"
#: name -> size of the attach views
ATTACH_VIEWS: dict[str, tuple[int, int]] = {
    "attach-120x40": (120, 40),
    "attach-80x24": (80, 24),
}

#: the rank views: a recording of a real 2-rank job, at this second of it
RANKS_RECORDING = ROOT / "tests" / "samples" / "attach-ranks-v2.jsonl.gz"
RANKS_AT_S = 20.0
RANKS_BANNER = "REPLAY of a 2-rank CPU job (gloo DDP), not this machine"
RANKS_VIEWS: dict[str, tuple[int, int]] = {
    "ranks-120x40": (120, 40),
    "ranks-80x24": (80, 24),
}

#: the embedded DDP demos (two H100s, NCCL): the monitor at this sample (rank 1
#: slower: its GPU mostly idle, rank 0's waiting in the all-reduce), and the
#: rank view after its synchronized capture
DDP_AT = 100
DDP_RANKS_AT_S = 25.0
DDP_VIEWS: dict[str, tuple[int, int]] = {
    "ddp-120x40": (120, 40),
    "ranks-ddp-120x40": (120, 40),
}

#: a real attach session of a leaking job on an H100, with a memory snapshot
MEMORY_RECORDING = ROOT / "tests" / "data" / "h100" / "memory_snapshot.jsonl.gz"
#: name -> size of the memory snapshot views (with --memory-recording)
MEMORY_VIEWS: dict[str, tuple[int, int]] = {
    "memory-120x40": (120, 40),
    "memory-80x24": (80, 24),
}

#: a real attach session of a bf16 transformer on an H100 with a 5-step capture with
#: FLOPs and shapes (the embedded demo's capture predates them)
ROOFLINE_RECORDING = ROOT / "tests" / "data" / "h100" / "transformer_flops.jsonl.gz"
ROOFLINE_BANNER = "RECORDING of a real training job on an H100, not this machine"
#: name -> size of the roofline views
ROOFLINE_VIEWS: dict[str, tuple[int, int]] = {
    "roofline-120x40": (120, 40),
}

#: a real attach session of a CPU job (tests/jobs/train_cpu.py) whose step is mostly
#: a numpy function, with two DataLoader workers: the Python view (the demo predates it)
PYTHON_RECORDING = ROOT / "tests" / "data" / "cpu_python.jsonl.gz"
PYTHON_BANNER = "RECORDING of a CPU training job, not this machine"
PYTHON_VIEWS: dict[str, tuple[int, int]] = {
    "python-120x40": (120, 40),
    "python-80x24": (80, 24),
}

#: name -> (size, setup, ascii_only)
VIEWS: dict[str, tuple[tuple[int, int], Setup, bool]] = {
    "main-120x40": ((120, 40), _nothing, False),
    "main-80x24": ((80, 24), _nothing, False),
    "main-200x60": ((200, 60), _tree, False),
    "detail-120x40": ((120, 40), _detail, False),
    "help-120x40": ((120, 40), _help, False),
    "ascii-100x30": ((100, 30), _nothing, True),
}


def make_source(args: argparse.Namespace) -> tuple[ReplaySource, str]:
    if args.replay:
        return ReplaySource.from_file(args.replay), args.banner or "RECORDING, not this machine"
    if not args.synthetic:
        try:
            return ReplaySource.demo(), args.banner or DEMO_BANNER
        except RecordingError as exc:
            print(f"no demo recording ({exc}); using synthetic data", file=sys.stderr)
    from tests.helpers.synthetic import make_snapshots, replay_source

    snapshots = make_snapshots(n_gpus=4, n_procs=8, n_steps=120, seed=3)
    return replay_source(snapshots, "synthetic data"), args.banner or SYNTHETIC_BANNER


async def render(
    args: argparse.Namespace, name: str, size: tuple[int, int], setup: Setup, ascii_only: bool
) -> Path:
    source, banner = make_source(args)
    interval = source.natural_interval_s or 1.0
    app: GputuiApp = make_app(
        source, interval, banner=banner, ascii_only=ascii_only, autostart=False
    )
    async with app.run_test(size=size) as pilot:
        app.advance(min(args.at or WARMUP_SAMPLES, source.count() or 1))
        await pilot.pause()
        await setup(pilot)
        await pilot.pause()
        svg = await settled(app, pilot, f"gputui {name}")
    if ascii_only:
        _ascii_off()
    path = args.out / f"{name}.svg"
    path.write_text(svg)
    return path


def _ascii_off() -> None:
    """--ascii is process-wide (the terminal is): the views after this one draw
    as a plain run does, with "…" and block scrollbars."""
    from textual.scrollbar import ScrollBar, ScrollBarRender

    from gputui import fmt

    fmt.use_ascii(False)
    ScrollBar.renderer = ScrollBarRender


async def render_attach(args: argparse.Namespace, name: str, size: tuple[int, int]) -> Path:
    from gputui.tui.attach import ReplayFeed, make_attach_app

    app = make_attach_app(ReplayFeed.demo(), banner=ATTACH_BANNER, autostart=False)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        app.attach_screen.replay_to(ATTACH_AT_S)
        await pilot.pause()
        svg = await settled(app, pilot, f"gputui {name}")
    path = args.out / f"{name}.svg"
    path.write_text(svg)
    return path


async def render_subscreen(
    args: argparse.Namespace,
    name: str,
    size: tuple[int, int],
    recording: Path,
    banner: str,
    key: str,
    ready: Callable[[Any], bool],
) -> Path:
    """An attach recording played to its end, then ``key``; drawn once ``ready``."""
    from gputui.tui.attach import ReplayFeed, make_attach_app

    app = make_attach_app(ReplayFeed.from_file(recording), banner=banner, autostart=False)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        app.attach_screen.replay_to()
        await pilot.press(key)
        while not ready(app.screen):
            await pilot.pause(0.01)
        await pilot.pause()
        svg = await settled(app, pilot, f"gputui {name}")
    path = args.out / f"{name}.svg"
    path.write_text(svg)
    return path


async def render_memory(args: argparse.Namespace, name: str, size: tuple[int, int]) -> Path:
    from gputui.tui.attach.memory_snapshot import MemorySnapshotScreen

    banner = args.banner or f"RECORDING, not this machine: {args.memory_recording.name}"
    return await render_subscreen(
        args, name, size, args.memory_recording, banner, "m",
        lambda screen: isinstance(screen, MemorySnapshotScreen),
    )  # fmt: skip


async def render_roofline(args: argparse.Namespace, name: str, size: tuple[int, int]) -> Path:
    from gputui.tui.attach.roofline_view import RooflinePanel, RooflineScreen

    return await render_subscreen(
        args, name, size, ROOFLINE_RECORDING, ROOFLINE_BANNER, "l",
        lambda screen: isinstance(screen, RooflineScreen)
        and "Roofline" in screen.query_one(RooflinePanel).plain,
    )  # fmt: skip


async def render_python(args: argparse.Namespace, name: str, size: tuple[int, int]) -> Path:
    from gputui.tui.attach.python_view import FunctionTable, PythonScreen

    return await render_subscreen(
        args, name, size, PYTHON_RECORDING, PYTHON_BANNER, "y",
        lambda screen: isinstance(screen, PythonScreen)
        and screen.query_one("#py-main", FunctionTable).row_count > 0,
    )  # fmt: skip


def to_png(svg_path: Path) -> Path | None:
    png = svg_path.with_suffix(".png")
    svg = svg_path.read_text().replace("Fira Code", PNG_FONT)
    try:
        import cairosvg

        cairosvg.svg2png(bytestring=svg.encode(), write_to=str(png), scale=1.5)
        return png
    except ImportError:
        pass
    if shutil.which("rsvg-convert"):
        subprocess.run(
            ["rsvg-convert", "-z", "1.5", "-o", str(png)], input=svg.encode(), check=True
        )
        return png
    return None


async def _rank_view(feed: Any, banner: str, at_s: float, name: str, size: tuple[int, int]) -> str:
    from gputui.tui.attach.rank_screen import RanksApp

    app = RanksApp(feed, banner=banner, autostart=False)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        app.ranks_screen.replay_to(at_s)
        await pilot.pause()
        return await settled(app, pilot, f"gputui {name}")


async def render_ranks(args: argparse.Namespace, name: str, size: tuple[int, int]) -> Path:
    from gputui.session.rank_feeds import ReplayRanksFeed

    feed = ReplayRanksFeed.from_file(RANKS_RECORDING)
    svg = await _rank_view(feed, RANKS_BANNER, RANKS_AT_S, name, size)
    path = args.out / f"{name}.svg"
    path.write_text(svg)
    return path


async def render_ddp(args: argparse.Namespace, name: str, size: tuple[int, int]) -> Path:
    from gputui.commands.attach import RANKS_DEMO_BANNER
    from gputui.commands.monitor import DEMO_BANNER as MONITOR_BANNER
    from gputui.session.feeds import demo_recording
    from gputui.session.rank_feeds import ReplayRanksFeed

    if name.startswith("ranks-"):
        feed = ReplayRanksFeed(demo_recording("ddp"), "demo")
        svg = await _rank_view(feed, RANKS_DEMO_BANNER, DDP_RANKS_AT_S, name, size)
    else:
        source = ReplaySource.demo(name="ddp")
        app: GputuiApp = make_app(source, 1.0, banner=MONITOR_BANNER, autostart=False)
        async with app.run_test(size=size) as pilot:
            app.advance(DDP_AT)
            await pilot.pause()
            svg = await settled(app, pilot, f"gputui {name}")
    path = args.out / f"{name}.svg"
    path.write_text(svg)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--replay", metavar="FILE", help="a recording to render")
    source.add_argument("--synthetic", action="store_true", help="generated data")
    parser.add_argument("--banner", help="the banner line (default: says what the data is)")
    parser.add_argument("--out", type=Path, default=ROOT / "screenshots", help="output folder")
    parser.add_argument(
        "--memory-recording",
        type=Path,
        metavar="FILE",
        default=MEMORY_RECORDING,
        help="an attach recording holding a memory snapshot, for the memory-* views "
        "(default: the H100 recording in tests/data)",
    )
    parser.add_argument(
        "--only",
        nargs="*",
        choices=sorted(
            [
                *VIEWS,
                *ATTACH_VIEWS,
                *RANKS_VIEWS,
                *DDP_VIEWS,
                *ROOFLINE_VIEWS,
                *PYTHON_VIEWS,
                *MEMORY_VIEWS,
            ]
        ),
        help="render only these",
    )
    parser.add_argument(
        "--at",
        type=int,
        default=None,
        metavar="N",
        help=f"play N samples before the screenshot (default: {DEMO_AT} for the demo, "
        f"else {WARMUP_SAMPLES})",
    )
    args = parser.parse_args(argv)
    if args.at is None and not (args.replay or args.synthetic):
        args.at = DEMO_AT
    args.out.mkdir(parents=True, exist_ok=True)
    # Times on screen are the recording's; show them in UTC so reruns match.
    os.environ["TZ"] = "UTC"
    time.tzset()
    for name, (size, setup, ascii_only) in VIEWS.items():
        if args.only and name not in args.only:
            continue
        svg = asyncio.run(render(args, name, size, setup, ascii_only))
        png = to_png(svg)
        print(svg, png or "(no PNG: install cairosvg or librsvg2-bin)")
    groups = [
        (ATTACH_VIEWS, render_attach),
        (RANKS_VIEWS, render_ranks),
        (DDP_VIEWS, render_ddp),
        (ROOFLINE_VIEWS, render_roofline),
        (PYTHON_VIEWS, render_python),
    ]
    if args.memory_recording is not None:
        groups.append((MEMORY_VIEWS, render_memory))
    for views, renderer in groups:
        for name, size in views.items():
            if args.only and name not in args.only:
                continue
            svg = asyncio.run(renderer(args, name, size))
            png = to_png(svg)
            print(svg, png or "(no PNG: install cairosvg or librsvg2-bin)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
