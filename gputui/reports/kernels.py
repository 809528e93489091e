"""The kernel table of printed reports: ``analyze`` and ``attach --once`` show a
capture's or a trace's top GPU activities the same way."""

from __future__ import annotations

from collections.abc import Sequence

from gputui import fmt
from gputui.protocol.capture import KernelRow
from gputui.reports.text import kernel_name, table
from gputui.trace.kernels import CLASS_SHORT

HEADERS = ("time", "share", "calls", "mean", "class", "kernel")


def kernel_table(
    kernels: Sequence[KernelRow], width: int, indent: str = "  ", upper: bool = False
) -> list[str]:
    """One line per kernel (time, share, calls, mean, class, name), the name
    shortened and elided in the middle to fit ``width`` with ``indent``."""
    rows = [
        [
            fmt.us(k.total_us),
            f"{k.share * 100:.1f}%",
            f"{k.calls:,}",
            fmt.us(k.mean_us),
            CLASS_SHORT.get(k.kernel_class, fmt.clean(k.kernel_class, 7)),
            k.name,
        ]
        for k in kernels
    ]
    lines = table(
        [h.upper() if upper else h for h in HEADERS],
        rows,
        width - len(indent),
        right=[True, True, True, True, False, False],
        flexible=5,
        short=kernel_name,
        optional=(2, 3, 4),  # narrower: calls, mean and class give way to the name
        least=16,
    )
    return [indent + line for line in lines]
