"""Where hook sockets live, and the checks that keep them private.

One socket per hooked job, named by pid, in a directory only its owner can enter:
``$XDG_RUNTIME_DIR/gputui/`` when that runtime dir exists and is ours, else
``/tmp/gputui-<uid>/``.  ``GPUTUI_SOCKET_DIR`` overrides both (tests, unusual
setups).  A job started without ``XDG_RUNTIME_DIR`` (cron, a batch scheduler) and a
viewer started with it would otherwise look in different places, so viewers scan
every candidate directory.
"""

from __future__ import annotations

import errno
import os
import stat
import struct
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import socket

SOCKET_SUFFIX = ".sock"
ENV_SOCKET_DIR = "GPUTUI_SOCKET_DIR"


class SocketDirError(Exception):
    """The socket directory is unsafe (wrong owner or permissions) or unusable."""


def current_uid() -> int:
    """The uid sockets and peers must belong to (a function so tests can patch it)."""
    return os.geteuid()


def socket_dirs() -> list[str]:
    """Candidate socket directories, the one a new hook uses first."""
    override = os.environ.get(ENV_SOCKET_DIR)
    if override:
        return [override]
    dirs: list[str] = []
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and _is_own_dir(runtime):
        dirs.append(os.path.join(runtime, "gputui"))
    dirs.append(os.path.join("/tmp", f"gputui-{os.getuid()}"))
    return dirs


def _is_own_dir(path: str) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()


def check_private_dir(path: str) -> None:
    """Raise :class:`SocketDirError` unless ``path`` is a real directory owned by us
    with no group/other permissions.  A pre-created ``/tmp/gputui-<uid>`` owned by
    someone else could otherwise collect our sockets or plant fake ones."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise SocketDirError(f"cannot stat socket directory {path}: {exc.strerror}") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise SocketDirError(f"socket directory {path} is not a directory")
    if st.st_uid != os.getuid():
        raise SocketDirError(f"socket directory {path} is owned by uid {st.st_uid}, not us")
    if st.st_mode & 0o077:
        raise SocketDirError(
            f"socket directory {path} has mode {stat.S_IMODE(st.st_mode):o}; "
            "it must be 700 (chmod 700 it or remove it)"
        )


def ensure_private_dir(path: str) -> str:
    """Create ``path`` with mode 0700 if missing, then check it."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        if exc.errno != errno.EEXIST:
            raise SocketDirError(f"cannot create socket directory {path}: {exc.strerror}") from None
    check_private_dir(path)
    return path


def socket_path(pid: int, create_dir: bool = False) -> str:
    """The path a hook in process ``pid`` listens on (the first candidate dir)."""
    directory = socket_dirs()[0]
    if create_dir:
        ensure_private_dir(directory)
    return os.path.join(directory, f"{pid}{SOCKET_SUFFIX}")


def _pid_of(name: str) -> int | None:
    if not name.endswith(SOCKET_SUFFIX):
        return None
    stem = name[: -len(SOCKET_SUFFIX)]
    if not stem.isdigit():
        return None
    return int(stem)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, another user's
    return True


def hooked_pids() -> set[int]:
    """Pids that have a socket: a listdir per directory, no connects, no cleanup.

    The monitor calls this every refresh to mark hooked processes, so it must stay
    cheap; :func:`list_sockets` does the slower stale-socket cleanup."""
    pids: set[int] = set()
    for directory in socket_dirs():
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in names:
            pid = _pid_of(name)
            if pid is not None:
                pids.add(pid)
    return pids


def list_sockets() -> dict[int, str]:
    """pid -> socket path for every hooked job of ours whose process is alive.

    Sockets left by jobs that died without running their exit handlers (SIGKILL,
    OOM killer) are removed here.  Directories that fail the privacy check are
    skipped: their sockets are not trusted."""
    found: dict[int, str] = {}
    for directory in socket_dirs():
        try:
            check_private_dir(directory)
            names = os.listdir(directory)
        except (SocketDirError, OSError):
            continue
        for name in names:
            pid = _pid_of(name)
            if pid is None:
                continue
            path = os.path.join(directory, name)
            if not pid_alive(pid):
                try:
                    os.unlink(path)
                except OSError:
                    pass
                continue
            found.setdefault(pid, path)
    return found


def find_socket(pid: int) -> str | None:
    """The socket of ``pid`` in any candidate directory, or None."""
    for directory in socket_dirs():
        path = os.path.join(directory, f"{pid}{SOCKET_SUFFIX}")
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISSOCK(st.st_mode):
            return path
    return None


_PEERCRED = struct.Struct("3i")


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end of a connected AF_UNIX socket, or
    None where the platform has no SO_PEERCRED (then only the 0700 dir protects)."""
    import socket  # here: the monitor reads hooked_pids() without loading it

    opt = getattr(socket, "SO_PEERCRED", None)
    if opt is None:
        return None
    try:
        data = sock.getsockopt(socket.SOL_SOCKET, opt, _PEERCRED.size)
    except OSError:
        return None
    _pid, uid, _gid = _PEERCRED.unpack(data)
    return int(uid)
