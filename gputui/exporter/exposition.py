"""Metric families and the Prometheus text exposition format (version 0.0.4).

Why not ``prometheus_client``'s ``generate_latest``: it validates and escapes every
label name and value of every sample on every scrape.  For 240 samples with six
labels it took 4 ms of CPU on the 2-core development VM, about what nvitop-exporter
spends on a whole scrape; here a GPU's label set is escaped once, kept in
:class:`Labels`, and each sample is one string format (``bench/bench_exporter.py``
measures both in one run, docs/benchmarks.md has the figures).  The output is
checked against ``prometheus_client``'s parser and a real Prometheus in the tests.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

GAUGE = "gauge"
COUNTER = "counter"
SUMMARY = "summary"
INFO = "info"  # rendered as a gauge whose value is 1 (``_info`` metadata)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: label sets remembered between scrapes (GPUs, processes, jobs); past this the
#: cache is dropped and rebuilt, so churning pids cannot grow it without bound
MAX_CACHED_LABELS = 20_000


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


class Labels:
    """One label set, with its ``{name="value",...}`` text rendered once.

    Use :func:`labels` to get one: the same pairs give the same object, so a GPU's
    labels are escaped once for the exporter's lifetime, not once per sample.
    """

    __slots__ = ("pairs", "text")

    def __init__(self, pairs: tuple[tuple[str, str], ...]) -> None:
        self.pairs = pairs
        if pairs:
            inner = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in pairs)
            self.text = "{" + inner + "}"
        else:
            self.text = ""

    def as_dict(self) -> dict[str, str]:
        return dict(self.pairs)

    def extend(self, *more: tuple[str, str]) -> Labels:
        """These labels and ``more`` after them."""
        return labels(self.pairs + more)

    def __repr__(self) -> str:
        return f"Labels({self.text})"


_CACHE: dict[tuple[tuple[str, str], ...], Labels] = {}
EMPTY = Labels(())


def labels(pairs: tuple[tuple[str, str], ...]) -> Labels:
    found = _CACHE.get(pairs)
    if found is None:
        if len(_CACHE) >= MAX_CACHED_LABELS:
            _CACHE.clear()
        found = _CACHE[pairs] = Labels(pairs)
    return found


def format_value(value: float) -> str:
    """A sample value in the text format: repr for numbers, NaN, +Inf, -Inf."""
    kind = type(value)
    if kind is int:
        return repr(value)
    if kind is bool:
        return "1" if value else "0"
    value = float(value)
    if value - value != 0:  # NaN or an infinity: the only values where this holds
        if value != value:
            return "NaN"
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


@dataclass
class Family:
    """One metric family: name (with ``_total`` for counters), type, help, samples.

    A sample is ``(suffix, labels, value)``; the suffix is "" except for a summary's
    ``_sum``/``_count``.  Families are built fresh for every scrape and thrown away.
    """

    name: str
    type: str
    help: str
    unit: str = ""
    samples: list[tuple[str, Labels, float]] = field(default_factory=list)

    def add(self, lab: Labels, value: float | None, suffix: str = "") -> None:
        """Add a sample; ``None`` (not available) adds nothing."""
        if value is not None:
            self.samples.append((suffix, lab, value))

    def render(self, out: list[str]) -> None:
        if not self.samples:
            return
        name = self.name
        key = (name, self.type, self.help)
        header = _HEADERS.get(key)
        if header is None:
            kind = GAUGE if self.type == INFO else self.type
            header = _HEADERS[key] = (
                f"# HELP {name} {_escape_help(self.help)}\n# TYPE {name} {kind}\n"
            )
        out.append(header)
        fmt = format_value
        out.extend(
            [f"{name}{suffix}{lab.text} {fmt(value)}\n" for suffix, lab, value in self.samples]
        )


#: the HELP and TYPE lines of each family, written once (a fixed set of names)
_HEADERS: dict[tuple[str, str, str], str] = {}


def render(families: Iterable[Family]) -> bytes:
    out: list[str] = []
    for family in families:
        family.render(out)
    return "".join(out).encode("utf-8")


def quantiles(values: Sequence[float], qs: Sequence[float]) -> list[float]:
    """Nearest-rank quantiles of ``values`` (not empty)."""
    ordered = sorted(values)
    n = len(ordered)
    return [ordered[min(n - 1, max(0, math.ceil(q * n) - 1))] for q in qs]
