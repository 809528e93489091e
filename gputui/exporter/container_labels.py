"""The container labels of per-process and training series.

dcgm-exporter's names, so that dashboards and joins built on it carry over:
``pod``, ``namespace`` and ``container`` (the Kubernetes container's name, or
the runtime's name for a container outside Kubernetes).  A process in no
container gets none of them: Prometheus reads a missing label as empty, so
its series match ``pod=""`` as before.  The values are what the runtime and
the pod said (escaped by the exposition, never interpreted).
"""

from __future__ import annotations

from gputui.snapshot.model import ContainerInfo, ProcessSnapshot

LABEL_NAMES = ("pod", "namespace", "container")


def host_pid_labels(proc: ProcessSnapshot) -> tuple[tuple[str, str], ...]:
    """gputui in a container: ``host_pid``, the host's pid NVML reported, where
    it differs from ``pid`` or is all gputui knows (no two series share a set)."""
    if proc.host_pid is None:
        return ()
    return (("host_pid", str(proc.host_pid)),)


def container_labels(info: ContainerInfo | None) -> tuple[tuple[str, str], ...]:
    if info is None:
        return ()
    pod = info.pod
    return (
        ("pod", (pod.name if pod else None) or ""),
        ("namespace", (pod.namespace if pod else None) or ""),
        ("container", info.name or ""),
    )
