"""The PromQL join of docs/exporter.md on a real scrape: the exporter on two
H100s during a DDP job (tests/data/h100x2-nccl/metrics.txt), scraped by a real
Prometheus, gives each rank its GPU by UUID."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers.promutil import prometheus, prometheus_binary, wait_for_series

SCRAPE = Path(__file__).resolve().parents[1] / "data" / "h100x2-nccl" / "metrics.txt"

pytestmark = pytest.mark.skipif(prometheus_binary() is None, reason="prometheus not installed")


@contextmanager
def serving(body: bytes) -> Iterator[str]:
    """``body`` as /metrics on a loopback port."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_each_rank_joins_its_gpu_by_uuid(tmp_path: Path) -> None:
    with serving(SCRAPE.read_bytes()) as target, prometheus([target], tmp_path) as url:
        expr = (
            "gputui_gpu_utilization_ratio"
            " * on(hostname, UUID) group_left(job_id, rank) gputui_train_info"
        )
        joined = wait_for_series(url, expr, 2)
        by_rank = {s["metric"]["rank"]: s for s in joined}
        assert sorted(by_rank) == ["0", "1"]
        for rank, gpu in (("0", "0"), ("1", "1")):
            metric = by_rank[rank]["metric"]
            assert metric["gpu"] == gpu  # the GPU series' own index, by UUID
            assert metric["UUID"].startswith("GPU-")
        assert by_rank["0"]["metric"]["UUID"] != by_rank["1"]["metric"]["UUID"]
        assert float(by_rank["0"]["value"][1]) == 1.0
        assert float(by_rank["1"]["value"][1]) == pytest.approx(0.83)
