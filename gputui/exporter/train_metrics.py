"""Training series of the hooked jobs: steps, phase seconds, step durations,
samples, device memory, allocator retries and OOMs.

Every series carries ``hostname``, ``job_id`` and ``rank``, so that PromQL can
group ranks into jobs and divide one counter by another
(``rate(gputui_train_phase_seconds_total[1m]) / ignoring(phase)
group_left rate(gputui_train_steps_total[1m])`` is seconds of each phase per
step).  ``gputui_train_info`` adds ``local_rank``, ``world_size``, ``pid`` and the
GPU: ``gpu``, its index as the job numbers it (under ``CUDA_VISIBLE_DEVICES``
not NVML's), and ``UUID``, the same label as on the GPU series, to join them
by (and, with ``--cmdline``, the command).  Counters count from when the
exporter started following the job: a restarted exporter starts them at zero
again, which ``rate()`` reads as a counter reset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

from gputui.analysis.live_account import measured_seconds
from gputui.exporter.container_labels import container_labels, job_labels
from gputui.exporter.exposition import COUNTER, GAUGE, INFO, SUMMARY, Family, labels, quantiles
from gputui.exporter.gpu_metrics import MAX_COMMAND_CHARS
from gputui.exporter.jobs import JobSnapshot

QUANTILES = (0.5, 0.9, 0.99)


@dataclass
class _TrainFamilies:
    """The training series, filled one job at a time (fields in exposition order)."""

    info: Family
    steps: Family
    phases: Family
    account: Family
    gpu_phases: Family
    duration: Family
    samples: Family
    last: Family
    allocated: Family
    reserved: Family
    peak: Family
    retries: Family
    ooms: Family
    flops: Family
    mfu: Family

    @classmethod
    def empty(cls) -> _TrainFamilies:
        return cls(
            info=Family(
                "gputui_train_info",
                INFO,
                "A hooked training process (one rank of a job); the value is 1.",
            ),
            steps=Family(
                "gputui_train_steps_total",
                COUNTER,
                "Training steps seen since the exporter connected.",
            ),
            phases=Family(
                "gputui_train_phase_seconds_total",
                COUNTER,
                "Wall time spent in each step phase (data, forward, backward, optimizer, user "
                "phases, other); the phases of a step add up to its duration.",
            ),
            account=Family(
                "gputui_train_account_seconds_total",
                COUNTER,
                "Wall time in the buckets of the step's time account that the hook measures on "
                "every step: data (data wait), phase (user phases together), comm (communication).",
            ),
            gpu_phases=Family(
                "gputui_train_phase_gpu_seconds_total",
                COUNTER,
                "GPU time of each step phase, for jobs that time their steps on the GPU.",
            ),
            duration=Family(
                "gputui_train_step_duration_seconds",
                SUMMARY,
                "Step duration; quantiles over the last 256 steps (profiled steps left out).",
            ),
            samples=Family(
                "gputui_train_samples_total",
                COUNTER,
                "Training samples processed (when the job's batch size is known).",
            ),
            last=Family(
                "gputui_train_last_step_timestamp_seconds",
                GAUGE,
                "When the last step ended (Unix time).",
            ),
            allocated=Family(
                "gputui_train_memory_allocated_bytes",
                GAUGE,
                "Device memory held by tensors (torch).",
            ),
            reserved=Family(
                "gputui_train_memory_reserved_bytes",
                GAUGE,
                "Device memory reserved by torch's caching allocator.",
            ),
            peak=Family(
                "gputui_train_memory_peak_allocated_bytes",
                GAUGE,
                "Peak device memory held by tensors since the job started (or its last reset).",
            ),
            retries=Family(
                "gputui_train_alloc_retries_total",
                COUNTER,
                "Allocations torch's caching allocator retried after freeing its cache.",
            ),
            ooms=Family(
                "gputui_train_ooms_total",
                COUNTER,
                "Out-of-memory errors raised by torch's allocator.",
            ),
            flops=Family(
                "gputui_train_flops_per_second",
                GAUGE,
                "Model FLOPs per second: the newest capture with FLOPs "
                "(attach --capture N --flops) per step, times the rate of unprofiled steps "
                "(docs/analyzer.md, MFU).",
            ),
            mfu=Family(
                "gputui_train_mfu_ratio",
                GAUGE,
                "Model FLOP utilisation: model FLOPs per second over the GPU's datasheet "
                "dense peak of the dominant dtype (absent for a GPU the datasheet table does "
                "not know).",
            ),
        )

    def add(self, job: JobSnapshot, hostname: str, cmdline: bool) -> None:
        lab = labels(
            (
                ("hostname", hostname),
                ("job_id", job.job_id),
                ("rank", str(job.rank)),
                *container_labels(job.container),
                *job_labels(job.slurm),
            )
        )
        extra: tuple[tuple[str, str], ...] = (
            ("local_rank", str(job.local_rank)),
            ("world_size", str(job.world_size)),
            ("pid", str(job.pid)),
            ("gpu", "" if job.device_index is None else str(job.device_index)),
            ("UUID", job.device_uuid or ""),
        )
        if cmdline:
            extra += (("command", " ".join(job.argv)[:MAX_COMMAND_CHARS]),)
        self.info.add(lab.extend(*extra), 1)
        self.steps.add(lab, job.steps_total)
        for phase, seconds in sorted(job.phase_seconds.items()):
            self.phases.add(lab.extend(("phase", phase)), seconds)
        for bucket, seconds in measured_seconds(job.phase_seconds).items():
            self.account.add(lab.extend(("bucket", bucket)), seconds)
        for phase, seconds in sorted(job.phase_gpu_seconds.items()):
            self.gpu_phases.add(lab.extend(("phase", phase)), seconds)
        if job.recent_step_seconds:
            for q, value in zip(
                QUANTILES, quantiles(job.recent_step_seconds, QUANTILES), strict=True
            ):
                self.duration.add(lab.extend(("quantile", str(q))), value)
        self.duration.add(lab, job.step_seconds_sum, "_sum")
        self.duration.add(lab, job.steps_total, "_count")
        self.samples.add(lab, job.samples_total)
        self.last.add(lab, job.last_step_time_s)
        if job.memory is not None:
            self.allocated.add(lab, job.memory.allocated_bytes)
            self.reserved.add(lab, job.memory.reserved_bytes)
            self.peak.add(lab, job.memory.peak_allocated_bytes)
            self.retries.add(lab, job.memory.alloc_retries)
            self.ooms.add(lab, job.memory.ooms)
        util = job.utilisation
        if util is not None and util.achieved_tflops is not None:
            self.flops.add(lab.extend(("dtype", util.dtype or "")), util.achieved_tflops * 1e12)
            if util.mfu is not None:
                self.mfu.add(lab.extend(("dtype", util.peak or "")), util.mfu)

    def families(self) -> list[Family]:
        return [getattr(self, f.name) for f in fields(self)]


def train_families(jobs: Sequence[JobSnapshot], hostname: str, cmdline: bool) -> list[Family]:
    found = _TrainFamilies.empty()
    for job in jobs:
        found.add(job, hostname, cmdline)
    return found.families()
