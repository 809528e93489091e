"""Fixtures of the tests that start hooked training jobs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers import hookutil


@pytest.fixture(scope="module")
def dirs() -> Iterator[tuple[str, str]]:
    """A private socket directory and cache directory for each test module."""
    with hookutil.isolated_dirs() as d:
        yield d


@pytest.fixture
def env(dirs: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A job's environment over those directories (and this process's socket
    directory set to them, for the clients the test itself makes)."""
    monkeypatch.setenv("GPUTUI_SOCKET_DIR", dirs[0])
    return hookutil.make_env(*dirs)
