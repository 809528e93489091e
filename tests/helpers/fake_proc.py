"""Fake /proc trees: the files the PID-namespace mapping and the container
attribution read (``self``, ``ns/pid``, ``status``'s NSpid, ``stat``'s start
time, ``cgroup``, and files under ``root/``)."""

from __future__ import annotations

import os
from pathlib import Path

from gputui.host.pid_namespace import INIT_PID_NS

OTHER_PID_NS = "pid:[4026532999]"


class FakeProc:
    """One /proc directory, as seen from one PID namespace."""

    def __init__(self, root: Path, self_pid: int, ns: str = INIT_PID_NS) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.add(self_pid, ns=ns)
        os.symlink(str(self_pid), root / "self")

    @property
    def path(self) -> str:
        return str(self.root)

    def add(
        self,
        pid: int,
        nspid: tuple[int, ...] | None = None,
        start_ticks: int = 1000,
        ns: str | None = None,
        cgroup: str | None = None,
        files: dict[str, str] | None = None,
        comm: str = "python (x) y",
    ) -> Path:
        """A process: ``nspid`` is its NSpid line (its pid here first)."""
        d = self.root / str(pid)
        d.mkdir(parents=True, exist_ok=True)
        chain = nspid or (pid,)
        (d / "status").write_text(
            f"Name:\tpython\nPid:\t{pid}\nNSpid:\t" + "\t".join(map(str, chain)) + "\n"
        )
        # fields 3..: state ppid pgrp session tty tpgid flags minflt cminflt majflt
        # cmajflt utime stime cutime cstime priority nice threads itrealvalue starttime
        rest = ["S", "1"] + ["0"] * 17 + [str(start_ticks), "0"]
        (d / "stat").write_text(f"{pid} ({comm}) " + " ".join(rest) + "\n")
        if ns is not None:
            (d / "ns").mkdir(exist_ok=True)
            os.symlink(ns, d / "ns" / "pid")
        if cgroup is not None:
            (d / "cgroup").write_text(cgroup)
        for name, text in (files or {}).items():
            path = d / "root" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        return d
