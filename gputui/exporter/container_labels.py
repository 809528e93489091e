"""The container and Slurm job labels of per-process, training and GPU series.

dcgm-exporter's names, so that dashboards and joins built on it carry over:
``pod``, ``namespace`` and ``container`` (the Kubernetes container's name, or
the runtime's name for a container outside Kubernetes), and ``hpc_job`` (the
label of dcgm-exporter's HPC job mapping: the Slurm job id).  A process in no
container (no job) gets none of them: Prometheus reads a missing label as
empty, so its series match ``pod=""`` as before.  The values are what the
runtime, the pod and the cgroup said (escaped by the exposition, never
interpreted).
"""

from __future__ import annotations

from collections.abc import Sequence

from gputui.snapshot.model import ContainerInfo, ProcessSnapshot, SlurmJob, any_in_job

LABEL_NAMES = ("pod", "namespace", "container")
#: dcgm-exporter's label for the HPC job using a GPU
HPC_JOB = "hpc_job"


def host_pid_labels(proc: ProcessSnapshot) -> tuple[tuple[str, str], ...]:
    """gputui in a container: ``host_pid``, the host's pid NVML reported, where
    it differs from ``pid`` or is all gputui knows (no two series share a set)."""
    if proc.host_pid is None:
        return ()
    return (("host_pid", str(proc.host_pid)),)


def container_labels(info: ContainerInfo | None) -> tuple[tuple[str, str], ...]:
    if info is None:
        return ()
    pod = info.pod
    return (
        ("pod", (pod.name if pod else None) or ""),
        ("namespace", (pod.namespace if pod else None) or ""),
        ("container", info.name or ""),
    )


def job_labels(job: SlurmJob | None) -> tuple[tuple[str, str], ...]:
    """``hpc_job``: the Slurm job a process or training job runs in (the job
    array task's own id, as Slurm's prolog hands it to dcgm-exporter's mapping)."""
    if job is None:
        return ()
    return ((HPC_JOB, str(job.job_id)),)


def jobs_by_gpu(processes: Sequence[ProcessSnapshot]) -> dict[int, list[str]]:
    """GPU index -> the Slurm jobs with a process on it, in job id order (the
    ``hpc_job`` values of its series, as dcgm-exporter gives them)."""
    if not any_in_job(processes):  # the common case, found in C
        return {}
    found: dict[int, set[int]] = {}
    for proc in processes:
        if proc.slurm is not None:
            found.setdefault(proc.gpu_index, set()).add(proc.slurm.job_id)
    return {gpu: [str(j) for j in sorted(jobs)] for gpu, jobs in found.items()}
