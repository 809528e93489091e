"""A process's container and pod as text: the short label of a table's column,
the facts of a detail view, and the words a filter matches.

Container and pod names are chosen by other users: every string from a
snapshot is cleaned here (``fmt.clean``) before it reaches a view.
"""

from __future__ import annotations

from typing import Any

from gputui import fmt
from gputui.host.pid_namespace import UNMAPPED_NOTE
from gputui.snapshot.codec import from_json_or_none
from gputui.snapshot.model import ContainerInfo, ProcessSnapshot

#: the longest name shown (Kubernetes allows 253 characters)
MAX_NAME = 128
#: the widest a table shows a container or pod (elided in the middle beyond)
LABEL_WIDTH = 24
#: a container id is shown by its first 12 hex digits, as docker ps does
SHORT_ID = 12
HOST_PID = "host pid"


def raw_label(info: ContainerInfo) -> str:
    """The pod (``namespace/name``) or the container's name, else the runtime
    and a short id: raw text, for sorting and filtering."""
    pod = info.pod
    if pod is not None:
        name = pod.name or f"pod {pod.uid[:8]}"
        return f"{pod.namespace}/{name}" if pod.namespace else name
    if info.name:
        return info.name
    if info.id:
        return f"{info.runtime} {info.id[:SHORT_ID]}"
    return info.runtime


def label_of(doc: dict[str, Any] | None) -> str:
    """The column's text for a container in its JSON form (``gputui ls``)."""
    info = from_json_or_none(ContainerInfo, doc)
    return "" if info is None else fmt.clean(raw_label(info), MAX_NAME)


def label(proc: ProcessSnapshot) -> str:
    """The column's text: cleaned; "host pid" for a pid of another PID
    namespace; "" on the host."""
    if proc.container is not None:
        return fmt.clean(raw_label(proc.container), MAX_NAME)
    if proc.pid_is_host:
        return HOST_PID
    return ""


def sort_key(proc: ProcessSnapshot) -> str | None:
    """What the column sorts by: None (last) for a process in no container."""
    if proc.container is not None:
        return raw_label(proc.container).lower()
    return None


def search_text(proc: ProcessSnapshot) -> str:
    """The words a filter matches: names, ids, runtime, pod UID, namespace."""
    info = proc.container
    if info is None:
        return HOST_PID if proc.pid_is_host else ""
    pod = info.pod
    words = [info.runtime, info.id, info.name]
    if pod is not None:
        words += [pod.name, pod.namespace, pod.uid]
    return " ".join(w for w in words if w)


def facts(proc: ProcessSnapshot) -> list[tuple[str, str]]:
    """(name, value) lines of a detail view, cleaned; [] on the host."""
    out: list[tuple[str, str]] = []
    if proc.host_pid is not None and not proc.pid_is_host:
        out.append(("host pid", str(proc.host_pid)))
    if proc.pid_is_host:
        out.append(("pid", f"{proc.pid} ({UNMAPPED_NOTE})"))
    info = proc.container
    if info is None:
        return out
    if info.id is not None:
        name = fmt.clean(info.name, MAX_NAME) if info.name else "(name not known)"
        out.append(("container", f"{name}  {info.runtime} {fmt.clean(info.id, 128)}"))
    else:
        out.append(("container", f"none ({info.runtime}'s monitor, in the pod)"))
    pod = info.pod
    if pod is not None:
        name = fmt.clean(pod.name, MAX_NAME) if pod.name else "(name not known)"
        out.append(("pod", f"{name}  uid {fmt.clean(pod.uid, 64)}"))
        namespace = fmt.clean(pod.namespace, MAX_NAME) if pod.namespace else "(not known)"
        out.append(("namespace", namespace))
        out.append(("QoS class", fmt.clean(pod.qos, 16) if pod.qos else fmt.NA))
    if info.note:
        out.append(("names", fmt.clean(info.note, 400)))
    return out
