"""Writing a capture's trace where it cannot be written: the reason is named in
one line, nothing partial is left, nothing is raised but TraceNotWritten.

The profiler is a stand-in that writes the way kineto does (``NAME.tmp``, then a
rename) and, like kineto, only logs a failed write.  The real thing, with a
torch job whose writes fail half-way, is in tests/integration/test_faults.py.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputui.hook import _capture, _trace_export
from gputui.hook._trace_export import TraceNotWritten, export_trace

TRACE = b'{"traceEvents": [' + b'{"name": "aten::mm", "ph": "X"},' * 2000 + b"{}]}"


class KinetoLike:
    """Writes TRACE as kineto does; a failure is logged, never raised."""

    def __init__(self, trace: bytes = TRACE) -> None:
        self.trace = trace
        self.logged: list[str] = []

    def export_chrome_trace(self, path: str) -> None:
        try:
            with open(path + ".tmp", "wb") as fh:
                for at in range(0, len(self.trace), 4096):
                    fh.write(self.trace[at : at + 4096])
                    fh.flush()
            os.replace(path + ".tmp", path)
        except OSError as exc:
            self.logged.append(f"Failed to write to log file! {exc}")


def test_a_trace_is_written_private(tmp_path: Path) -> None:
    path, size = export_trace(KinetoLike(), str(tmp_path), "1-steps1-2.pt.trace.json")
    assert Path(path).read_bytes() == TRACE and size == len(TRACE)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert os.listdir(tmp_path) == ["1-steps1-2.pt.trace.json"]


def test_a_directory_that_cannot_be_created(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", "/dev/null/cache")  # not even root can
    with pytest.raises(TraceNotWritten) as err:
        _capture.traces_dir()
    assert "cannot create the trace directory /dev/null/cache/gputui/traces" in str(err.value)
    assert "Not a directory" in str(err.value)


def test_a_read_only_directory(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes through permissions: the read-only mount below covers root")
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(TraceNotWritten) as err:
            export_trace(KinetoLike(), str(tmp_path), "t.pt.trace.json")
    finally:
        tmp_path.chmod(0o700)
    assert f"cannot write in {tmp_path}: Permission denied" == str(err.value)


def _mount_tmpfs(where: Path, options: str) -> None:
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")


@pytest.fixture
def tmpfs(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A tmpfs of 64 KiB (``request.param``: extra mount options)."""
    mount = tmp_path / "mnt"
    mount.mkdir()
    _mount_tmpfs(mount, "size=64k,mode=0700" + getattr(request, "param", ""))
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.parametrize("tmpfs", [",ro"], indirect=True)
def test_a_read_only_filesystem(tmpfs: Path) -> None:
    with pytest.raises(TraceNotWritten) as err:
        export_trace(KinetoLike(), str(tmpfs), "t.pt.trace.json")
    assert str(err.value) == f"cannot write in {tmpfs}: Read-only file system"


def test_a_nearly_full_filesystem_is_left_alone(tmpfs: Path) -> None:
    prof = KinetoLike()
    with pytest.raises(TraceNotWritten) as err:
        export_trace(prof, str(tmpfs), "t.pt.trace.json")
    assert "only 64.0KiB free on the filesystem of" in str(err.value)
    assert "gputui leaves 256.0MiB free" in str(err.value)
    assert os.listdir(tmpfs) == [] and prof.logged == []  # not even tried


def test_a_disk_that_fills_up_during_the_write(
    tmpfs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_trace_export, "MIN_FREE_BYTES", 0)
    prof = KinetoLike(TRACE * 3)  # more than the 64 KiB the filesystem holds
    with pytest.raises(TraceNotWritten) as err:
        export_trace(prof, str(tmpfs), "t.pt.trace.json")
    assert prof.logged  # kineto's only word on it
    assert "No space left on device" in str(err.value) and "\n" not in str(err.value)
    assert os.listdir(tmpfs) == []  # the partial file is gone


def test_a_profiler_that_raises_is_reported(tmp_path: Path) -> None:
    class Raising:
        def export_chrome_trace(self, path: str) -> None:
            raise RuntimeError("kineto said no")

    with pytest.raises(TraceNotWritten) as err:
        export_trace(Raising(), str(tmp_path), "t.pt.trace.json")
    assert "RuntimeError: kineto said no" in str(err.value)
    assert os.listdir(tmp_path) == []


def test_partial_files_of_dead_jobs_are_pruned(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f"{dead.pid}-20260101-000000-steps1-2.pt.trace.json.tmp"
    live = tmp_path / f"{os.getpid()}-20260101-000000-steps1-2.pt.trace.json.tmp"
    for path in (stale, live):
        path.write_bytes(b"{")
    _capture._prune_traces(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == [live.name]  # the live job may be writing it
