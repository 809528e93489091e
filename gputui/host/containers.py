"""Which container and Kubernetes pod a process runs in, from its ``/proc/PID/cgroup``.

Pure and standard library only: :func:`parse_cgroup` reads the file's text
and returns a :class:`~gputui.snapshot.model.ContainerInfo` (runtime, container
id, and its pod's UID and QoS class) or None for a process that is not in a container.

The layouts it knows, cgroup v1 (one line per hierarchy) and v2 (``0::PATH``):

- docker: ``/docker/<id>`` (cgroupfs driver), ``docker-<id>.scope`` (systemd);
- containerd's CRI plugin: ``cri-containerd-<id>.scope``, and on v1 with the
  systemd driver the unexpanded ``<pod slice>:cri-containerd:<id>``;
- CRI-O: ``crio-<id>.scope`` (``crio-conmon-<id>.scope`` is its monitor, in the
  pod but in no container), ``crio-<id>`` with cgroupfs;
- podman: ``libpod-<id>.scope`` (its payload may sit in a ``container`` child),
  ``libpod-conmon-<id>.scope`` is its monitor;
- Kubernetes: ``kubepods/<qos>/pod<uid>/<id>`` (cgroupfs) and
  ``kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid_with_underscores>.slice/...``
  (systemd, also under a ``kubelet.slice`` root); a guaranteed pod has no QoS
  level (``kubepods-pod<uid>.slice``, ``kubepods/pod<uid>``).

Nested containers (a pod inside a kind or minikube node container): the
innermost container counts.  Lines that name no container (a daemon's own
``docker.service``, a login session) give None.  Examples from real machines,
with their sources, are in ``tests/data/cgroups/``.
"""

from __future__ import annotations

import re

from gputui.host.cgroup import best_line
from gputui.snapshot.model import ContainerInfo, PodInfo

#: systemd scope prefixes (and the v1 "slice:prefix:id" middle word) -> runtime
SCOPE_RUNTIMES = {
    "docker": "docker",
    "cri-containerd": "containerd",
    "crio": "cri-o",
    "libpod": "podman",
}
QOS_CLASSES = ("besteffort", "burstable")
#: the runtime of a pod's container when the cgroup path does not say
KUBERNETES = "kubernetes"

_ID = r"[0-9a-f]{64}"
_SCOPE = re.compile(r"(docker|cri-containerd|crio|libpod)-(" + _ID + r")(?:\.scope)?")
_CONMON = re.compile(r"(crio|libpod)-conmon-" + _ID + r"(?:\.scope)?")
_FULL_ID = re.compile(_ID)
#: docker's cgroupfs layout has carried shorter ids on some hosts
_DOCKER_ID = re.compile(r"[0-9a-f]{12,64}")
_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32}"
#: "pod<uid>" (cgroupfs) or "...kubepods[-<qos>]-pod<uid>.slice" (systemd)
_POD = re.compile(r"(?:(.*)-)?pod(" + _UID + r")(?:\.slice)?", re.IGNORECASE)


def parse_cgroup(text: str) -> ContainerInfo | None:
    """The container and pod named by a ``/proc/PID/cgroup`` file's text.

    Every line is read (v1 hierarchies can disagree: one may still name a
    daemon's service); the line that says most wins: a container id, then a
    pod, the first such line on a tie."""
    return best_line(text, parse_path, _rank)


def _rank(found: ContainerInfo) -> int:
    return 2 * (found.id is not None) + (found.pod is not None) + 1


def parse_path(path: str) -> ContainerInfo | None:
    """The container and pod named by one cgroup path (None: neither)."""
    runtime: str | None = None
    cid: str | None = None
    pod_uid: str | None = None
    qos: str | None = None
    in_kubepods = False
    segments = [s for s in path.split("/") if s]
    for i, segment in enumerate(segments):
        for part, is_last in _parts(segment):
            lower = part.lower()
            if "kubepods" in lower:
                in_kubepods = True
            if lower in QOS_CLASSES:
                qos = lower
                continue
            scope = _SCOPE.fullmatch(part)
            if scope:
                runtime, cid = SCOPE_RUNTIMES[scope.group(1)], scope.group(2)
                continue
            conmon = _CONMON.fullmatch(part)
            if conmon:
                # the runtime's monitor: inside the pod, in no container
                runtime, cid = SCOPE_RUNTIMES[conmon.group(1)], None
                continue
            if not is_last:
                # the middle word of v1's "slice:prefix:id"
                continue
            pod = _POD.fullmatch(part)
            if pod and (in_kubepods or pod.group(1)):
                prefix = (pod.group(1) or "").lower()
                if prefix and "kubepods" not in prefix and not _has_qos(prefix):
                    continue
                in_kubepods = True
                pod_uid = pod.group(2).lower().replace("_", "-")
                qos = _qos_in(prefix) or qos
                runtime = cid = None  # a container below the pod is its own
                continue
            parent = segments[i - 1] if i else ""
            if parent == "docker" and _DOCKER_ID.fullmatch(part):
                runtime, cid = "docker", part
            elif pod_uid is not None and _FULL_ID.fullmatch(part):
                runtime, cid = KUBERNETES, part
    if pod_uid is None:
        if cid is None or runtime is None:
            return None
        return ContainerInfo(runtime, cid)
    return ContainerInfo(runtime or KUBERNETES, cid, pod=PodInfo(pod_uid, qos=qos or "guaranteed"))


def _parts(segment: str) -> list[tuple[str, bool]]:
    """A path segment's words: v1 with the systemd driver may print a unit
    unexpanded, "kubepods-besteffort-pod<uid>.slice:cri-containerd:<id>"."""
    words = segment.split(":")
    if len(words) != 3:
        return [(segment, True)]
    slice_, prefix, ident = words
    return [(slice_, True), (f"{prefix}-{ident}", False)]


def _has_qos(text: str) -> bool:
    return any(q in text for q in QOS_CLASSES)


def _qos_in(text: str) -> str | None:
    for qos in QOS_CLASSES:
        if qos in text:
            return qos
    return None
