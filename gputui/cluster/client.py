"""A small client for Prometheus' HTTP API (standard library only).

``/api/v1/query`` and ``/api/v1/query_range``, sent as POST forms (long queries
stay out of URLs and logs), each with a timeout and a cap on the response size.
Every failure is a :class:`PrometheusError` whose message is one line a person
can act on: unreachable, refused (401/403), not Prometheus, a query error.
Label values in the results are returned as they are: untrusted text, cleaned
by whatever displays them.
"""

from __future__ import annotations

import base64
import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import NamedTuple

from gputui.errors import GputuiError

#: a response larger than this is refused (64 nodes x 8 GPUs x 10 minutes of
#: history at 5 s is ~1 MiB)
MAX_RESPONSE_BYTES = 32 << 20
DEFAULT_TIMEOUT_S = 5.0


class PrometheusError(GputuiError):
    """Prometheus could not be read; the message says why, in one line."""


class Series(NamedTuple):
    labels: dict[str, str]
    value: float


class RangeSeries(NamedTuple):
    labels: dict[str, str]
    points: tuple[tuple[float, float], ...]  # (unix time, value)


def _float(text: object) -> float:
    try:
        return float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


class PrometheusClient:
    """One Prometheus server, e.g. ``http://prometheus:9090`` (a path prefix, and
    ``user:password@`` for basic auth, are allowed)."""

    def __init__(
        self,
        url: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        parsed = urllib.parse.urlsplit(url.strip())
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise PrometheusError(
                f"gputui cluster: not an http(s) URL: {url!r} (e.g. http://prometheus:9090)"
            )
        self._auth: str | None = None
        netloc = parsed.netloc
        if parsed.username is not None:
            user = urllib.parse.unquote(parsed.username)
            password = urllib.parse.unquote(parsed.password or "")
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            self._auth = f"Basic {token}"
            netloc = netloc.rsplit("@", 1)[1]
        self.base = urllib.parse.urlunsplit(
            (parsed.scheme, netloc, parsed.path.rstrip("/"), "", "")
        )
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes

    # -- the two endpoints -------------------------------------------------------------
    def query(self, expr: str, at_s: float | None = None) -> list[Series]:
        form = {"query": expr}
        if at_s is not None:
            form["time"] = f"{at_s:.3f}"
        data = self._post("/api/v1/query", form)
        if data.get("resultType") == "scalar":
            scalar = data.get("result")
            value = scalar[1] if isinstance(scalar, list) and len(scalar) == 2 else "NaN"
            return [Series({}, _float(value))]
        out = []
        for item in _result_list(data, "vector"):
            value = item.get("value")
            labels = item.get("metric") or {}
            # label values are JSON strings: used as they are (no per-series copy)
            if isinstance(value, list) and len(value) == 2 and isinstance(labels, dict):
                out.append(Series(labels, _float(value[1])))
        return out

    def query_range(
        self, expr: str, start_s: float, end_s: float, step_s: float
    ) -> list[RangeSeries]:
        form = {
            "query": expr,
            "start": f"{start_s:.3f}",
            "end": f"{end_s:.3f}",
            "step": f"{step_s:g}",
        }
        data = self._post("/api/v1/query_range", form)
        out = []
        for item in _result_list(data, "matrix"):
            labels = item.get("metric") or {}
            values = item.get("values") or []
            if not isinstance(labels, dict) or not isinstance(values, list):
                continue
            points = tuple(
                (_float(p[0]), _float(p[1])) for p in values if isinstance(p, list) and len(p) == 2
            )
            out.append(RangeSeries(labels, points))
        return out

    # -- transport ---------------------------------------------------------------------
    def _post(self, path: str, form: Mapping[str, str]) -> Mapping[str, object]:
        body = urllib.parse.urlencode(form).encode()
        request = urllib.request.Request(self.base + path, data=body, method="POST")
        request.add_header("Content-Type", "application/x-www-form-urlencoded")
        request.add_header("Accept", "application/json")
        if self._auth:
            request.add_header("Authorization", self._auth)
        where = self.base
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                raw = response.read(self.max_bytes + 1)
        except urllib.error.HTTPError as exc:
            raw = _read_error_body(exc, self.max_bytes)
            if exc.code in (401, 403):
                raise PrometheusError(
                    f"gputui cluster: {where} refused the request (HTTP {exc.code}): "
                    "check the credentials in the URL (http://user:password@host:port)"
                ) from None
            message = _api_error(raw)
            if exc.code in (400, 422) and message:
                raise PrometheusError(
                    f"gputui cluster: query rejected by {where}: {message}"
                ) from None
            raise PrometheusError(
                f"gputui cluster: {where} answered HTTP {exc.code}"
                + (f": {message}" if message else " (is this a Prometheus server?)")
            ) from None
        except urllib.error.URLError as exc:
            raise PrometheusError(
                f"gputui cluster: cannot reach {where}: {_reason(exc.reason)}"
            ) from None
        except (TimeoutError, OSError) as exc:
            raise PrometheusError(f"gputui cluster: cannot reach {where}: {_reason(exc)}") from None
        if len(raw) > self.max_bytes:
            raise PrometheusError(
                f"gputui cluster: the answer from {where} is larger than "
                f"{self.max_bytes >> 20} MiB; narrow it with --selector"
            )
        try:
            doc = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise PrometheusError(
                f"gputui cluster: {where} did not answer with JSON (is this a Prometheus server?)"
            ) from None
        if not isinstance(doc, dict) or doc.get("status") != "success":
            message = doc.get("error") if isinstance(doc, dict) else None
            raise PrometheusError(
                f"gputui cluster: query failed at {where}: {message or 'no data'}"
            )
        data = doc.get("data")
        if not isinstance(data, dict):
            raise PrometheusError(f"gputui cluster: {where} answered without data")
        return data


def _result_list(data: Mapping[str, object], kind: str) -> list[dict]:  # type: ignore[type-arg]
    result = data.get("result")
    if data.get("resultType") != kind or not isinstance(result, list):
        return []
    return [item for item in result if isinstance(item, dict)]


def _read_error_body(exc: urllib.error.HTTPError, limit: int) -> bytes:
    try:
        return exc.read(min(limit, 65536))
    except Exception:  # the body is only a hint
        return b""


def _api_error(raw: bytes) -> str | None:
    try:
        doc = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if isinstance(doc, dict) and isinstance(doc.get("error"), str):
        return str(doc["error"])[:300]
    return None


def _reason(reason: object) -> str:
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    text = str(reason) or type(reason).__name__
    return text[:200]


def escape_label(value: str) -> str:
    """A string as a PromQL label matcher value (inside double quotes)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
