"""Finding severities, in one place: info < warn < crit."""

from __future__ import annotations

from typing import Literal

Severity = Literal["info", "warn", "crit"]

INFO: Severity = "info"
WARN: Severity = "warn"
CRIT: Severity = "crit"

#: most severe first
SEVERITIES: tuple[Severity, ...] = (CRIT, WARN, INFO)
#: sort key: crit 0, warn 1, info 2
ORDER: dict[str, int] = {CRIT: 0, WARN: 1, INFO: 2}
