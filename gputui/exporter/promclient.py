"""The exporter's families as a ``prometheus_client`` collector.

For programs that already serve a ``prometheus_client`` registry (and want
gputui's series in it), and for the benchmark's baseline: the same families
rendered by ``prometheus_client`` instead of :mod:`gputui.exporter.exposition`.
``prometheus_client`` is imported only here, and only when this is used.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gputui.errors import GputuiError
from gputui.exporter.collector import ExporterCollector
from gputui.exporter.exposition import COUNTER, INFO


class PrometheusClientCollector:
    """``registry.register(PrometheusClientCollector(collector))``."""

    def __init__(self, collector: ExporterCollector) -> None:
        try:
            from prometheus_client.core import Metric
        except ImportError:
            raise GputuiError(
                "prometheus_client is not installed (pip install 'gputui[exporter]')"
            ) from None
        self._metric = Metric
        self._collector = collector

    def collect(self) -> Iterator[Any]:
        for family in self._collector.families():
            if not family.samples:
                continue
            name = family.name
            if family.type == COUNTER:
                name = name.removesuffix("_total")
            kind = "gauge" if family.type == INFO else family.type
            metric = self._metric(name, family.help, kind)
            for suffix, labels, value in family.samples:
                metric.add_sample(family.name + suffix, labels.as_dict(), float(value))
            yield metric
