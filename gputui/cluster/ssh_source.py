"""The cluster view's SSH source: a reader per node, and the snapshot of them all.

:meth:`SshClusterSource.fetch` never waits on a node: it takes each reader's
latest values (``gputui.cluster.ssh``) and builds the view's snapshot from
them (``gputui.cluster.ssh_view``), so the screen shows every node as it is
now, answering or not.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from gputui.cluster.ssh import HostReader, SshOptions
from gputui.cluster.ssh_view import build_snapshot
from gputui.cluster.view import ClusterSnapshot


class SshClusterSource:
    #: the screen shows each node's processes (Prometheus' source has none)
    has_processes = True
    selector = ""

    def __init__(self, hosts: Sequence[str], options: SshOptions) -> None:
        self.options = options
        self.readers = [HostReader(h, options) for h in dict.fromkeys(hosts)]
        for reader in self.readers:
            reader.start()

    @property
    def title(self) -> str:
        n = len(self.readers)
        return f"ssh: {n} node{'s' if n != 1 else ''}"

    def wait_settled(self, timeout_s: float) -> None:
        """Wait until every node answered or failed once, or ``timeout_s`` passed."""
        deadline = time.monotonic() + timeout_s
        for reader in self.readers:
            reader.settled.wait(max(0.0, deadline - time.monotonic()))

    def fetch(self, hosts: Sequence[str] | None = None) -> ClusterSnapshot:
        """Every node now (``hosts`` is the Prometheus source's: all are read here)."""
        start = time.perf_counter()
        views = [reader.view() for reader in self.readers]
        return build_snapshot(views, time.time(), time.perf_counter() - start)

    def close(self) -> None:
        for reader in self.readers:
            reader.close()
        deadline = time.monotonic() + 5.0
        for reader in self.readers:
            reader.join(max(0.0, deadline - time.monotonic()))
