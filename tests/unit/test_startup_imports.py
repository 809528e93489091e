"""What each one-shot command line loads: only what it uses (start-up time)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.deadlines import RUN_S

#: never needed to print a sub-command's help
UNUSED_FOR_HELP = (
    "gputui.analysis",
    "gputui.nvml",
    "gputui.host",
    "gputui.recording",
    "gputui.client",
    "gputui.tracefile",
    "gputui.sources",
    "gputui.session",
    "gputui.reports",
    "gputui.snapshot",
    "gputui.trace",
    "gputui.exporter",
    "gputui.cluster",
    "gputui.tui",
    "gputui.protocol.wire",
    "gputui.protocol.schema",
    "textual",
    "rich",
    "torch",
    "pynvml",
    "psutil",
    "shutil",
)

#: what the monitor's one-shot of a recording never uses
UNUSED_FOR_ONCE = (
    "socket",  # a recording is read from a file; only writing one names the host
    "importlib.resources",  # the embedded demo is read from beside the modules
    "shutil",  # the terminal's width is read without it
    "statistics",
    "logging",
    "gputui.protocol",
    "gputui.tui",
    # the container column and the host-pid note: only when a process has one
    "gputui.session.container_text",
    "gputui.host.pid_namespace",
)


#: what the live one-shot's text report never uses (NVML faked): the container
#: runtimes' API client loads with a container id, the codec with --json
UNUSED_FOR_LIVE_TEXT = (
    "json",
    "gputui.host.runtime_api",
    "gputui.snapshot.codec",
    "gputui.recording.replay",
    "gputui.session.container_text",
    "gputui.protocol.wire",
    "gputui.tui",
    "textual",
    "rich",
)

#: in the child, before ``main``: NVML is the fake (one H100, no process)
FAKE_NVML = (
    "from gputui.nvml import startup as nvml_open\n"
    "from tests.helpers.fake_nvml import FakeNvml, h100\n"
    "nvml_open.import_pynvml = lambda: FakeNvml([h100()])\n"
)


def loaded_by(argv: list[str], watched: tuple[str, ...], prelude: str = "") -> list[str]:
    """The modules of ``watched`` (and their submodules) loaded once ``gputui
    ARGV`` has returned, in a fresh interpreter (that first runs ``prelude``)."""
    code = (
        prelude + "import io, sys; from gputui.cli import main\n"
        "out, sys.stdout = sys.stdout, io.StringIO()\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.stdout = out\n"
        f"watched = {watched!r}\n"
        "print('LOADED', sorted(m for m in sys.modules "
        "if m in watched or m.startswith(tuple(w + '.' for w in watched))))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=RUN_S
    )
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("LOADED "))
    return list(ast.literal_eval(line[len("LOADED ") :]))


@pytest.mark.parametrize(
    "command", ["record", "run", "ls", "attach", "bench", "exporter", "cluster", "analyze"]
)
def test_a_sub_commands_help_loads_only_its_parser(command: str) -> None:
    # the help is laid out to the width by the text layer (the standard library
    # and fmt): of the reports, that module alone
    assert loaded_by([command, "--help"], UNUSED_FOR_HELP) == TEXT_LAYER


#: what a help text loads of the reports: the text layer that fits it to the width
TEXT_LAYER = ["gputui.reports", "gputui.reports.text"]


def test_the_attach_parser_loads_the_protocols_limits_not_the_client() -> None:
    watched = (
        "gputui.client.hook",
        "gputui.session",
        "gputui.reports",
        "gputui.analysis",
        "gputui.protocol.wire",
        "gputui.protocol.memsnap",
    )
    # memsnap's limits are in the help text; the client, the session and the
    # reports come with a job to attach to
    assert loaded_by(["attach", "--help"], watched) == ["gputui.protocol.memsnap", *TEXT_LAYER]


@pytest.mark.parametrize("extra", [[], ["--json"]], ids=["text", "json"])
def test_the_monitors_one_shot_of_a_recording_loads_no_socket_or_resources(
    extra: list[str],
) -> None:
    # of the protocol, the package and the value classes' base (the model's
    # classes derive from it), no wire module
    assert loaded_by(["--demo", "--once", *extra], UNUSED_FOR_ONCE) == VALUE_BASE


#: what every command loads of the protocol: its package and the value base
VALUE_BASE = ["gputui.protocol", "gputui.protocol.value"]


def test_the_live_text_one_shot_loads_no_json_codec_or_runtime_client() -> None:
    assert loaded_by(["--once"], UNUSED_FOR_LIVE_TEXT, FAKE_NVML) == []
    # the control: --json does load the codec, with the same fake
    assert loaded_by(["--once", "--json"], ("gputui.snapshot.codec",), FAKE_NVML) == [
        "gputui.snapshot.codec"
    ]


def test_the_watch_list_catches_a_module_that_is_loaded() -> None:
    """The control: the same helper sees what the one-shot does load."""
    assert loaded_by(["--demo", "--once"], ("zlib", "gputui.snapshot.model")) == [
        "gputui.snapshot.model",
        "zlib",
    ]


@pytest.mark.parametrize(
    ("argv", "collecting"),
    [(["--demo", "--once"], False), (["--demo", "--once", "--json"], False), (["ls"], True)],
    ids=["once", "once-json", "sub-command"],
)
def test_the_monitors_one_shot_runs_without_the_cyclic_collector(
    argv: list[str], collecting: bool
) -> None:
    """The ``gputui`` command turns the cyclic collector off for the monitor's
    one-shot (it ends in a moment), and only for it; only there it tells the
    monitor that the process leaves right after (no NVML shutdown)."""
    code = (
        "import gc, sys; import gputui.cli as cli\n"
        "cli.main = lambda argv, leaving=False: "
        "print('COLLECTING', gc.isenabled(), 'LEAVING', leaving) or 0\n"
        f"sys.argv = ['gputui', *{argv!r}]\n"
        "cli.entry()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=RUN_S
    )
    assert proc.returncode == 0, proc.stderr
    # and only its one-shot leaves the kernel to end NVML's session
    assert f"COLLECTING {collecting} LEAVING {not collecting}" in proc.stdout


#: what the monitor's screen never uses: the op rows and their cost model come
#: with a trace or an attached job (its device panel shows only a GPU's ceilings);
#: of the sessions, it loads only the monitor's (MONITORS_SESSION)
UNUSED_BY_THE_SCREEN = (
    "gputui.analysis.roofline",
    "gputui.protocol",
    "gputui.trace",
    "gputui.session",
    "gputui.exporter",
    "gputui.cluster",
)
MONITORS_SESSION = [
    "gputui.session",
    "gputui.session.container_text",
    "gputui.session.monitor",
    "gputui.session.process_sort",
    "gputui.session.process_view",
    "gputui.session.slurm_text",
]

SCREEN = """
import sys
from tests.helpers.demo_screen import run_demo_screen
run_demo_screen()
from gputui.ceilings.cache import load_ceilings  # the live screen's, on its poller thread
watched = {watched!r}
print('LOADED', sorted(m for m in sys.modules
      if m in watched or m.startswith(tuple(w + '.' for w in watched))))
"""


def test_the_monitors_screen_loads_no_op_rows_or_trace_model() -> None:
    # gputui.analysis.roof is the control: the device panel's ceilings are loaded
    code = SCREEN.format(watched=(*UNUSED_BY_THE_SCREEN, "gputui.analysis.roof"))
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=RUN_S
    )
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("LOADED "))
    loaded = ast.literal_eval(line[len("LOADED ") :])
    assert loaded == ["gputui.analysis.roof", *VALUE_BASE, *MONITORS_SESSION]


HOUSEKEEPING = """
import asyncio, sys
{prelude}
from gputui.tui.app import make_app

async def run():
    app = make_app({source}, interval_s=3600.0, autostart=False)
    async with app.run_test(size=(100, 30)):
        app.start_housekeeping()  # what a monitor in a terminal does at start
    print('LOADED', 'gputui.recording.snapshot_lines' in sys.modules)

asyncio.run(run())
"""


@pytest.mark.parametrize(
    ("source", "prelude", "loaded"),
    [
        ("open_live(False)", FAKE_NVML + "from gputui.sources.live import open_live", False),
        ("ReplaySource.demo()", "from gputui.recording.replay import ReplaySource", True),
    ],
)
def test_the_live_monitor_does_not_load_the_replays_decoder(
    source: str, prelude: str, loaded: bool
) -> None:
    # the replay (the control) needs it; the live monitor's housekeeping must not load it
    code = HOUSEKEEPING.format(prelude=prelude, source=source)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=RUN_S
    )
    assert proc.returncode == 0, proc.stderr
    assert f"LOADED {loaded}" in proc.stdout


def test_analyze_loads_the_typed_decoder_for_large_traces_only() -> None:
    """msgspec costs about 10 ms to import: a small trace is read without it, a
    trace past the first megabyte of JSON with it."""
    data = Path(__file__).resolve().parents[1] / "data"
    small = str(data / "h100-cases" / "compiled.pt.trace.json.gz")
    large = str(data / "traces" / "healthy.pt.trace.json.gz")  # 6.4 MB of JSON
    watched = ("msgspec", "gputui.tracefile.typed")
    assert loaded_by(["analyze", small, "--json"], watched) == []
    loaded = loaded_by(["analyze", large, "--json"], watched)
    assert "msgspec" in loaded and "gputui.tracefile.typed" in loaded


def test_analyze_of_one_file_starts_no_workers_and_imports_no_multiprocessing() -> None:
    """About 15 ms of imports that one file, read in this process, does not need."""
    small = str(
        Path(__file__).resolve().parents[1] / "data" / "traces" / "healthy.pt.trace.json.gz"
    )
    assert loaded_by(["analyze", small, "--json"], ("multiprocessing",)) == []


def _trace_of(path: Path, megabytes: float, compress: bool) -> Path:
    """A trace of about ``megabytes`` of JSON (as written): steps of a launched
    kernel each, 500 at a time."""
    from tests.helpers.tracegen import GEMM, TraceBuilder

    t = TraceBuilder()
    k = 0
    while len(json.dumps(t.document(), indent=1)) < megabytes * 1e6:
        for _ in range(500):
            t0 = k * 1_000.0
            t.step(k + 1, t0, 900.0)
            t.launch(t0 + 100.0, 10.0, GEMM, t0 + 120.0, 500.0)
            k += 1
    return t.write(path, compress=compress)


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_a_trace_under_three_megabytes_of_json_is_read_without_msgspec(
    tmp_path: Path, compress: bool
) -> None:
    """Importing msgspec and making its decoders costs a small trace more than
    they save it: the standard decoder reads it all; the control, a larger
    trace, is read by the typed decoder (a gzipped one: by the size its trailer
    records)."""
    small = _trace_of(tmp_path / "small.pt.trace.json", 2.0, compress)
    large = _trace_of(tmp_path / "large.pt.trace.json", 4.0, compress)
    assert loaded_by(["analyze", str(small)], ("msgspec",)) == []
    assert "msgspec" in loaded_by(["analyze", str(large)], ("msgspec",))
