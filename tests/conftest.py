from __future__ import annotations

import functools

import pytest


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
