"""Findings for the live monitor: one snapshot (plus a little history) in, the
device rules of the analyzer's registry run on each GPU, findings out."""

from __future__ import annotations

from collections.abc import Sequence

from gputui.analysis.engine import analyze_devices
from gputui.analysis.finding import FINDINGS_WINDOW, Finding
from gputui.analysis.rules.device import device_evidence
from gputui.snapshot.model import Snapshot

__all__ = ["Finding", "findings"]


def findings(snapshot: Snapshot, history: Sequence[Snapshot] | None = None) -> list[Finding]:
    """All findings for ``snapshot``, most severe first, then by GPU.

    ``history`` is the recent snapshots, oldest first (the current one may or may
    not be included); the device rules read means over its last
    :data:`FINDINGS_WINDOW`, so one idle sample between two busy ones does not
    raise a finding.
    """
    recent = list(history[-FINDINGS_WINDOW:]) if history else []
    if not recent or recent[-1] is not snapshot:
        recent.append(snapshot)
    return analyze_devices(device_evidence(snapshot, recent))
