"""What an Xid error means and what to do about it, in gputui's words, after
NVIDIA's Xid catalogue (https://docs.nvidia.com/deploy/xid-errors/): its
description of each code, and its resolution buckets (restart the application,
reset the GPU, reboot the node, have the GPU serviced) as actions.

Each code is also sorted by whose problem it is: ``hardware`` (the GPU or its
memory, link or power: drain and reset, service if it repeats), ``job`` (the
application's own fault: a bad address, an illegal instruction; the GPU is
fine unless it repeats with other jobs), ``driver`` (the driver or the GPU's
firmware: reset, report if it repeats) and ``report`` (the driver says what it
did: nothing to do on its own).
"""

from __future__ import annotations

from gputui.analysis.severity import CRIT, INFO, WARN, Severity
from gputui.protocol.value import ValueBase, value_class

CATALOGUE_URL = "https://docs.nvidia.com/deploy/xid-errors/"
#: an Xid error older than this is history (the kernel log keeps the errors
#: since boot, which may be days old): its finding is information
RECENT_S = 24 * 3600.0


@value_class
class XidMeaning(ValueBase):
    """One Xid code: a few words for a panel, what happened, what to do, whose
    problem it is, and how severe."""

    code: int
    short: str
    meaning: str
    action: str
    cause: str
    severity: Severity


_JOB_FAULT = (
    "a job's fault: fix and restart the job (compute-sanitizer finds the kernel); "
    "the GPU needs nothing, unless this repeats with other jobs on this GPU only: "
    "then run dcgmi diag -r 3 on it"
)
_DRAIN_RESET = (
    "drain the GPU and reset it (nvidia-smi -r, or reboot the node); "
    "have the GPU serviced if it repeats"
)


def _m(code: int, short: str, meaning: str, action: str, cause: str, sev: Severity) -> XidMeaning:
    return XidMeaning(code, short, meaning, action, cause, sev)


#: the codes a data-center GPU reports most, by code
CATALOGUE: dict[int, XidMeaning] = {
    m.code: m
    for m in (
        _m(
            8,
            "GPU stopped processing",
            "a channel of the GPU timed out: the work on it stopped",
            "restart the job; report it (nvidia-bug-report.sh) if it repeats on this GPU",
            "driver",
            WARN,
        ),
        _m(
            13,
            "job's kernel faulted",
            "an exception in the GPU's engine: a kernel of the job accessed memory out of "
            "range or ran an illegal instruction",
            _JOB_FAULT,
            "job",
            WARN,
        ),
        _m(
            31,
            "job's memory fault",
            "a GPU memory page fault: a kernel of the job read or wrote an address it "
            "does not own (an illegal memory access)",
            _JOB_FAULT,
            "job",
            WARN,
        ),
        _m(
            32,
            "bad push buffer",
            "the GPU received an invalid or corrupted command stream",
            "restart the job; if it repeats, check the driver and the GPU's PCIe link",
            "driver",
            WARN,
        ),
        _m(
            38,
            "driver firmware error",
            "the driver's firmware on the GPU reported an error",
            "reset the GPU; report it if it repeats",
            "driver",
            WARN,
        ),
        _m(
            43,
            "job's work stopped",
            "the GPU stopped a job's work after the job faulted or was stopped (its "
            "channel was reset)",
            "a job's fault: the GPU is fine; read the job's own error (and the Xid before "
            "this one)",
            "job",
            WARN,
        ),
        _m(
            45,
            "job's work cleaned up",
            "the driver cleaned up a job's work after an earlier error, or after the job "
            "was killed",
            "nothing on its own: the Xid before it (or the job's end) says why",
            "report",
            INFO,
        ),
        _m(
            48,
            "double-bit ECC error",
            "device memory returned data it could not correct (a double-bit ECC error)",
            _DRAIN_RESET + "; the reset retires the page or remaps the row",
            "hardware",
            CRIT,
        ),
        _m(
            61,
            "micro-controller warning",
            "an internal micro-controller of the GPU hit a breakpoint or a warning",
            "reset the GPU if it repeats; report it",
            "driver",
            WARN,
        ),
        _m(
            62,
            "micro-controller halted",
            "an internal micro-controller of the GPU halted",
            _DRAIN_RESET,
            "hardware",
            CRIT,
        ),
        _m(
            63,
            "row remapping pending",
            "after ECC errors a memory page was retired or a row marked for remapping",
            "reset the GPU when it is free: the reset applies the remapping",
            "hardware",
            WARN,
        ),
        _m(
            64,
            "row remapping failed",
            "a memory page retirement or row remapping could not be recorded",
            _DRAIN_RESET,
            "hardware",
            CRIT,
        ),
        _m(
            68,
            "video decoder fault",
            "an exception in the GPU's video decoder (NVDEC)",
            "restart the job; look at its decoder use if it repeats",
            "job",
            WARN,
        ),
        _m(
            69,
            "engine class error",
            "the GPU's graphics engine met a command it does not know",
            "restart the job; report it if it repeats",
            "driver",
            WARN,
        ),
        _m(
            74,
            "NVLink error",
            "an NVLink link of the GPU reported an error",
            "check the links (nvidia-smi nvlink -s -e) and reset the GPU; have the GPU or "
            "its NVLink serviced if it repeats",
            "hardware",
            CRIT,
        ),
        _m(
            79,
            "fell off the bus",
            "the GPU fell off the bus: it stopped answering on PCIe",
            "drain the node and reset the GPU or reboot the node; if it repeats, check its "
            "power, cooling and PCIe slot, then have it serviced",
            "hardware",
            CRIT,
        ),
        _m(
            92,
            "many corrected ECC errors",
            "device memory corrects single-bit ECC errors at a high rate",
            "watch it; have the GPU checked (dcgmi diag -r 3) if it persists",
            "hardware",
            WARN,
        ),
        _m(
            94,
            "contained ECC error",
            "a contained ECC error: an uncorrectable memory error hit one job, which the "
            "driver stopped; the GPU's other jobs run on",
            "restart that job; reset the GPU when it is free, to remap the bad row",
            "hardware",
            WARN,
        ),
        _m(
            95,
            "uncontained ECC error",
            "an uncontained ECC error: an uncorrectable memory error the driver could not "
            "confine to one job; every job on the GPU may have read bad data",
            _DRAIN_RESET,
            "hardware",
            CRIT,
        ),
        _m(
            109,
            "context switch timeout",
            "the GPU timed out switching between jobs' contexts",
            "restart the job; if it repeats with jobs that do not hang, report it",
            "job",
            WARN,
        ),
        _m(
            119,
            "GSP did not answer",
            "the GPU's system processor (GSP) did not answer the driver in time",
            "reset the GPU (or reboot the node); report it if it repeats",
            "driver",
            CRIT,
        ),
        _m(
            120,
            "GSP error",
            "the GPU's system processor (GSP) reported an error",
            "reset the GPU (or reboot the node); report it if it repeats",
            "driver",
            CRIT,
        ),
        _m(
            140,
            "unrecovered ECC error",
            "an ECC error in device memory was not recovered",
            _DRAIN_RESET,
            "hardware",
            CRIT,
        ),
        _m(
            154,
            "recovery action needed",
            "the driver says the GPU needs a recovery action (a reset, a reboot, or "
            "draining its work)",
            "do what the driver's line in the kernel log asks (dmesg | grep 'Xid.*154')",
            "hardware",
            CRIT,
        ),
    )
}


def meaning_of(code: int) -> XidMeaning:
    """The code's entry; a code gputui does not describe points to the catalogue."""
    known = CATALOGUE.get(code)
    if known is not None:
        return known
    return XidMeaning(
        code,
        f"Xid {code}",
        f"the driver reported Xid {code}",
        f"look it up in NVIDIA's Xid catalogue ({CATALOGUE_URL})",
        "report",
        WARN,
    )
