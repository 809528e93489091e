"""Errors that reach the user as one clear line and exit status 2."""

from __future__ import annotations


class GputuiError(Exception):
    """A problem the user can act on: printed as one line, exit status 2."""

    exit_code = 2


class NvmlUnavailable(GputuiError):
    """No NVIDIA driver, no libnvidia-ml, or NVML failed to initialise."""
