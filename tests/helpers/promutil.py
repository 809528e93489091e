"""A real Prometheus server and gputui exporters on loopback, for tests, benchmarks
and screenshots.

    with exporters([("node-a", ["--demo"]), ("node-b", ["--replay", F])]) as targets:
        with prometheus(targets, tmp) as url:
            wait_for_series(url, 'gputui_gpu_info', 2)

Prometheus is Debian's ``prometheus`` package (``apt-get install prometheus``);
:func:`prometheus_binary` says None when it is not installed.  Ports are picked
free by the kernel; every wait polls with a deadline.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
#: the longest wait for a server or a series (tests/helpers/deadlines.py's WAIT_S;
#: this module imports nothing of the tests', for bench/ scripts)
WAIT_S = 60.0


def prometheus_binary() -> str | None:
    return shutil.which("prometheus")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(predicate: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.05)


def http_get(url: str, timeout_s: float = WAIT_S) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return bytes(response.read())
    except OSError:
        return None


@contextmanager
def exporters(
    specs: Sequence[tuple[str, Sequence[str]]], env: dict[str, str] | None = None
) -> Iterator[list[str]]:
    """Start one ``gputui exporter`` per (hostname, extra args); yields host:port targets."""
    procs: list[subprocess.Popen[bytes]] = []
    targets: list[str] = []
    try:
        for hostname, extra in specs:
            port = free_port()
            cmd = [
                sys.executable, "-m", "gputui", "exporter", "--listen", "127.0.0.1",
                "--port", str(port), "--hostname", hostname, *extra,
            ]  # fmt: skip
            procs.append(
                subprocess.Popen(
                    cmd,
                    cwd=str(REPO),
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
            )
            targets.append(f"127.0.0.1:{port}")
        for target, proc in zip(targets, procs, strict=True):

            def ready(target: str = target, proc: subprocess.Popen[bytes] = proc) -> bool:
                if proc.poll() is not None:
                    err = proc.stderr.read().decode() if proc.stderr else ""
                    raise AssertionError(f"exporter exited ({proc.returncode}): {err}")
                body = http_get(f"http://{target}/metrics")
                return body is not None and b"gputui_exporter_build_info" in body

            _wait(ready, WAIT_S, f"the exporter on {target}")
        yield targets
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            if proc.stderr is not None:
                proc.stderr.close()


@contextmanager
def prometheus(
    targets: Sequence[str],
    directory: Path,
    scrape_interval: str = "1s",
    extra_args: Sequence[str] = (),
) -> Iterator[str]:
    """A Prometheus on loopback scraping ``targets``; yields its URL."""
    binary = prometheus_binary()
    if binary is None:
        raise RuntimeError("prometheus is not installed")
    port = free_port()
    data = directory / "prom-data"
    data.mkdir(parents=True, exist_ok=True)
    config = directory / "prometheus.yml"
    config.write_text(
        "global:\n"
        f"  scrape_interval: {scrape_interval}\n"
        f"  evaluation_interval: {scrape_interval}\n"
        "scrape_configs:\n"
        "  - job_name: gputui\n"
        "    static_configs:\n"
        f"      - targets: {json.dumps(list(targets))}\n"
    )
    log = (directory / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-lifecycle",
            *extra_args,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:

        def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(
                    f"prometheus exited ({proc.returncode}): "
                    + (directory / "prometheus.log").read_text()[-2000:]
                )
            return http_get(f"{url}/-/ready") is not None

        _wait(ready, WAIT_S, "prometheus to start")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


def query(url: str, expr: str) -> list[dict[str, Any]]:
    body = urllib.parse.urlencode({"query": expr}).encode()
    with urllib.request.urlopen(f"{url}/api/v1/query", data=body, timeout=WAIT_S) as response:
        doc = json.loads(response.read())
    assert doc["status"] == "success", doc
    result = doc["data"]["result"]
    assert isinstance(result, list)
    return result


def wait_for_series(
    url: str, expr: str, count: int, timeout_s: float = 2 * WAIT_S
) -> list[dict[str, Any]]:
    """Poll until ``expr`` returns at least ``count`` series."""

    def enough() -> list[dict[str, Any]] | None:
        result = query(url, expr)
        return result if len(result) >= count else None

    return _wait(enough, timeout_s, f"{count} series of {expr}")  # type: ignore[no-any-return]


def env_with_repo(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env
