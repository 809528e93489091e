"""Real processes in cgroups made for a test: the cgroup mounts, a writable
hierarchy of a version (or why there is none), and a sleeping child moved into
a cgroup made for it, all removed after (root only)."""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path


def cgroup_mounts() -> list[tuple[str, Path, str]]:
    """(fstype, mount point, super options) of each cgroup mount."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        fields, _, tail = line.partition(" - ")
        fstype, _source, options = ([*tail.split(" "), "", ""])[:3]
        if fstype in ("cgroup", "cgroup2"):
            out.append((fstype, Path(fields.split()[4]), options))
    return out


def writable(fstype: str) -> tuple[Path | None, str]:
    """A writable hierarchy of that type (v1: freezer, else any), or why not."""
    if os.geteuid() != 0:
        return None, "needs root (creates a cgroup and moves a process into it)"
    mounts = [(m, o) for t, m, o in cgroup_mounts() if t == fstype]
    if fstype == "cgroup":
        mounts.sort(key=lambda mo: "freezer" not in mo[1].split(","))
    if not mounts:
        return None, f"no {fstype} hierarchy mounted"
    reasons = []
    for mount, _options in mounts:
        probe = mount / f"gputui-probe-{secrets.token_hex(4)}"
        try:
            probe.mkdir()
            probe.rmdir()
        except OSError as exc:
            reasons.append(f"{mount}: {exc}")
            continue
        return mount, ""
    return None, "no writable " + fstype + " hierarchy (" + "; ".join(reasons) + ")"


@contextlib.contextmanager
def process_in(mount: Path, cgroup: Path, env: dict[str, str] | None = None) -> Iterator[int]:
    """A sleeping child with ``env`` moved into ``cgroup`` (made here, with its
    parents, under ``mount``); all removed after."""
    made: list[Path] = []
    for parent in reversed(cgroup.relative_to(mount).parents):
        if parent != Path("."):
            path = mount / parent
            if not path.exists():
                path.mkdir()
                made.append(path)
    cgroup.mkdir()
    made.append(cgroup)
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], env={**os.environ, **(env or {})}
    )
    try:
        (cgroup / "cgroup.procs").write_text(str(child.pid))
        yield child.pid
    finally:
        child.kill()
        child.wait(30)
        for path in reversed(made):
            with contextlib.suppress(OSError):
                path.rmdir()
    assert not any(p.exists() for p in made)
