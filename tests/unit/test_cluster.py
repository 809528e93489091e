"""The cluster view without a real Prometheus: the model (fallbacks, stragglers),
the HTTP client's errors, the text and JSON reports, and the Textual screen."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from gputui.cli import main
from gputui.cluster.client import PrometheusClient, PrometheusError
from gputui.cluster.source import gpu_queries, normalize_selector
from gputui.cluster.view import (
    ClusterSnapshot,
    Rank,
    build_gpus,
    build_jobs,
    build_nodes,
    compute_times,
    pick_gpu_values,
)
from gputui.reports.cluster import print_text, to_json
from tests.helpers.promutil import free_port
from tests.helpers.synthetic import wait_for

HOSTILE = "evil\x1b[2Jhost\nname"


def gputui_labels(host: str, gpu: str) -> dict[str, str]:
    return {"hostname": host, "gpu": gpu, "UUID": f"GPU-{host}-{gpu}", "modelName": "NVIDIA H100"}


def dcgm_labels(host: str, gpu: str) -> dict[str, str]:
    return {"Hostname": host, "gpu": gpu, "UUID": f"GPU-{host}-{gpu}", "modelName": "NVIDIA A100"}


def test_gputui_series_win_over_dcgm_and_dcgm_fills_in() -> None:
    util = pick_gpu_values(
        [
            (dcgm_labels("a", "0"), 0.10),  # node a runs both exporters
            (gputui_labels("a", "0"), 0.90),
            (dcgm_labels("b", "0"), 0.50),  # node b only dcgm-exporter
        ]
    )
    gpus = build_gpus({"util_ratio": util})
    assert [(g.hostname, g.source, g.util_ratio) for g in gpus] == [
        ("a", "gputui", 0.90),
        ("b", "dcgm", 0.50),
    ]
    nodes = build_nodes(
        gpus,
        {"10.0.0.1:9445": "a", "10.0.0.2:9400": "b", "10.0.0.3:9445": "c"},
        {"10.0.0.3:9445": False},
    )
    assert [(n.hostname, n.up, len(n.gpus)) for n in nodes] == [
        ("a", True, 1),
        ("b", True, 1),
        ("c", False, 0),
    ]


def test_dcgm_queries_convert_units() -> None:
    q = gpu_queries('cluster="x"')
    assert 'DCGM_FI_DEV_GPU_UTIL{cluster="x"} / 100' in q["util_ratio"]
    assert "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE" in q["tensor_active_ratio"]
    assert "DCGM_FI_DEV_FB_USED" in q["mem_used_bytes"] and "1048576" in q["mem_used_bytes"]
    assert normalize_selector('{cluster="x"}') == 'cluster="x"'
    with pytest.raises(PrometheusError):
        normalize_selector("{a}{b}")


def rank(r: int, step: float, phases: dict[str, float]) -> Rank:
    total = sum(phases.values())
    return Rank(
        "h",
        "j",
        r,
        r,
        2,
        str(100 + r),
        str(r),
        1 / step,
        step,
        phases,
        {p: v / total for p, v in phases.items()},
    )


def test_compute_times_see_through_the_all_reduce_wait() -> None:
    # rank 1 computes 10 ms longer in forward; rank 0 waits for it inside backward
    slow = rank(1, 0.050, {"data": 0.005, "forward": 0.020, "backward": 0.020, "optimizer": 0.005})
    fast = rank(0, 0.050, {"data": 0.005, "forward": 0.010, "backward": 0.030, "optimizer": 0.005})
    assert compute_times([fast, slow]) == pytest.approx([0.035, 0.045])
    # a data straggler is not a compute straggler
    data_slow = rank(
        1, 0.050, {"data": 0.025, "forward": 0.010, "backward": 0.010, "optimizer": 0.005}
    )
    waits = rank(0, 0.050, {"data": 0.005, "forward": 0.010, "backward": 0.030, "optimizer": 0.005})
    a, b = compute_times([waits, data_slow])
    assert a == pytest.approx(b)


def test_jobs_from_series_with_straggler() -> None:
    def lab(host: str, r: str, **more: str) -> dict[str, str]:
        return {"hostname": host, "job_id": "run-1", "rank": r, **more}

    info = [
        (lab("a", "0", world_size="2", local_rank="0"), 1.0),
        (lab("b", "1", world_size="2"), 1.0),
    ]
    steps = [(lab("a", "0"), 20.0), (lab("b", "1"), 20.0)]  # 20 steps/s, 50 ms steps
    sums = [(lab("a", "0"), 1.0), (lab("b", "1"), 1.0)]
    phases = [
        (lab("a", "0", phase="forward"), 0.2),
        (lab("a", "0", phase="backward"), 0.6),
        (lab("a", "0", phase="data"), 0.2),
        (lab("b", "1", phase="forward"), 0.6),
        (lab("b", "1", phase="backward"), 0.2),
        (lab("b", "1", phase="data"), 0.2),
    ]
    (job,) = build_jobs(info, steps, sums, phases, [(lab("a", "0"), 95.0)], now_s=100.0)
    assert job.world_size == 2 and job.hosts == ("a", "b")
    assert job.step_s == pytest.approx(0.05)
    assert job.straggler is not None and job.straggler.rank == 1
    assert job.max_skew is not None and job.max_skew > 1.2
    assert job.ranks[0].phase_s["backward"] == pytest.approx(0.03)
    assert job.ranks[0].last_step_age_s == 5.0
    # a rank whose info series is gone (the job ended) is not shown
    assert build_jobs([], steps, sums, phases, [], now_s=100.0) == []


def snapshot_with(host: str) -> ClusterSnapshot:
    gpus = build_gpus({"util_ratio": pick_gpu_values([(gputui_labels(host, "0"), 0.5)])})
    return ClusterSnapshot("http://p:9090", "", 0.0, 0.01, tuple(build_nodes(gpus, {}, {})), ())


def test_text_report_cleans_labels_and_json_keeps_them(capsys: pytest.CaptureFixture[str]) -> None:
    snap = snapshot_with(HOSTILE)
    print_text(snap)
    out = capsys.readouterr().out
    assert "\x1b" not in out and "evil\\x1b[2Jhost\\nname" in out
    doc = to_json(snap)
    assert doc["nodes"][0]["hostname"] == HOSTILE
    json.dumps(doc, allow_nan=False)


# -- the HTTP client against a tiny local server ---------------------------------------------
class _Handler(BaseHTTPRequestHandler):
    reply: tuple[int, bytes] = (200, b"{}")
    seen: list[bytes] = []

    def do_POST(self) -> None:  # the name http.server dispatches to
        length = int(self.headers.get("Content-Length", "0"))
        type(self).seen.append(self.rfile.read(length))
        code, body = type(self).reply
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def fake_prometheus() -> Iterator[tuple[str, type[_Handler]]]:
    handler = type("H", (_Handler,), {"seen": []})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def test_client_posts_forms_and_reads_vectors(fake_prometheus: Any) -> None:
    url, handler = fake_prometheus
    handler.reply = (
        200,
        json.dumps(
            {
                "status": "success",
                "data": {
                    "resultType": "vector",
                    "result": [{"metric": {"hostname": "a"}, "value": [1, "0.5"]}],
                },
            }
        ).encode(),
    )
    (series,) = PrometheusClient(url).query("up", at_s=12.5)
    assert series.labels == {"hostname": "a"} and series.value == 0.5
    assert b"query=up" in handler.seen[0] and b"time=12.500" in handler.seen[0]


@pytest.mark.parametrize(
    ("code", "body", "expected"),
    [
        (401, b"", "refused the request (HTTP 401)"),
        (403, b"", "refused the request (HTTP 403)"),
        (400, b'{"status":"error","error":"parse error at char 3"}', "query rejected"),
        (502, b"<html>bad gateway</html>", "answered HTTP 502 (is this a Prometheus server?)"),
        (200, b"<html>hello</html>", "did not answer with JSON"),
        (200, b"x" * 5000, "larger than"),
    ],
)
def test_client_errors_are_one_line(
    fake_prometheus: Any, code: int, body: bytes, expected: str
) -> None:
    url, handler = fake_prometheus
    handler.reply = (code, body)
    with pytest.raises(PrometheusError) as info:
        PrometheusClient(url, max_bytes=4096).query("up")
    message = str(info.value)
    assert expected in message and "\n" not in message


def test_cluster_once_unreachable_and_empty(
    capsys: pytest.CaptureFixture[str], fake_prometheus: Any
) -> None:
    closed = free_port()
    assert (
        main(["cluster", "--prometheus", f"http://127.0.0.1:{closed}", "--once", "--timeout", "2"])
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith(f"gputui cluster: cannot reach http://127.0.0.1:{closed}")
        and "\n" not in err
    )
    url, handler = fake_prometheus
    handler.reply = (200, b'{"status":"success","data":{"resultType":"vector","result":[]}}')
    assert main(["cluster", "--prometheus", url, "--once", "--json"]) == 2
    assert "holds no gputui or dcgm-exporter series" in capsys.readouterr().err
    assert main(["cluster", "--prometheus", "ftp://x", "--once"]) == 2
    assert "not an http(s) URL" in capsys.readouterr().err


# -- the screen ------------------------------------------------------------------------------
class FakeSource:
    def __init__(self, snapshots: list[Any]) -> None:
        self.snapshots = snapshots
        self.client = PrometheusClient("http://prom.example:9090")
        self.selector = 'cluster="x"'
        self.threads: list[str] = []
        self.hosts: list[Any] = []

    def fetch(self, hosts: Any = ()) -> ClusterSnapshot:
        self.threads.append(threading.current_thread().name)
        self.hosts.append(hosts)
        item = self.snapshots[min(len(self.threads) - 1, len(self.snapshots) - 1)]
        if isinstance(item, Exception):
            raise item
        return item  # type: ignore[no-any-return]

    def close(self) -> None:
        pass


async def test_screen_shows_values_collected_off_the_ui_thread() -> None:
    from gputui.tui.cluster.keyed_table import KeyedTable
    from gputui.tui.cluster.screen import ClusterScreen, make_cluster_app

    source = FakeSource([snapshot_with(HOSTILE)])
    app = make_cluster_app(source, interval_s=60)
    async with app.run_test(size=(120, 30)) as pilot:
        screen = app.screen
        assert isinstance(screen, ClusterScreen)
        await wait_for(pilot, lambda: screen.refreshes >= 1)
        nodes = screen.query_one("#cl-nodes", KeyedTable)
        row = nodes.row_plain(0)
        assert "\x1b" not in row and row.strip().startswith("evil\\x1b")
        # the first node's GPUs and history are read right after the first refresh
        await wait_for(pilot, lambda: [HOSTILE] in source.hosts)
        gpus = screen.query_one("#cl-gpus", KeyedTable)
        assert len(gpus.keys) == 1
        # The control: what the first refresh rendered once its renders settle
        # (on a loaded machine one can still be pending here).
        rendered = -1
        for _ in range(400):
            if rendered == nodes.renders:
                break
            rendered = nodes.renders
            await pilot.pause(0.05)
        screen.show(snapshot_with(HOSTILE))  # the same values again: nothing re-rendered
        await pilot.pause()
        assert nodes.renders == rendered
        assert threading.main_thread().name not in source.threads


async def test_screen_shows_errors_on_one_line() -> None:
    from textual.widgets import Static

    from gputui.tui.cluster.screen import ClusterScreen, make_cluster_app

    source = FakeSource(
        [PrometheusError("gputui cluster: cannot reach http://p:9090: Connection refused")]
    )
    app = make_cluster_app(source, interval_s=60)
    async with app.run_test(size=(100, 24)) as pilot:
        screen = app.screen
        assert isinstance(screen, ClusterScreen)
        await wait_for(pilot, lambda: screen.error is not None)
        status = screen.query_one("#cl-status", Static)
        assert "Connection refused" in str(status.render())


async def test_moving_the_node_cursor_reads_that_nodes_gpus() -> None:
    from gputui.tui.cluster.keyed_table import KeyedTable
    from gputui.tui.cluster.screen import ClusterScreen, make_cluster_app

    util = pick_gpu_values([(gputui_labels("a", "0"), 0.5), (gputui_labels("b", "0"), 0.7)])
    gpus = build_gpus({"util_ratio": util})
    snap = ClusterSnapshot("http://p:9090", "", 0.0, 0.01, tuple(build_nodes(gpus, {}, {})), ())
    source = FakeSource([snap])
    app = make_cluster_app(source, interval_s=60)
    async with app.run_test(size=(120, 30)) as pilot:
        screen = app.screen
        assert isinstance(screen, ClusterScreen)
        await wait_for(pilot, lambda: ["a"] in source.hosts)
        nodes = screen.query_one("#cl-nodes", KeyedTable)
        assert nodes.has_focus and nodes.cursor_key == "a"
        await pilot.press("down")
        await wait_for(pilot, lambda: ["b"] in source.hosts)
        assert screen.selected_host == "b"
        gpu_rows = screen.query_one("#cl-gpus", KeyedTable)
        assert [k for k in gpu_rows.keys] == ["b/0"]
