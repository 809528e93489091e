"""Real ``sshd`` servers on loopback, for ``gputui cluster --ssh`` tests and bench.

A lab is a private temporary directory with a host key, a user key, one sshd
per "kind of node" (each its own port and its own remote PATH: a ``gputui``
wrapper that serves the demo recording, a fake ``nvidia-smi``, a ``gputui``
that prints garbage) and an ssh client config (``ssh -F``) that names every
node as an alias of one of those ports.  Needs Debian's ``openssh-server``
(``/usr/sbin/sshd``) and ``ssh-keygen``; :func:`missing` says what is absent.
The bench imports this module without the tests package's conftest.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

SSHD = "/usr/sbin/sshd"
#: how long a started sshd has to listen
LISTEN_S = 60.0
REPO = Path(__file__).resolve().parents[2]


def missing() -> str | None:
    """Why the lab cannot run here, or None."""
    if not os.path.exists(SSHD):
        return f"{SSHD} is not installed (apt-get install openssh-server)"
    for tool in ("ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install openssh-client)"
    if os.geteuid() == 0 and not os.path.isdir("/run/sshd"):
        # sshd's privilege separation directory, made by the package's service
        try:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        except OSError as exc:
            return f"sshd needs /run/sshd: {exc}"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _script(path: Path, text: str) -> Path:
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)
    return path


class SshLab:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.chmod(0o700)
        self.user = os.environ.get("USER") or _user()
        self.host_key = root / "host_ed25519"
        self.user_key = root / "id_ed25519"
        for key in (self.host_key, self.user_key):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                check=True,
                stdin=subprocess.DEVNULL,
            )
        (root / "authorized_keys").write_text((root / "id_ed25519.pub").read_text())
        (root / "authorized_keys").chmod(0o600)
        self.known_hosts = root / "known_hosts"
        self.known_hosts.write_text("")
        self.servers: dict[str, tuple[int, subprocess.Popen[bytes]]] = {}
        self.aliases: dict[str, int] = {}
        self.pid_dir = root / "pids"
        self.pid_dir.mkdir()

    # -- what a node's PATH holds ---------------------------------------------------------
    def bin_dir(self, name: str) -> Path:
        path = self.root / f"bin-{name}"
        path.mkdir(exist_ok=True)
        return path

    def gputui_demo(self, name: str, demo: bool = True) -> Path:
        """A PATH directory whose ``gputui`` runs this tree's gputui on the demo
        recording (``demo=False``: on this machine), writing its pid where
        :meth:`serve_pids` finds it."""
        d = self.bin_dir(name)
        _script(
            d / "gputui",
            f'echo $$ > "{self.pid_dir}/{name}-$$"\n'
            f'PYTHONPATH="{REPO}" exec "{sys.executable}" -m gputui "$@"'
            + (" --demo\n" if demo else "\n"),
        )
        return d

    def gputui_garbage(self, name: str) -> Path:
        d = self.bin_dir(name)
        _script(d / "gputui", "while :; do echo 'Welcome to node 7!'; sleep 1; done\n")
        return d

    def fake_smi(self, name: str) -> Path:
        d = self.bin_dir(name)
        rows = (
            "0, GPU-fake-0, NVIDIA Fake GPU, 37, 5, 1024, 81559, 45, 123.45, 700.00\n"
            "1, GPU-fake-1, NVIDIA Fake GPU, [N/A], 0, 0, 81559, 31, [Not Supported], 700.00\n"
        )
        _script(d / "nvidia-smi", f"while :; do printf '{rows}'; sleep 1; done\n")
        return d

    def serve_pids(self, name: str) -> list[int]:
        return [int(p.name.rsplit("-", 1)[1]) for p in self.pid_dir.glob(f"{name}-*")]

    # -- servers and aliases --------------------------------------------------------------
    def start_sshd(self, name: str, path_dirs: list[Path]) -> int:
        port = free_port()
        config = self.root / f"sshd-{name}.conf"
        path = ":".join([*(str(p) for p in path_dirs), "/usr/bin", "/bin"])
        config.write_text(
            f"Port {port}\nListenAddress 127.0.0.1\nHostKey {self.host_key}\n"
            f"PidFile {self.root}/sshd-{name}.pid\n"
            f"AuthorizedKeysFile {self.root}/authorized_keys\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "PubkeyAuthentication yes\nUsePAM no\nStrictModes no\n"
            "PermitRootLogin prohibit-password\nPrintMotd no\nLogLevel ERROR\n"
            f"SetEnv PATH={path}\nMaxStartups 100\n"
        )
        proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / f"sshd-{name}.log", "ab"),
        )
        self.servers[name] = (port, proc)
        pub = self.host_key.with_suffix(".pub").read_text().split()
        with self.known_hosts.open("a") as fh:
            fh.write(f"[127.0.0.1]:{port} {pub[0]} {pub[1]}\n")
        deadline = time.monotonic() + LISTEN_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                log = (self.root / f"sshd-{name}.log").read_text()
                raise RuntimeError(f"sshd {name} exited: {log[-500:]}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return port
            time.sleep(0.05)
        raise RuntimeError(f"sshd {name} did not listen on {port}")

    def alias(self, alias: str, server: str) -> None:
        self.aliases[alias] = self.servers[server][0]

    def client_config(self) -> Path:
        path = self.root / "ssh_config"
        blocks = [
            f"Host {alias}\n  HostName 127.0.0.1\n  Port {port}\n"
            for alias, port in sorted(self.aliases.items())
        ]
        blocks.append(
            f"Host *\n  User {self.user}\n  IdentityFile {self.user_key}\n"
            f"  IdentitiesOnly yes\n  UserKnownHostsFile {self.known_hosts}\n"
            "  StrictHostKeyChecking yes\n  LogLevel ERROR\n"
        )
        path.write_text("\n".join(blocks))
        return path

    def kill_server(self, name: str) -> None:
        """The node dies: its sshd stops listening and its gputui is killed."""
        _, proc = self.servers[name]
        proc.terminate()
        proc.wait(30)
        for pid in self.serve_pids(name):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def close(self) -> None:
        for _, proc in self.servers.values():
            if proc.poll() is None:
                proc.terminate()
        for _, proc in self.servers.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        for name in list(self.servers):
            for pid in self.serve_pids(name):
                try:
                    os.kill(pid, signal.SIGTERM)
                except OSError:
                    pass


def _user() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name
