"""``gputui bench``: a bench document (measured now, or saved) as a table."""

from __future__ import annotations

from typing import Any

from gputui import fmt
from gputui.reports.text import output_width, table, wrap, wrap_items


def _num(value: float | None) -> str:
    if value is None:
        return fmt.NA
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def render(doc: dict[str, Any], width: int | None = None) -> list[str]:
    """A bench document as a table of at most ``width`` characters (the output's
    width by default).  Its text may come from a file: every string goes
    through ``fmt.clean``."""
    width = output_width() if width is None else width
    gpu = doc.get("gpu") or {}
    sw = doc.get("software") or {}
    when = str(doc.get("measured_at", "")).replace("T", " ").replace("Z", " UTC")
    head = [
        f"GPU {fmt.clean(gpu.get('index', '?'), 8)}",
        fmt.clean(gpu.get("name"), 128),
        f"sm {fmt.clean(gpu.get('compute_capability'), 8)}",
        fmt.clean(gpu.get("uuid"), 128),
    ]
    soft = [
        f"torch {fmt.clean(sw.get('torch'), 64)}",
        f"CUDA {fmt.clean(sw.get('cuda'), 32)}",
        f"driver {fmt.clean(sw.get('driver'), 64)}",
        fmt.clean(when, 64),
        "quick" if doc.get("quick") else "",
    ]
    lines = [*wrap_items(head, width), *wrap_items(soft, width), ""]
    rows: list[list[str]] = []
    errors: dict[int, list[str]] = {}
    for m in doc.get("measurements") or []:
        label = fmt.clean(m.get("label"), 64)
        error = m.get("error")
        if error:
            errors[len(rows)] = wrap(fmt.clean(error), width, _TAB, _TAB)
            rows.append([label, "-", "", "", ""])
            continue
        unit = fmt.clean(m.get("unit"), 16)
        sheet = m.get("datasheet")
        share = m.get("pct_of_datasheet")
        rows.append(
            [
                label,
                f"{_num(m.get('value'))} {unit}",
                f"{_num(m.get('worst'))}-{_num(m.get('best'))}",
                _num(sheet) if sheet else "-",
                fmt.pct(share) if share is not None else "-",
            ]
        )
    lines += table(
        ["", "measured", "slowest-fastest", "datasheet", "share"],
        rows,
        width,
        right=[False, True, True, True, True],
        flexible=0,
        under=errors,
    )
    sheet = doc.get("datasheet")
    lines.append("")
    if sheet:
        lines += wrap(
            f"datasheet: {fmt.clean(sheet.get('model'), 128)}, dense tensor-core rates, "
            "PCIe per direction",
            width,
            "",
            _TAB,
        )
        lines += wrap(f"source: {fmt.clean(sheet.get('source'))}", width, _TAB, _TAB * 2)
    else:
        lines.append("datasheet: this GPU is not in gputui's table")
    reps = [int(m.get("repetitions") or 0) for m in doc.get("measurements") or []]
    reps = [r for r in reps if r > 0] or [0]
    span = str(reps[0]) if min(reps) == max(reps) else f"{min(reps)}-{max(reps)}"
    took = doc.get("elapsed_s")
    lines += wrap(
        f"medians of {span} repetitions after warm-up, CUDA events; "
        f"took {took if took is not None else '?'} s",
        width,
    )
    return lines


#: the indent of a continued line
_TAB = "  "
