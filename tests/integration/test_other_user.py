"""A job of another user: gputui refuses it, clearly, as root and as a third user.

Runs only as root with ``useradd`` (CI runs as root): two throw-away users are
created, a hooked job runs as the first, and ``gputui attach`` / ``gputui ls``
are tried as root and as the second.  The job and the third user's commands are
forked from this process and drop their privileges there (``setuid``), so they
need no interpreter the other users can execute.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers import hookutil
from tests.helpers.deadlines import RUN_S, START_S, WAIT_S


def _useradd() -> str | None:
    if os.geteuid() != 0:
        return "needs root (to create users)"
    if shutil.which("useradd") is None or shutil.which("userdel") is None:
        return "useradd/userdel are not installed"
    return None


@contextlib.contextmanager
def _user() -> Iterator[pwd.struct_passwd]:
    name = f"gt{uuid.uuid4().hex[:10]}"
    made = subprocess.run(
        ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode != 0:
        pytest.skip(f"useradd failed: {made.stderr.strip()}")
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], capture_output=True, check=False)


@pytest.fixture(scope="module")
def users() -> Iterator[tuple[pwd.struct_passwd, pwd.struct_passwd]]:
    reason = _useradd()
    if reason:
        pytest.skip(reason)
    # The children import nothing new after they drop root: this interpreter's
    # own files may be out of the other users' reach (under /root, say).
    from gputui import cli
    from gputui.client import hook as hook_client  # noqa: F401
    from gputui.hook import _core  # noqa: F401

    for command in ("attach", "ls"):
        cli.build_subcommand_parser(command)
    with _user() as owner, _user() as third:
        yield owner, third


def _become(user: pwd.struct_passwd) -> None:
    os.setgroups([])
    os.setgid(user.pw_gid)
    os.setuid(user.pw_uid)
    for key in ("GPUTUI_SOCKET_DIR", "XDG_RUNTIME_DIR", "XDG_CACHE_HOME"):
        os.environ.pop(key, None)
    os.environ["HOME"] = "/tmp"


def _fork_as(user: pwd.struct_passwd, body: Callable[[], int], out: Path) -> int:
    """Run ``body`` in a child that is ``user``; its stdout+stderr go to ``out``."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 70
        try:
            fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), line_buffering=True)
            sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", closefd=False), line_buffering=True)
            _become(user)
            code = body()
        except BaseException as exc:  # anything: report and leave
            print(f"child failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
    return pid


def _wait(pid: int, timeout: float = RUN_S) -> int:
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise AssertionError("the child did not finish")
        time.sleep(0.02)


@pytest.fixture(scope="module")
def job(
    users: tuple[pwd.struct_passwd, pwd.struct_passwd], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[int, pwd.struct_passwd, Path]]:
    """A hooked job of the first user, stepping until told to stop."""
    owner, _third = users
    # Where the job can see the stop file: pytest's own tmp dirs are root's 0700.
    work = Path(tempfile.mkdtemp(prefix="gtu-", dir="/tmp"))
    work.chmod(0o755)
    stop = work / "stop"

    def train() -> int:
        import gputui.hook

        gputui.hook.install()
        # until the module's tests are done; the deadline only ends it if the
        # test process dies without stopping it
        deadline = time.monotonic() + 10 * START_S
        while not stop.exists() and time.monotonic() < deadline:
            gputui.hook.step()
            time.sleep(0.005)
        gputui.hook.uninstall()  # removes its socket
        return 0

    pid = _fork_as(owner, train, work / "job.log")
    sock_dir = Path(f"/tmp/gputui-{owner.pw_uid}")
    try:
        hookutil.wait_for(lambda: (sock_dir / f"{pid}.sock").exists(), WAIT_S, "the job's socket")
        yield pid, owner, sock_dir
    finally:
        stop.touch()
        _wait(pid)
        shutil.rmtree(sock_dir, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


def _gputui_as_root(*args: str, sock_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GPUTUI_SOCKET_DIR",)}
    env["PYTHONPATH"] = str(hookutil.REPO)
    if sock_dir is not None:
        env["GPUTUI_SOCKET_DIR"] = str(sock_dir)
    return subprocess.run(
        [sys.executable, "-m", "gputui", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_S,
        check=False,
    )


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


def test_root_is_refused_by_name(job: tuple[int, pwd.struct_passwd, Path]) -> None:
    pid, owner, _ = job
    out = _gputui_as_root("attach", str(pid), "--once")
    assert out.returncode == 2
    line = _one_line(out.stderr)
    assert f"belongs to user {owner.pw_name}" in line and "only attaches to your own" in line
    assert f"sudo -u {owner.pw_name} gputui attach {pid}" in line


def test_root_pointed_at_the_other_users_socket_is_refused(
    job: tuple[int, pwd.struct_passwd, Path], tmp_path: Path
) -> None:
    """Root can open any socket: the uid checks on both ends refuse it."""
    pid, owner, sock_dir = job
    out = _gputui_as_root("attach", str(pid), "--once", sock_dir=sock_dir)
    assert out.returncode == 2
    assert f"served by uid {owner.pw_uid}, not us" in _one_line(out.stderr)

    # ...and the hook counted the refusal on its side (asked by its owner)
    def refused() -> int:
        from gputui.client.hook import HookClient

        client = HookClient.connect(pid)
        print(client.hello.status.refused)
        client.close()
        return 0

    report = tmp_path / "refused.log"
    assert _wait(_fork_as(owner, refused, report)) == 0, report.read_text()
    assert int(report.read_text()) >= 1


def test_ls_as_root_does_not_list_it(job: tuple[int, pwd.struct_passwd, Path]) -> None:
    pid, _, sock_dir = job
    for where in (None, sock_dir):
        out = _gputui_as_root("ls", "--json", sock_dir=where)
        assert out.returncode == 0, out.stderr
        assert pid not in [j["pid"] for j in json.loads(out.stdout)]


def test_a_third_user_is_refused(
    users: tuple[pwd.struct_passwd, pwd.struct_passwd],
    job: tuple[int, pwd.struct_passwd, Path],
    tmp_path: Path,
) -> None:
    pid, owner, sock_dir = job
    _, third = users
    for point_at_socket in (False, True):

        def attach(point_at_socket: bool = point_at_socket) -> int:
            from gputui import cli

            if point_at_socket:
                os.environ["GPUTUI_SOCKET_DIR"] = str(sock_dir)
            return cli.main(["attach", str(pid), "--once"])

        log = tmp_path / f"attach-{point_at_socket}.log"
        code = _wait(_fork_as(third, attach, log))
        assert code == 2, log.read_text()
        assert f"belongs to user {owner.pw_name}" in _one_line(log.read_text())

    def ls() -> int:
        from gputui import cli

        os.environ["GPUTUI_SOCKET_DIR"] = str(sock_dir)
        return cli.main(["ls", "--json"])

    log = tmp_path / "ls.log"
    assert _wait(_fork_as(third, ls, log)) == 0, log.read_text()
    assert json.loads(log.read_text()) == []
