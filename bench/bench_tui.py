"""Costs of the monitor as a user runs it: in tmux, a real terminal.

Modes (each prints a table and, with --out, writes JSON):
  live     steady-state CPU and RSS of `gputui` and of `nvitop` on this machine's GPUs,
           interleaved A/B windows in the same run (needs a GPU; nvitop optional)
  replay   the same for `gputui --replay` of a large recording (8 GPUs x 40 processes),
           or with --demo of the demo (one H100); --bare adds a bare Textual app
           (the floor under any Textual screen) to live and replay
  steady   the live tools of `live` all running at once, each in its own tmux session,
           measured in the same windows after a long warm-up (default 330 s: the
           history graphs' 5-minute window full, as on a node left open)
  launch   launch to first full frame, polled from the tmux pane
  soak     a long replay: RSS and CPU per minute, first vs last minute

Usage: python bench/bench_tui.py live --seconds 60 --out results.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
SESSION = "gputui-bench"
#: tmux targets that name exactly this session ("-t NAME" alone also matches a prefix
#: of another session's name, or a window name: a parallel bench's session)
SESSION_T = f"={SESSION}"
PANE_T = f"={SESSION}:"


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def start_in_tmux(
    command: str, width: int = 120, height: int = 40, tree: Path = ROOT
) -> psutil.Process:
    subprocess.run(["tmux", "kill-session", "-t", SESSION_T], capture_output=True)
    # The tree's own gputui: `python -m` puts the working directory first on the path.
    # Packages installed beside the interpreter's own (PYTHONPATH) come after it.
    path = os.pathsep.join(p for p in (str(tree), os.environ.get("PYTHONPATH", "")) if p)
    env = (
        f"cd {shlex.quote(str(tree))} && exec env TERM=xterm-256color "
        f"PYTHONPATH={shlex.quote(path)} {command}"
    )
    tmux("new-session", "-d", "-s", SESSION, "-x", str(width), "-y", str(height), env)
    pid = int(tmux("display-message", "-p", "-t", PANE_T, "#{pane_pid}").strip())
    return psutil.Process(pid)


def stop_tmux() -> None:
    subprocess.run(["tmux", "kill-session", "-t", SESSION_T], capture_output=True)


def pane_text() -> str:
    return tmux("capture-pane", "-p", "-t", PANE_T)


def tree_cpu_s(proc: psutil.Process) -> float:
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


@dataclasses.dataclass
class Window:
    tool: str
    cpu_pct_of_core: float
    rss_mb: float
    #: where the RSS is: MB by mapping (anonymous, heap, each library), largest first
    rss_by_mapping: dict[str, float] = dataclasses.field(default_factory=dict)


def rss_by_mapping(pid: int, top: int = 8) -> dict[str, float]:
    """MB of resident memory per mapping of ``pid`` (/proc/PID/smaps): what the
    Python heap and arenas (anonymous), the C heap and each library hold."""
    totals: dict[str, int] = {}
    name = "[anon]"
    try:
        with open(f"/proc/{pid}/smaps") as fh:
            for line in fh:
                head = line.split(maxsplit=6)
                if head and "-" in head[0] and len(head) >= 5 and ":" in head[3]:
                    name = head[5].strip() if len(head) > 5 else "[anon]"
                elif line.startswith("Rss:"):
                    totals[name] = totals.get(name, 0) + int(line.split()[1])
    except OSError:
        return {}
    ranked = sorted(totals.items(), key=lambda kv: -kv[1])
    return {Path(k).name if k.startswith("/") else k: v / 1024 for k, v in ranked[:top]}


def measure(command: str, tool: str, warmup_s: float, seconds: float, tree: Path = ROOT) -> Window:
    proc = start_in_tmux(command, tree=tree)
    try:
        time.sleep(warmup_s)
        cpu0, t0 = tree_cpu_s(proc), time.monotonic()
        time.sleep(seconds)
        cpu1, t1 = tree_cpu_s(proc), time.monotonic()
        rss = tree_rss(proc)
        where = rss_by_mapping(proc.pid)
    finally:
        stop_tmux()
    return Window(tool, 100.0 * (cpu1 - cpu0) / (t1 - t0), rss / 2**20, where)


#: the control: a Textual app that draws nothing, the floor under any Textual screen
BARE_TEXTUAL = "-c 'from textual.app import App; App().run()'"


def gputui_cmd(args: str) -> str:
    return f"{shlex.quote(sys.executable)} -m gputui {args}"


def summarize(windows: list[Window]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for tool in sorted({w.tool for w in windows}):
        mine = [w for w in windows if w.tool == tool]
        out[tool] = {
            "cpu_pct_median": statistics.median(w.cpu_pct_of_core for w in mine),
            "rss_mb_median": statistics.median(w.rss_mb for w in mine),
            "windows": len(mine),
        }
    return out


def mode_live(args: argparse.Namespace) -> dict[str, object]:
    # gputui of each checkout (--tree), then nvitop, in every round
    tools = [(label, gputui_cmd("--interval 1"), tree) for label, tree in trees(args)]
    try:
        import nvitop  # noqa: F401

        nvitop_cmd = f"{shlex.quote(sys.executable)} -m nvitop --interval 1"
        tools.append(("nvitop", nvitop_cmd, ROOT))
    except ImportError:
        print("nvitop not importable: measuring gputui alone", file=sys.stderr)
    if args.bare:
        tools.append(("bare textual", f"{shlex.quote(sys.executable)} {BARE_TEXTUAL}", ROOT))
    windows = []
    for _ in range(args.rounds):
        for tool, command, tree in tools:
            windows.append(measure(command, tool, args.warmup, args.seconds, tree))
            print(windows[-1], file=sys.stderr)
    summary = summarize(windows)
    if "nvitop" in summary:
        summary["ratio_over_nvitop"] = {
            label: summary[label]["cpu_pct_median"] / summary["nvitop"]["cpu_pct_median"]
            for label, _tree in trees(args)
        }
    return {"mode": "live", "summary": summary, "windows": [dataclasses.asdict(w) for w in windows]}


def mode_steady(args: argparse.Namespace) -> dict[str, object]:
    tools = [(label, gputui_cmd("--interval 1"), tree) for label, tree in trees(args)]
    try:
        import nvitop  # noqa: F401

        tools.append(("nvitop", f"{shlex.quote(sys.executable)} -m nvitop --interval 1", ROOT))
    except ImportError:
        print("nvitop not importable: measuring gputui alone", file=sys.stderr)
    procs: dict[str, psutil.Process] = {}
    names = {tool: f"gputui-steady-{i}" for i, (tool, _c, _t) in enumerate(tools)}
    try:
        for tool, command, tree in tools:
            path = os.pathsep.join(p for p in (str(tree), os.environ.get("PYTHONPATH", "")) if p)
            env = (
                f"cd {shlex.quote(str(tree))} && exec env TERM=xterm-256color "
                f"PYTHONPATH={shlex.quote(path)} {command}"
            )
            session = names[tool]
            tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "40", env)
            pid = int(tmux("display-message", "-p", "-t", f"={session}:", "#{pane_pid}"))
            procs[tool] = psutil.Process(pid)
        time.sleep(args.warmup)
        windows = []
        for _ in range(args.rounds):
            before = {tool: tree_cpu_s(proc) for tool, proc in procs.items()}
            t0 = time.monotonic()
            time.sleep(args.seconds)
            elapsed = time.monotonic() - t0
            for tool, proc in procs.items():
                cpu = 100.0 * (tree_cpu_s(proc) - before[tool]) / elapsed
                windows.append(Window(tool, cpu, tree_rss(proc) / 2**20, rss_by_mapping(proc.pid)))
                print(windows[-1], file=sys.stderr)
    finally:
        for session in names.values():
            subprocess.run(["tmux", "kill-session", "-t", f"={session}"], capture_output=True)
    summary = summarize(windows)
    if "nvitop" in summary:
        summary["ratio_over_nvitop"] = {
            label: summary[label]["cpu_pct_median"] / summary["nvitop"]["cpu_pct_median"]
            for label, _tree in trees(args)
        }
    windows_out = [dataclasses.asdict(w) for w in windows]
    return {"mode": "steady", "summary": summary, "windows": windows_out}


def big_recording(path: Path, gpus: int, procs: int) -> None:
    """Grow the demo's snapshots to many GPUs and processes (a synthetic load)."""
    from gputui.recording.replay import RecordingWriter, read_demo

    header, snaps = read_demo()
    writer = RecordingWriter(path, interval_s=header.interval_s or 1.0, note="bench: scaled demo")
    for snap in snaps:
        base = snap.devices[0]
        devices = tuple(
            dataclasses.replace(base, index=i, uuid=f"{base.uuid}-{i}") for i in range(gpus)
        )
        templates = snap.processes or ()
        processes = (
            tuple(
                dataclasses.replace(
                    templates[k % len(templates)],
                    pid=100000 + k,
                    gpu_index=k % gpus,
                    gpu_uuid=devices[k % gpus].uuid,
                )
                for k in range(procs)
            )
            if templates
            else ()
        )
        writer.write(dataclasses.replace(snap, devices=devices, processes=processes))
    writer.close()


def trees(args: argparse.Namespace) -> list[tuple[str, Path]]:
    """(label, checkout) pairs to compare in one run: this checkout by default, or
    ``--tree LABEL=PATH`` given several times (before/after a change)."""
    if not args.tree:
        return [("gputui", ROOT)]
    out = []
    for item in args.tree:
        label, _, path = item.partition("=")
        out.append((label, Path(path).resolve()))
    return out


def mode_replay(args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        rec = Path(tmp) / "big.jsonl.gz"
        if not args.demo:
            big_recording(rec, args.gpus, args.procs)
        source = "--demo" if args.demo else f"--replay {rec}"
        tools = [(label, gputui_cmd(f"{source} --interval 1"), tree) for label, tree in trees(args)]
        if args.bare:
            tools.append(("bare textual", f"{shlex.quote(sys.executable)} {BARE_TEXTUAL}", ROOT))
        windows = []
        for _ in range(args.rounds):  # interleaved: the machine's drift hits both alike
            for label, command, tree in tools:
                windows.append(measure(command, label, args.warmup, args.seconds, tree))
                print(windows[-1], file=sys.stderr)
    return {
        "mode": "replay",
        "source": "the demo" if args.demo else "a synthetic recording",
        "gpus": None if args.demo else args.gpus,
        "processes": args.procs,
        "summary": summarize(windows),
    }


def mode_launch(args: argparse.Namespace) -> dict[str, object]:
    source = "--demo" if args.demo else ""
    times: dict[str, list[float]] = {label: [] for label, _ in trees(args)}
    for _ in range(args.rounds):
        for label, tree in trees(args):
            t0 = time.monotonic()
            start_in_tmux(gputui_cmd(f"{source} --interval 1"), tree=tree)
            try:
                deadline = t0 + 10
                while time.monotonic() < deadline:
                    text = pane_text()
                    # A full frame: device panel and process table both populated.
                    if args.marker in text and "PID" in text and "%" in text:
                        times[label].append(time.monotonic() - t0)
                        break
                    time.sleep(0.01)
            finally:
                stop_tmux()
    return {
        "mode": "launch",
        "first_frame_s_median": {
            label: statistics.median(runs) if runs else None for label, runs in times.items()
        },
        "runs": times,
    }


def mode_soak(args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        rec = Path(tmp) / "big.jsonl.gz"
        big_recording(rec, args.gpus, args.procs)
        proc = start_in_tmux(gputui_cmd(f"--replay {rec} --interval {args.interval}"))
        samples = []
        try:
            time.sleep(args.warmup)
            start = time.monotonic()
            last_cpu, last_t = tree_cpu_s(proc), start
            while time.monotonic() - start < args.seconds:
                time.sleep(min(60.0, args.seconds / 10))
                cpu, now = tree_cpu_s(proc), time.monotonic()
                samples.append(
                    {
                        "t_s": round(now - start, 1),
                        "rss_mb": tree_rss(proc) / 2**20,
                        "cpu_pct": 100.0 * (cpu - last_cpu) / (now - last_t),
                    }
                )
                last_cpu, last_t = cpu, now
                print(samples[-1], file=sys.stderr)
        finally:
            stop_tmux()
    return {
        "mode": "soak",
        "interval_s": args.interval,
        "rss_growth_mb": samples[-1]["rss_mb"] - samples[0]["rss_mb"],
        "cpu_first_pct": samples[0]["cpu_pct"],
        "cpu_last_pct": samples[-1]["cpu_pct"],
        "samples": samples,
    }


def main() -> None:
    if not shutil.which("tmux"):
        sys.exit("bench_tui needs tmux")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("mode", choices=["live", "steady", "replay", "launch", "soak"])
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--procs", type=int, default=40)
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument(
        "--demo", action="store_true", help="launch, replay: the demo, not live or a big recording"
    )
    p.add_argument("--bare", action="store_true", help="live, replay: a bare Textual app too")
    p.add_argument("--marker", default="H100", help="launch: text that marks a full frame")
    p.add_argument("--out", type=Path)
    p.add_argument(
        "--tree",
        action="append",
        metavar="LABEL=PATH",
        help="live/replay/launch: compare checkouts in one run (give it once per checkout)",
    )
    args = p.parse_args()
    os.environ.setdefault("TERM", "xterm-256color")
    result = {
        "live": mode_live,
        "steady": mode_steady,
        "replay": mode_replay,
        "launch": mode_launch,
        "soak": mode_soak,
    }[args.mode](args)
    result["machine"] = {"cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d")}
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
