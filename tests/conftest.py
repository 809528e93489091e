from __future__ import annotations

import functools
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

# Test helpers (hookutil) and the jobs they start live in tests/jobs.

# Property tests are judged by what they find, not by how fast a loaded machine
# runs or generates an example: no per-example deadline, no "too slow" check.
# (Tests that give their own settings() start from this profile.)
settings.register_profile("gputui", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("gputui")


@functools.cache
def _gpu_reason() -> str | None:
    """None when an NVIDIA GPU is usable here, else why not."""
    try:
        import pynvml
    except ImportError:
        return "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # any NVML failure means no GPU tests
        return f"no NVIDIA driver: {exc}"
    try:
        if pynvml.nvmlDeviceGetCount() < 1:
            return "no NVIDIA GPU"
    finally:
        pynvml.nvmlShutdown()
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = None
    for item in items:
        if "gpu" in item.keywords:
            reason = reason or _gpu_reason()
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"gpu test: {reason}"))


@pytest.fixture
def hook(monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]) -> Iterator[Any]:
    """gputui's hook installed in this test process, serving a private socket dir."""
    import gputui.hook
    from gputui.protocol import paths

    sock_dir = tempfile.mkdtemp(prefix="gth-", dir="/tmp")
    os.rmdir(sock_dir)  # the hook creates it, with the permissions it checks
    monkeypatch.setenv(paths.ENV_SOCKET_DIR, sock_dir)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    installed = gputui.hook.install()
    assert installed is not None and installed.server is not None
    yield installed
    gputui.hook.uninstall()
    if os.path.isdir(sock_dir):
        os.rmdir(sock_dir)


@pytest.fixture(autouse=True)
def _drawing_mode_reset() -> Iterator[None]:
    """``--ascii`` is process-wide (the terminal is): an app started with it in
    one test must not change how the next test draws."""
    yield
    from gputui import fmt

    fmt.use_ascii(False)
    if "textual.scrollbar" not in sys.modules:
        return  # no app drew in this process (a GPU host may have no textual at all)
    from textual.scrollbar import ScrollBar, ScrollBarRender

    ScrollBar.renderer = ScrollBarRender
