"""The CPU cores a hooked job may use: its affinity, capped by its cgroup's quota."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputui.hook import _core


def quota_files(tmp_path: Path, v2: str | None = None, v1: tuple[str, str] | None = None) -> None:
    if v2 is not None:
        (tmp_path / "cpu.max").write_text(v2 + "\n")
    if v1 is not None:
        (tmp_path / "quota").write_text(v1[0] + "\n")
        (tmp_path / "period").write_text(v1[1] + "\n")


@pytest.fixture
def cgroup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(_core, "_CPU_MAX", str(tmp_path / "cpu.max"))
    monkeypatch.setattr(_core, "_CFS", (str(tmp_path / "quota"), str(tmp_path / "period")))
    monkeypatch.setattr(_core.os, "sched_getaffinity", lambda _pid: set(range(16)))
    return tmp_path


@pytest.mark.parametrize(
    ("v2", "v1", "want"),
    [
        (None, None, 16),  # no cgroup file: the affinity
        ("max 100000", None, 16),  # v2 without a quota
        ("400000 100000", None, 4),  # a container of 4 cores
        ("150000 100000", None, 2),  # 1.5 cores: 2 can run at once
        ("6400000 100000", None, 16),  # a quota above the affinity: the affinity
        (None, ("-1", "100000"), 16),  # v1 without a quota
        (None, ("200000", "100000"), 2),
        ("garbage", None, 16),
    ],
)
def test_the_cores_are_the_affinity_capped_by_the_quota(
    cgroup: Path, v2: str | None, v1: tuple[str, str] | None, want: int
) -> None:
    quota_files(cgroup, v2, v1)
    assert _core._cpus() == want


def test_the_hello_carries_them_and_an_older_hello_reads_as_unknown(cgroup: Path) -> None:
    from gputui.protocol.schema import Hello

    quota_files(cgroup, "800000 100000")
    hello = Hello(pid=1, cpus=_core._cpus())
    assert Hello.from_wire(hello.to_wire()).cpus == 8
    older = hello.to_wire()
    del older["cpus"]
    assert Hello.from_wire(older).cpus is None
