"""``gputui bench``: a bench document (measured now, or saved) as a table."""

from __future__ import annotations

from typing import Any

from gputui import fmt


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


def render(doc: dict[str, Any]) -> list[str]:
    """A bench document as an 80-column table.  Its text may come from a file:
    every string goes through ``fmt.clean``."""
    gpu = doc.get("gpu") or {}
    sw = doc.get("software") or {}
    when = str(doc.get("measured_at", "")).replace("T", " ").replace("Z", " UTC")
    head = f"GPU {gpu.get('index', '?')}  {fmt.clean(gpu.get('name'), 40)}"
    head += f"  sm {fmt.clean(gpu.get('compute_capability'), 8)}  {fmt.clean(gpu.get('uuid'), 60)}"
    lines = [
        head,
        f"torch {fmt.clean(sw.get('torch'), 30)}  CUDA {fmt.clean(sw.get('cuda'), 12)}  "
        f"driver {fmt.clean(sw.get('driver'), 20)}  {fmt.clean(when, 30)}"
        f"{'  quick' if doc.get('quick') else ''}",
        "",
        f"{'':<28} {'measured':>14} {'slowest-fastest':>15} {'datasheet':>10} {'share':>5}",
    ]
    for m in doc.get("measurements") or []:
        label = fmt.clean(m.get("label"), 28)
        error = m.get("error")
        if error:
            lines.append(f"{label:<28} {fmt.clean(error, 51)}")
            continue
        unit = fmt.clean(m.get("unit"), 8)
        value = f"{_num(m.get('value'))} {unit}"
        spread = f"{_num(m.get('worst'))}-{_num(m.get('best'))}"
        sheet = m.get("datasheet")
        share = m.get("pct_of_datasheet")
        lines.append(
            f"{label:<28} {value:>14} {spread:>15} {_num(sheet) if sheet else '-':>10} "
            f"{fmt.pct(share) if share is not None else '-':>5}"
        )
    sheet = doc.get("datasheet")
    lines.append("")
    if sheet:
        lines.append(
            f"datasheet: {fmt.clean(sheet.get('model'), 40)}, dense tensor-core rates, "
            "PCIe per direction"
        )
        lines.append(f"  source: {fmt.clean(sheet.get('source'), 70)}")
    else:
        lines.append("datasheet: this GPU is not in gputui's table")
    reps = [int(m.get("repetitions") or 0) for m in doc.get("measurements") or []]
    reps = [r for r in reps if r > 0] or [0]
    span = str(reps[0]) if min(reps) == max(reps) else f"{min(reps)}-{max(reps)}"
    took = doc.get("elapsed_s")
    lines.append(
        f"medians of {span} repetitions after warm-up, CUDA events; "
        f"took {took if took is not None else '?'} s"
    )
    return lines
