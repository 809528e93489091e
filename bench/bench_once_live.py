"""``gputui --once`` on a live GPU against nvitop's ``--once`` and the floor.

    python3 bench/bench_once_live.py [--runs 10] [--load] [--out once-live.json]

Three commands take turns, ``--runs`` rounds (the order rotates each round):
``python3 -m gputui --once`` (this tree on ``PYTHONPATH``), ``python3 -m nvitop
--once``, and the floor: ``python3`` importing pynvml and psutil, ``nvmlInit``
and two queries (the device count and the first device's utilization).  Each
run's wall time (``time.perf_counter`` around the child) and peak RSS
(``os.wait4``) are kept; reported: medians, and gputui's median against
nvitop's and against the floor.  ``--load`` runs a bf16 matrix-product loop
on the GPU meanwhile (``bench/jobs/gpu_load.py``), as with a job on it.

Byte code, for all three alike (what installed packages have): compiled first
for this tree, pynvml, psutil and nvitop, beside their sources when those
directories are writable; where one is not (a site directory installed with
``pip --no-compile`` by another user), every command runs with
``PYTHONPYCACHEPREFIX`` pointing at one writable directory, which the untimed
runs fill.  Either way a child then imports what the commands import and lists
every module whose byte code is missing: the JSON's ``pyc`` says which way was
taken and what was missing (nothing, for a fair run).  Without it each command
compiled pynvml and psutil at every run (~77 ms on the H200 host).
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FLOOR = (
    "import pynvml, psutil; pynvml.nvmlInit(); n = pynvml.nvmlDeviceGetCount(); "
    "pynvml.nvmlDeviceGetUtilizationRates(pynvml.nvmlDeviceGetHandleByIndex(0))"
)
COMMANDS = {
    "gputui": [sys.executable, "-m", "gputui", "--once"],
    "nvitop": [sys.executable, "-m", "nvitop", "--once"],
    "floor": [sys.executable, "-c", FLOOR],
}


#: the packages whose byte code the three commands need
PACKAGES = ("pynvml", "psutil", "nvitop")
#: a child's list of every imported module without byte code in the cache it reads
CACHE_CHECK = (
    "import importlib, json, os, sys\n"
    "for name in ('pynvml', 'psutil', 'nvitop', 'gputui.cli', 'gputui.commands.monitor',\n"
    "             'gputui.sources.live', 'gputui.nvml.collector',\n"
    "             'gputui.host.collector', 'gputui.reports.monitor'):\n"
    "    try:\n"
    "        importlib.import_module(name)\n"
    "    except ImportError:\n"
    "        pass\n"
    "def compiled(m):\n"
    "    spec = getattr(m, '__spec__', None)\n"
    "    if spec is None or spec.origin in (None, 'frozen', 'built-in'):\n"
    "        return True\n"
    "    if not str(spec.origin).endswith('.py'):\n"
    "        return True  # an extension module: nothing to compile\n"
    "    return bool(spec.cached) and os.path.exists(spec.cached)\n"
    "missing = sorted(n for n, m in list(sys.modules.items()) if not compiled(m))\n"
    "print(json.dumps(missing))\n"
)

#: the children's environment (byte code is written and read; see prepare_pyc)
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def prepare_pyc() -> dict[str, Any]:
    """Byte code for this tree and the packages the commands import: beside the
    sources where writable, else in a ``PYTHONPYCACHEPREFIX`` shared by every
    command (filled by the untimed runs).  Returns what was done."""
    compileall.compile_dir(str(REPO / "gputui"), quiet=1)
    state: dict[str, Any] = {"packages": {}}
    in_place = True
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            state["packages"][name] = "not installed"
            continue
        origin = Path(spec.origin)
        root = origin.parent if spec.submodule_search_locations else origin
        if root.is_dir():
            ok = compileall.compile_dir(str(root), quiet=2)
        else:
            ok = compileall.compile_file(str(root), quiet=2)
        cached = importlib.util.cache_from_source(str(origin))
        written = bool(ok) and os.path.exists(cached)
        state["packages"][name] = "compiled beside the source" if written else "not writable"
        in_place = in_place and written
    if not in_place:
        prefix = tempfile.mkdtemp(prefix="once-live-pyc-")
        ENV["PYTHONPYCACHEPREFIX"] = prefix
        state["pycache_prefix"] = prefix
    state["mode"] = "beside the sources" if in_place else "PYTHONPYCACHEPREFIX, warmed"
    return state


def missing_pyc() -> list[str]:
    """The modules a child imports without byte code in the cache it reads."""
    out = subprocess.run(
        [sys.executable, "-c", CACHE_CHECK],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=ENV,
        check=True,
    ).stdout
    missing: list[str] = json.loads(out)
    return missing


def one(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one run."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO, env=ENV
    )
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        raise SystemExit(f"{argv}: exit status {status}: {err[-400:]}")
    return wall, usage.ru_maxrss / 1024.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--load", action="store_true")
    parser.add_argument("--out", default="once-live.json")
    args = parser.parse_args()
    pyc = prepare_pyc()
    load = None
    if args.load:
        plan = ["--plan", f"bf16mm:{30 + args.runs * 6}"]
        job = [sys.executable, str(REPO / "bench/jobs/gpu_load.py"), *plan]
        load = subprocess.Popen(job, stdout=subprocess.DEVNULL)
        time.sleep(5)
    names = list(COMMANDS)
    for _ in range(2):  # untimed runs: the page cache, the driver, the byte code
        for name in names:
            one(COMMANDS[name])
    # every module the commands import has byte code where it is looked for
    pyc["missing_after_warm_up"] = missing_pyc()
    if pyc["missing_after_warm_up"]:
        print(f"warning: modules without byte code: {pyc['missing_after_warm_up']}")
    runs: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    try:
        for r in range(args.runs):
            for name in names[r % 3 :] + names[: r % 3]:
                runs[name].append(one(COMMANDS[name]))
    finally:
        if load is not None:
            load.kill()
    med = {
        n: {
            "wall_s": statistics.median(w for w, _ in v),
            "rss_mb": statistics.median(m for _, m in v),
            "wall_all_s": [round(w, 4) for w, _ in v],
        }
        for n, v in runs.items()
    }
    result: dict[str, Any] = {
        "machine": platform.node(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "loadavg": os.getloadavg(),
        "load_on_gpu": args.load,
        "runs": args.runs,
        "python": platform.python_version(),
        "pyc": pyc,
        "medians": med,
        "gputui_over_nvitop": med["gputui"]["wall_s"] / med["nvitop"]["wall_s"],
        "gputui_minus_floor_s": med["gputui"]["wall_s"] - med["floor"]["wall_s"],
    }
    Path(args.out).write_text(json.dumps(result, indent=1))
    for n in names:
        print(f"{n:8} wall {med[n]['wall_s'] * 1000:7.1f} ms  peak RSS {med[n]['rss_mb']:6.1f} MB")
    print(
        f"gputui/nvitop {result['gputui_over_nvitop']:.2f}; "
        f"gputui - floor {result['gputui_minus_floor_s'] * 1000:.0f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
