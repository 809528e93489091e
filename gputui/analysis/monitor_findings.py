"""Findings for the live monitor: one snapshot (plus a little history) in, the
device rules of the analyzer's registry run on each GPU, findings out."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gputui.analysis.finding import FINDINGS_WINDOW, Finding
from gputui.analysis.registry import REGISTRY, run_rule
from gputui.analysis.rules.device import DeviceEvidence, device_evidence
from gputui.analysis.severity import ORDER
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


def analyze_devices(evidence: Iterable[DeviceEvidence]) -> list[Finding]:
    """Every device rule over each GPU: most severe first, then by GPU (the
    monitor has no step time to rank costs by).  Only the device rules load
    here: the monitor pays for no job rule, protocol or roofline."""
    out: list[Finding] = []
    device_rules = [rule_id for rule_id, r in REGISTRY.items() if r.scope == "device"]
    for ev in evidence:
        samples = 0 if ev.window is None else ev.window.samples
        for rule_id in device_rules:
            need = REGISTRY[rule_id].minimum
            if not need.lacking(steps=0, gpu_samples=samples, capture=False):
                out.extend(run_rule(rule_id, ev))
    out.sort(key=lambda f: (ORDER[f.severity], -1 if f.gpu_index is None else f.gpu_index))
    return out
