"""The monitor's C heap: one malloc arena from before its threads start, and
free pages handed back to the kernel (gputui.tui.footprint)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import threading
from typing import Any

import pytest

from gputui import cli
from gputui.commands import tty
from gputui.nvml import startup as nvml_open
from gputui.tui import footprint
from tests.helpers.fake_nvml import GIB, FakeNvml, FakeProcess, h100

glibc = pytest.mark.skipif(footprint._libc() is None, reason="not glibc: both calls are no-ops")
#: a Python built with all three (else there is nothing to leave out)
all_three = pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in footprint.UNUSED_LIBRARIES),
    reason="this Python lacks ssl, bz2 or lzma",
)

#: a heap with holes: 80 MiB of 4 KiB blocks, every 16th kept, the rest freed
#: (free() keeps what is below a live block); the RSS before and after a trim
HOLES = """
import ctypes, sys
from gputui.tui import footprint
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
footprint.trim()  # what start-up freed: not counted
def rss_kb():
    with open("/proc/self/status") as fh:
        return next(int(l.split()[1]) for l in fh if l.startswith("VmRSS:"))
blocks = [libc.malloc(4096) for _ in range(20480)]
for b in blocks:
    ctypes.memset(b, 1, 4096)
for i, b in enumerate(blocks):
    if i % 16:
        libc.free(b)
before = rss_kb()
trimmed = footprint.trim()
print(before, rss_kb(), trimmed)
"""


@glibc
def test_a_trim_returns_the_free_pages_of_the_heap() -> None:
    done = subprocess.run([sys.executable, "-c", HOLES], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    before, after, trimmed = done.stdout.split()
    # 75 MiB of the 80 were freed in holes: a trim gives most of it back
    assert trimmed == "True"
    assert int(before) - int(after) > 50 * 1024, (before, after)


@glibc
def test_one_arena_is_accepted() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from gputui.tui import footprint; print(footprint.one_arena())"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.strip() == "True", done.stderr


def test_the_monitor_asks_for_one_arena_before_its_threads_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nv = FakeNvml([h100(processes=[FakeProcess(4242, used_gpu_memory=3 * GIB)])])
    monkeypatch.setattr(nvml_open, "import_pynvml", lambda: nv)
    monkeypatch.setattr(tty, "has_terminal", lambda: True)
    events: list[str] = []
    monkeypatch.setattr(footprint, "one_arena", lambda: events.append("one arena"))
    monkeypatch.setattr(footprint, "lean_imports", lambda: events.append("imports"))
    start = threading.Thread.start

    def starting(thread: threading.Thread) -> None:
        events.append(f"thread {thread.name}")
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", starting)

    def no_screen(**_kw: Any) -> None:
        # the sample has been taken by now (settle_live waited for it)
        events.append("screen")
        raise KeyboardInterrupt  # the command line's way out, without a screen

    import gputui.tui.app

    monkeypatch.setattr(gputui.tui.app, "make_app", no_screen)
    cli.main([])
    assert nv.init_count == 1  # the live path ran: its sample thread opened NVML
    assert "thread gputui-first-sample" in events and events[-1] == "screen"
    assert events[:2] == ["one arena", "imports"]
    assert events.count("one arena") == events.count("imports") == 1


def test_one_shot_and_pipes_leave_malloc_alone(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked: list[bool] = []
    monkeypatch.setattr(footprint, "one_arena", lambda: asked.append(True))
    monkeypatch.setattr(footprint, "lean_imports", lambda: asked.append(True))
    assert cli.main(["--demo", "--once"]) == 0
    assert "H100" in capsys.readouterr().out
    assert asked == []


LEAN = """
import sys
from gputui.tui import footprint
done = footprint.lean_imports()
print(done, *(name in sys.modules for name in ("ssl", "bz2", "lzma", "asyncio", "shutil")))
import asyncio
asyncio.run(asyncio.sleep(0))  # the loop runs
# Textual's own imports (tempfile, through platformdirs) find shutil loaded
import textual.app  # noqa: F401
print(*(name in sys.modules for name in ("ssl", "bz2", "lzma")))
import bz2, lzma, ssl  # and each imports afterwards for whatever needs it
print(ssl.PROTOCOL_TLS_CLIENT is not None, bz2.decompress(bz2.compress(b"x")) == b"x",
      lzma.decompress(lzma.compress(b"x")) == b"x", footprint.lean_imports())
"""


@all_three
def test_asyncio_and_textual_load_without_tls_or_archive_libraries_which_import_later() -> None:
    done = subprocess.run([sys.executable, "-c", LEAN], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = [line.split() for line in done.stdout.splitlines()]
    assert lines == [
        ["True", "False", "False", "False", "True", "True"],
        ["False", "False", "False"],
        ["True", "True", "True", "False"],
    ]


CONTROL = """
import sys
import asyncio, textual.app
print(*(name in sys.modules for name in ("ssl", "bz2", "lzma")))
"""


@all_three
def test_the_control_textual_and_asyncio_load_them_otherwise() -> None:
    """What the blocks are worth: without them, these three are loaded."""
    done = subprocess.run(
        [sys.executable, "-c", CONTROL], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "True"]


def test_what_is_already_loaded_is_left_as_it_is() -> None:
    import asyncio  # noqa: F401
    import shutil  # noqa: F401

    assert footprint.lean_imports() is False
    for name in footprint.UNUSED_LIBRARIES:
        assert name not in sys.modules or sys.modules[name] is not None


# -- the collector and thousands of processes ---------------------------------------------
class _Cycle:
    """Cyclic garbage: freed only by the cyclic collector."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def clean_gc() -> Any:
    import gc

    from gputui.recording import snapshot_lines

    gc.unfreeze()
    yield gc
    gc.unfreeze()
    snapshot_lines.freeze_from = None


def test_a_large_sample_is_frozen_and_thawed_for_a_full_collection(clean_gc: Any) -> None:
    import weakref

    gc = clean_gc
    now = [0.0]
    freezer = footprint.SampleFreezer(threshold=1000, thaw_every_s=60.0, clock=lambda: now[0])
    freezer.after_sample(999)  # the control: below the threshold
    assert gc.get_freeze_count() == 0 and freezer.frozen_since is None
    garbage = _Cycle()
    gone = weakref.ref(garbage)
    del garbage
    freezer.after_sample(1000)
    assert gc.get_freeze_count() > 0 and freezer.frozen_since == 0.0
    gc.collect()
    assert gone() is not None  # frozen: no collection reaches it
    now[0] = 59.0
    freezer.after_sample(1000)
    assert freezer.thaws == 0 and gone() is not None
    now[0] = 60.0
    freezer.after_sample(1000)
    assert freezer.thaws == 1 and gone() is None  # the full collection freed it
    assert gc.get_freeze_count() > 0  # what survived, frozen again


def test_the_decoder_freezes_a_large_line_and_decodes_it_the_same(clean_gc: Any) -> None:
    import json

    from gputui.recording import snapshot_lines
    from gputui.recording.snapshot_lines import SnapshotLines
    from gputui.snapshot.codec import snapshot_to_json
    from tests.helpers.synthetic import make_snapshots

    gc = clean_gc
    (snap,) = make_snapshots(n_gpus=1, n_procs=40, n_steps=1)
    line = json.dumps(snapshot_to_json(snap), separators=(",", ":")).encode()
    plain = SnapshotLines().decode(line)
    assert gc.get_freeze_count() == 0
    snapshot_lines.freeze_from = 41  # the control: one process more than the line has
    SnapshotLines().decode(line)
    assert gc.get_freeze_count() == 0
    snapshot_lines.freeze_from = 40
    frozen = SnapshotLines().decode(line)
    assert gc.get_freeze_count() > 0 and gc.isenabled()
    assert frozen == plain


def test_fewer_young_passes_raises_only_the_young_threshold() -> None:
    import gc

    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        assert footprint.fewer_young_passes() == (700, 10, 10)
        assert gc.get_threshold() == (footprint.YOUNG_THRESHOLD, 10, 10)
        gc.set_threshold(50_000, 5, 5)  # already higher: kept
        footprint.fewer_young_passes()
        assert gc.get_threshold() == (50_000, 5, 5)
        gc.set_threshold(0, 10, 10)  # the collector switched off by its threshold: kept
        footprint.fewer_young_passes()
        assert gc.get_threshold() == (0, 10, 10)
    finally:
        gc.set_threshold(*before)
