"""Writing a capture's Chrome trace, and saying why when it cannot be written.

torch's ``export_chrome_trace`` never raises when the write fails: kineto logs
"Failed to write to log file!" on the job's stderr, leaves a partial
``NAME.tmp`` behind and returns.  So the hook checks around it: that the
directory takes a new file (the exact error if not), that the disk keeps
:data:`MIN_FREE_BYTES` free (a trace must never take the space a checkpoint
needs), and afterwards that the file is there; a failed write's partial file is
removed and its cause named (no space, the file size limit, or what the
operating system says).  The kernel tables do not depend on any of this: they
are reduced before the export.
"""

from __future__ import annotations

import errno
import glob
import os
from collections.abc import Sequence
from typing import Any

#: Leave at least this much free on the trace directory's filesystem.
MIN_FREE_BYTES = 256 * 2**20


class TraceNotWritten(Exception):
    """The trace was not written; the message says why, in one line."""


def _size(nbytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if nbytes < 1024 or unit == "TiB":
            return f"{nbytes:.0f}{unit}" if unit == "B" else f"{nbytes:.1f}{unit}"
        nbytes /= 1024
    return f"{nbytes:.1f}TiB"  # unreachable; keeps type checkers content


def free_bytes(directory: str) -> int | None:
    """Bytes an unprivileged writer may still use under ``directory`` (None: unknown)."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return None
    return int(st.f_bavail) * int(st.f_frsize)


def _file_size_limit() -> int | None:
    try:
        import resource  # Unix only; the hook must load without it
    except ImportError:
        return None
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    except (OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY else int(soft)


def export_trace(prof: Any, directory: str, name: str) -> tuple[str, int]:
    """Export ``prof``'s Chrome trace as ``directory/name`` (mode 0600); return the
    path and its size, or raise :class:`TraceNotWritten` with the reason."""
    path = os.path.join(directory, name)
    # Our own probe of the directory, with the exact error: kineto's failures
    # only reach the job's stderr.  The empty file is replaced by the export.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise TraceNotWritten(f"cannot write in {directory}: {exc.strerror}") from None
    os.close(fd)
    free = free_bytes(directory)
    if free is not None and free < MIN_FREE_BYTES:
        _remove(path)
        raise TraceNotWritten(
            f"only {_size(free)} free on the filesystem of {directory} "
            f"(gputui leaves {_size(MIN_FREE_BYTES)} free)"
        )
    partial = path + ".tmp"  # where kineto writes before renaming
    try:
        prof.export_chrome_trace(path)
        size = os.path.getsize(path)
        if size > 0:
            os.chmod(path, 0o600)
            return path, size
        reason = _why_not_written(directory, partial)
    except OSError as exc:
        reason = exc.strerror or str(exc)
    except Exception as exc:  # torch's own error: keep its words
        reason = f"{type(exc).__name__}: {exc}"
    _remove(path)
    _remove(partial)
    raise TraceNotWritten(f"writing {path} failed: {reason}")


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _why_not_written(directory: str, partial: str) -> str:
    """The likely cause of a write that torch reported only on stderr."""
    try:
        written = os.path.getsize(partial)
    except OSError:
        written = None
    limit = _file_size_limit()
    if limit is not None and written is not None and written >= limit:
        return (
            f"{os.strerror(errno.EFBIG)}: the job's file size limit (ulimit -f) is {_size(limit)}"
        )
    free = free_bytes(directory)
    if free is not None and free < 1024 * 1024:
        return f"{os.strerror(errno.ENOSPC)} ({_size(free)} free)"
    return "torch wrote nothing (its error is on the job's stderr)"


def prune_oldest(directory: str, pattern: str, keep: int, also: Sequence[str] = ()) -> None:
    """Delete all but the ``keep`` newest files of ``directory`` matching ``pattern``,
    and the files in ``also``; a file that cannot be deleted is left."""
    files = sorted(glob.glob(os.path.join(directory, pattern)), key=_mtime)
    for path in [*files[:-keep], *also] if keep > 0 else [*files, *also]:
        try:
            os.unlink(path)
        except OSError:
            pass


def _mtime(path: str) -> float:
    try:
        return os.path.getmtime(path)
    except OSError:
        return 0.0
