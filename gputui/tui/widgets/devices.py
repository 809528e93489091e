"""The device panel: a block per GPU, or one line per GPU in compact mode.

The block puts the plain utilization bar right above the tensor-core activity bar
(GPM, Hopper and newer) so that "100% GPU util, 4% tensor activity" reads at a
glance.  Throttle reasons are flagged in reverse video on the GPU's first line.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType

from rich.text import Text

from gputui import fmt
from gputui.analysis import throttle
from gputui.ceilings.datasheet import datasheet_for
from gputui.ceilings.measured import Ceilings
from gputui.snapshot.model import DeviceSnapshot, MigInstance
from gputui.tui import render
from gputui.tui.render import SEVERITY_STYLE
from gputui.tui.widgets.text_panel import TextPanel

#: lines of one GPU block in full mode (MIG instances add one each)
BLOCK_LINES = 4
_LABEL = 9  # "  TENSOR " and friends
#: utilization is drawn in one colour: high is not bad, it is what you paid for
UTIL_STYLE = "cyan"


def block_lines(device: DeviceSnapshot) -> int:
    return BLOCK_LINES + len(device.mig_instances)


def _flags(device: DeviceSnapshot, text: Text, ascii_only: bool) -> None:
    sign = "!" if ascii_only else "⚠"
    for item in throttle.costly(device.throttle_reasons):
        text.append(" ")
        text.append(f"{sign} {item.flag}", style=SEVERITY_STYLE[item.severity])
    if device.ecc_errors_uncorrected:
        text.append(" ")
        text.append(f"{sign} ECC {device.ecc_errors_uncorrected}", style="bold reverse red")
    if device.xid_errors:
        flagged = _xid_text().flag(device)
        if flagged is not None:
            text.append(" ")
            text.append(f"{sign} {flagged[0]}", style=SEVERITY_STYLE[flagged[1]])


def _xid_text() -> ModuleType:
    """The Xid errors' text (loaded with a GPU that has some to show)."""
    from gputui.session import xid_text

    return xid_text


def _power(device: DeviceSnapshot) -> str:
    if device.power_w is None:
        return "N/A W"
    if device.power_limit_w:
        return f"{device.power_w:.0f}/{device.power_limit_w:.0f}W"
    return f"{device.power_w:.0f}W"


def _temp(device: DeviceSnapshot, ascii_only: bool) -> str:
    if device.temp_gpu_c is None:
        return "N/A"
    return f"{device.temp_gpu_c:.0f}{'C' if ascii_only else '°C'}"


def _mem_label(device: DeviceSnapshot) -> str:
    if device.mem_used_bytes is None or device.mem_total_bytes is None:
        return "N/A"
    return f"{fmt.size(device.mem_used_bytes)}/{fmt.size(device.mem_total_bytes)}"


def _frac(value: float | None) -> float | None:
    return None if value is None else value / 100.0


def _util_bar(device: DeviceSnapshot, width: int, ascii_only: bool) -> Text:
    """The GPU utilization bar of a device's full block and of its compact line."""
    util = device.util_gpu_pct
    return render.bar(_frac(util), width, ascii_only, style=UTIL_STYLE, label=fmt.pct(util, 4))


def full_block(
    device: DeviceSnapshot, width: int, ascii_only: bool, ceilings: Ceilings | None = None
) -> list[Text]:
    if device.lost:
        name = fmt.clean(device.name, 128)
        lost = Text(f"GPU {device.index}  {name}  LOST: not answering", style="bold red")
        said = _xid_text().line(device) if device.xid_errors else None
        if said is not None:
            lost.append(f"  {said}")
        return [lost]
    up, down = ("^", "v") if ascii_only else ("↑", "↓")
    # line 1: identity, thermals, power, clocks, throttle flags
    head = Text()
    head.append(f"GPU {device.index} ", style="bold")
    head.append(fmt.clean(device.name, 128), style="bold cyan")
    pstate = "P?" if device.pstate is None else f"P{device.pstate}"
    fan = "N/A" if device.fan_pct is None else f"{device.fan_pct:.0f}%"
    sm = fmt.NA if device.clock_sm_mhz is None else f"{device.clock_sm_mhz}"
    mem = fmt.NA if device.clock_mem_mhz is None else f"{device.clock_mem_mhz}"
    head.append(
        f"  {pstate}  {_temp(device, ascii_only)}  fan {fan}  {_power(device)}"
        f"  SM {sm} MEM {mem} MHz"
    )
    _flags(device, head, ascii_only)

    bar_w = max(6, (width - 2 * _LABEL - 2) // 2)
    line2 = Text("  UTIL   ")
    line2.append_text(_util_bar(device, bar_w, ascii_only))
    line2.append("   MEM   ")
    mem_pct = device.mem_used_pct
    line2.append_text(
        render.bar(
            _frac(mem_pct), bar_w, ascii_only, label=f"{_mem_label(device)} {fmt.pct(mem_pct, 4)}"
        )
    )

    gpm = device.gpm
    line3 = Text()
    if device.gpm_supported and gpm is not None:
        tensor = gpm.tensor_activity_pct
        line3.append("  TENSOR ", style="bold magenta")
        line3.append_text(
            render.bar(_frac(tensor), bar_w, ascii_only, style="magenta", label=fmt.pct(tensor, 4))
        )
        line3.append(
            f"   SM act {fmt.pct(gpm.sm_activity_pct, 4)}  occ {fmt.pct(gpm.sm_occupancy_pct, 4)}"
            f"  DRAM bw {fmt.pct(gpm.dram_bw_util_pct, 4)}"
        )
        line3.append(_dram_against_ceiling(device, gpm.dram_bw_util_pct, ceilings), style="dim")
    else:
        reason = "not supported on this GPU" if device.gpm_supported is False else "unavailable"
        line3.append("  TENSOR ", style="dim")
        line3.append(f"GPM metrics (SM/tensor/DRAM activity) {reason}", style="dim")

    line4 = Text("  ")
    gen = "" if device.pcie_gen is None else f" Gen{device.pcie_gen}x{device.pcie_width or '?'}"
    line4.append(
        f"PCIe{gen} {up}{fmt.rate(device.pcie_tx_bytes_per_s)} "
        f"{down}{fmt.rate(device.pcie_rx_bytes_per_s)}"
    )
    if ceilings is not None:
        # NVML's TX is what the GPU sends (device to host), RX what it receives
        maxima = [
            f"{arrow}{_gbps(value)}"
            for arrow, value in ((up, ceilings.d2h_pinned_gbps), (down, ceilings.h2d_pinned_gbps))
            if value
        ]
        if maxima:
            line4.append(f" (measured max {' '.join(maxima)})", style="dim")
    if device.nvlink_links_active:
        line4.append(
            f"   NVLink x{device.nvlink_links_active} {up}{fmt.rate(device.nvlink_tx_bytes_per_s)}"
            f" {down}{fmt.rate(device.nvlink_rx_bytes_per_s)}"
        )
    if device.ecc_errors_corrected:
        line4.append(f"   ECC corrected {device.ecc_errors_corrected}", style="yellow")
    if device.ecc_errors_uncorrected:
        line4.append(f"   ECC uncorrected {device.ecc_errors_uncorrected}", style="bold red")
    if device.remapped_rows_pending or device.remapped_rows_failed:
        line4.append("   rows remap pending/failed", style="bold red")
    if device.mig_enabled:
        line4.append(f"   MIG on ({len(device.mig_instances)})", style="cyan")
    if device.xid_errors:
        said = _xid_text().line(device)
        if said is not None:
            line4.append(f"   {said}", style="bold red")
    elif device.xid_sources == ():  # neither NVML's events nor the kernel log
        line4.append(f"   {_xid_text().NOT_WATCHED}", style="dim")
    lines = [head, line2, line3, line4]
    lines += [
        _mig_line(m, bar_w, ascii_only, i == len(device.mig_instances) - 1)
        for i, m in enumerate(device.mig_instances)
    ]
    return lines


def _mig_line(mig: MigInstance, bar_w: int, ascii_only: bool, last: bool) -> Text:
    tee = ("`-" if last else "|-") if ascii_only else ("└─" if last else "├─")
    line = Text(f"  {tee} ")
    name = fmt.clean(mig.name or "MIG", 64)
    line.append(f"GI {mig.gpu_instance_id} {name}".ljust(_LABEL + 10), style="cyan")
    frac = (
        mig.mem_used_bytes / mig.mem_total_bytes
        if mig.mem_used_bytes is not None and mig.mem_total_bytes
        else None
    )
    label = f"{fmt.size(mig.mem_used_bytes)}/{fmt.size(mig.mem_total_bytes)}"
    line.append("mem ")
    pct = None if frac is None else frac * 100
    line.append_text(
        render.bar(
            frac,
            max(6, bar_w - 12),
            ascii_only,
            label=label,
            fallback=(fmt.size_pair(mig.mem_used_bytes, mig.mem_total_bytes), fmt.pct(pct, 4)),
        )
    )
    if mig.sm_count is not None:
        line.append(f"  {mig.sm_count} SMs")
    return line


def compact_line(device: DeviceSnapshot, width: int, ascii_only: bool) -> Text:
    """One GPU on one line, 80 columns and up."""
    line = Text()
    line.append(f"{device.index:>2} ", style="bold")
    line.append(fmt.truncate(fmt.gpu_name(device.name), 14, ascii_only).ljust(15), style="cyan")
    if device.lost:
        line.append("LOST: not answering", style="bold red")
        flagged = _xid_text().flag(device) if device.xid_errors else None
        if flagged is not None:
            line.append(f" {flagged[0]}", style="bold red")
        return line
    gpm = device.gpm
    tensor = gpm.tensor_activity_pct if gpm is not None and device.gpm_supported else None
    tail = Text()
    tail.append(" TC", style="magenta")
    tail.append(fmt.pct(tensor, 4) if tensor is not None else "  -", style="magenta")
    tail.append(f" {_temp(device, ascii_only):>4} {_power(device):>8}")
    _flags(device, tail, ascii_only)
    bar_w = max(6, (width - len(line) - len(tail) - 6) // 2)
    line.append("U")
    line.append_text(_util_bar(device, bar_w, ascii_only))
    line.append(" M")
    mem_pct = device.mem_used_pct
    line.append_text(
        render.bar(
            _frac(mem_pct),
            bar_w,
            ascii_only,
            label=_mem_label(device),
            fallback=(
                fmt.size_pair(device.mem_used_bytes, device.mem_total_bytes),
                fmt.pct(mem_pct, 4),
            ),
        )
    )
    line.append_text(tail)
    return line


def _gbps(value: float | None) -> str:
    return fmt.rate(None if value is None else value * 1e9)


def _dram_against_ceiling(
    device: DeviceSnapshot, dram_pct: float | None, ceilings: Ceilings | None
) -> str:
    """' = 1.84TB/s of 2.95TB/s measured': GPM's DRAM bandwidth share (of the
    datasheet peak) as bytes per second, beside what `gputui bench` reached."""
    if ceilings is None or not ceilings.hbm_copy_gbps or dram_pct is None:
        return ""
    sheet = datasheet_for(device.name)
    if sheet is None:
        return f" (measured max {_gbps(ceilings.hbm_copy_gbps)})"
    now = dram_pct / 100.0 * sheet.hbm_gbps
    return f" = {_gbps(now)} of {_gbps(ceilings.hbm_copy_gbps)} measured"


class DevicePanel(TextPanel):
    """All GPUs; ``compact`` is set by the screen (auto by height, or by the user)."""

    def __init__(self, *, id: str | None = None, ascii_only: bool = False) -> None:
        super().__init__(id=id)
        self.devices: tuple[DeviceSnapshot, ...] = ()
        self.compact = False
        self.ascii_only = ascii_only
        #: GPU UUID -> its measured ceilings (`gputui bench`), live data only
        self.ceilings: Mapping[str, Ceilings] = {}

    def show(self, devices: tuple[DeviceSnapshot, ...]) -> None:
        self.devices = devices
        self.redraw()

    def full_height(self) -> int:
        return sum(block_lines(d) for d in self.devices)

    def build(self, width: int) -> Text:
        lines = self.build_lines(width)
        if lines is None:
            return Text("no GPUs in this snapshot", style="dim")
        return Text("\n").join(lines)

    def build_lines(self, width: int) -> list[Text] | None:
        if not self.devices:
            return None  # one line in the panel's own style: drawn by build()
        lines: list[Text] = []
        for device in self.devices:
            if self.compact:
                lines.append(compact_line(device, width, self.ascii_only))
                lines += [
                    _mig_line(m, 26, self.ascii_only, i == len(device.mig_instances) - 1)
                    for i, m in enumerate(device.mig_instances)
                ]
            else:
                measured = self.ceilings.get(device.uuid) if device.uuid else None
                lines.extend(full_block(device, width, self.ascii_only, measured))
        return lines
