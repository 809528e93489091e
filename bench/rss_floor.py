"""The memory floor under any Textual monitor of NVIDIA GPUs on this machine.

    python bench/rss_floor.py [--seconds 8] [--out FILE]

Runs, each in its own tmux pane of 120x40 and in turn:
  python      the interpreter with nothing imported
  nvml        ``import pynvml``, ``nvmlInit()`` and one query of each GPU
  textual     a bare Textual app (one Static)
  textual+nvml  the bare app after the ``nvml`` stage's work, done on mount
and reads each process's RSS (``/proc/self/status``: VmRSS, RssAnon, RssFile)
after ``--seconds``.  Every stage but ``python`` first takes the measures the
monitor takes for its footprint (``gputui.tui.footprint``: one malloc arena,
asyncio and shutil imported without OpenSSL and the archive libraries, the heap
trimmed before the reading), so that ``textual+nvml`` is what a Textual screen
of GPUs costs before any of gputui's own code; compare it with the RSS of the
tools that run on the same machine (``bench/bench_tui.py live``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STAGES = ("python", "nvml", "textual", "textual+nvml")


def _rss() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key = line.split(":", 1)[0]
            if key in ("VmRSS", "RssAnon", "RssFile"):
                out[key + "_kb"] = int(line.split()[1])
    return out


def _nvml() -> None:
    import pynvml

    pynvml.nvmlInit()
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        pynvml.nvmlDeviceGetUtilizationRates(handle)
        pynvml.nvmlDeviceGetMemoryInfo(handle)


def inside(stage: str, seconds: float, result: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from gputui.tui import footprint

    if stage != "python":
        footprint.one_arena()
        footprint.lean_imports()

    def finish() -> None:
        if stage != "python":
            footprint.trim()
        result.write_text(json.dumps(_rss()))

    if stage in ("python", "nvml"):
        if stage == "nvml":
            _nvml()
        time.sleep(seconds)
        finish()
        return
    from textual.app import App, ComposeResult
    from textual.widgets import Static

    class Bare(App[None]):
        def compose(self) -> ComposeResult:
            yield Static("a bare Textual app")

        def on_mount(self) -> None:
            if stage == "textual+nvml":
                _nvml()
            self.set_timer(seconds, self.done)

        def done(self) -> None:
            finish()
            self.exit()

    Bare().run()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--inside", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        inside(args.inside[0], args.seconds, Path(args.inside[1]))
        return 0
    results: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for stage in STAGES:
            result = Path(tmp) / f"{stage}.json"
            command = shlex.join(
                [
                    sys.executable,
                    __file__,
                    "--seconds",
                    str(args.seconds),
                    "--inside",
                    stage,
                    str(result),
                ]
            )
            socket = f"gputui-rss-floor-{os.getpid()}"
            subprocess.run(
                ["tmux", "-L", socket, "new-session", "-d", "-x", "120", "-y", "40", command],
                check=True,
            )
            deadline = time.monotonic() + args.seconds + 60
            try:
                while not result.exists() and time.monotonic() < deadline:
                    time.sleep(0.25)
                time.sleep(0.25)
            finally:
                subprocess.run(["tmux", "-L", socket, "kill-server"], check=False)
            if result.exists():
                results[stage] = json.loads(result.read_text())
            print(stage, results.get(stage, "no result"), file=sys.stderr)
    text = json.dumps({"rss": results, "python": sys.version.split()[0]}, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0 if len(results) == len(STAGES) else 1


if __name__ == "__main__":
    sys.exit(main())
