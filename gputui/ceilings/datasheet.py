"""Datasheet figures for the GPUs gputui knows, to print beside the measured
ceilings and to stand in for them when nothing was measured (stdlib only).

Tensor-core figures are dense: the H100 and H200 datasheets print them "with
sparsity", twice the dense rate a dense matrix product can reach, so they are
halved here (H100 SXM bf16: 1,979 -> 989.5 TFLOP/s), as are the L4's (TF32 120,
bf16 242, FP8 485 with sparsity); the A100, A10 and L40S datasheets print both.
Volta (V100) and Turing (T4) have fp16 tensor cores only: no TF32 or bf16
figure.  The PCIe figure is per direction: the
datasheets give both directions added up (PCIe Gen5 x16: 128 GB/s, so 64 GB/s
each way; Gen4 x16: 64 GB/s, 32 each way; Gen3 x16: 32 GB/s, 16 each way).
The memory bandwidth is the HBM's, or the GDDR6's on the A10, L4, L40S and T4.
"""

from __future__ import annotations

import re

from gputui.analysis.roof import DATASHEET, Roof
from gputui.protocol.value import ValueBase, value_class


@value_class
class Datasheet(ValueBase):
    model: str
    fp32_tflops: float
    tf32_tflops: float | None  #: None: no TF32 tensor cores (before sm 8.0)
    bf16_tflops: float | None  #: None: no bf16 tensor cores (before sm 8.0)
    fp16_tflops: float
    fp8_tflops: float | None  #: None: no FP8 tensor cores
    hbm_gbps: float
    pcie_gbps_per_direction: float
    source: str

    def roof(self) -> Roof:
        families = (
            ("fp32", self.fp32_tflops),
            ("tf32", self.tf32_tflops),
            ("bf16", self.bf16_tflops),
            ("fp16", self.fp16_tflops),
            ("fp8", self.fp8_tflops),
        )
        compute = tuple((name, tflops) for name, tflops in families if tflops is not None)
        return Roof(self.hbm_gbps, compute, DATASHEET, f"{self.model} datasheet")


_H100 = "NVIDIA H100 datasheet, nvidia.com/en-us/data-center/h100"
_H200 = "NVIDIA H200 datasheet, nvidia.com/en-us/data-center/h200"
_A100 = "NVIDIA A100 datasheet, nvidia.com/en-us/data-center/a100"

H100_SXM = Datasheet("H100 SXM5 80GB", 67.0, 494.5, 989.5, 989.5, 1979.0, 3350.0, 64.0, _H100)
H100_PCIE = Datasheet("H100 PCIe 80GB", 51.0, 378.0, 756.5, 756.5, 1513.0, 2000.0, 64.0, _H100)
H200_SXM = Datasheet("H200 SXM 141GB", 67.0, 494.5, 989.5, 989.5, 1979.0, 4800.0, 64.0, _H200)
A100_SXM_80 = Datasheet("A100 SXM4 80GB", 19.5, 156.0, 312.0, 312.0, None, 2039.0, 32.0, _A100)
A100_SXM_40 = Datasheet("A100 SXM4 40GB", 19.5, 156.0, 312.0, 312.0, None, 1555.0, 32.0, _A100)
A100_PCIE_80 = Datasheet("A100 PCIe 80GB", 19.5, 156.0, 312.0, 312.0, None, 1935.0, 32.0, _A100)
A100_PCIE_40 = Datasheet("A100 PCIe 40GB", 19.5, 156.0, 312.0, 312.0, None, 1555.0, 32.0, _A100)
_A10 = "NVIDIA A10 datasheet, nvidia.com/en-us/data-center/products/a10-gpu"
_L4 = "NVIDIA L4 datasheet, nvidia.com/en-us/data-center/l4"
_L40S = "NVIDIA L40S datasheet, nvidia.com/en-us/data-center/l40s"
_T4 = "NVIDIA T4 datasheet, nvidia.com/en-us/data-center/tesla-t4"
_V100 = "NVIDIA V100 datasheet, nvidia.com/en-us/data-center/v100"
A10 = Datasheet("A10 24GB", 31.2, 62.5, 125.0, 125.0, None, 600.0, 32.0, _A10)
L4 = Datasheet("L4 24GB", 30.3, 60.0, 121.0, 121.0, 242.5, 300.0, 32.0, _L4)
L40S = Datasheet("L40S 48GB", 91.6, 183.0, 362.05, 362.05, 733.0, 864.0, 32.0, _L40S)
T4 = Datasheet("T4 16GB", 8.1, None, None, 65.0, None, 320.0, 16.0, _T4)
V100_SXM2 = Datasheet("V100 SXM2", 15.7, None, None, 125.0, None, 900.0, 16.0, _V100)
V100_PCIE = Datasheet("V100 PCIe", 14.0, None, None, 112.0, None, 900.0, 16.0, _V100)

#: (pattern on the name NVML and torch report, sheet); the first match wins, so a
#: variant (PCIe, NVL) is tried before its family.  NVL parts have other clocks
#: and memory: no figures rather than wrong ones.
_TABLE: tuple[tuple[re.Pattern[str], Datasheet | None], ...] = (
    (re.compile(r"\bH100\b.*\bNVL\b"), None),
    (re.compile(r"\bH100\b.*\bPCIe\b", re.I), H100_PCIE),
    (re.compile(r"\bH100\b.*\b(SXM|HBM3)\b", re.I), H100_SXM),
    (re.compile(r"\bH200\b.*\bNVL\b"), None),
    (re.compile(r"\bH200\b"), H200_SXM),
    (re.compile(r"\bA100\b.*\bPCIe\b.*80GB|\bA100\b.*80GB.*\bPCIe\b", re.I), A100_PCIE_80),
    (re.compile(r"\bA100\b.*\bPCIe\b", re.I), A100_PCIE_40),
    (re.compile(r"\bA100\b.*80GB", re.I), A100_SXM_80),
    (re.compile(r"\bA100\b.*40GB", re.I), A100_SXM_40),
    # A10G (AWS) and A10M have other clocks: not the A10's figures
    (re.compile(r"\bA10\b"), A10),
    (re.compile(r"\bL40S\b"), L40S),
    (re.compile(r"\bL4\b"), L4),
    (re.compile(r"\bT4\b"), T4),
    # V100S and the 150 W single-slot V100 have other clocks
    (re.compile(r"\bV100S\b|\bV100\b.*FHHL", re.I), None),
    (re.compile(r"\bV100\b.*\bSXM2\b", re.I), V100_SXM2),
    (re.compile(r"\bV100\b.*\bPCIE\b", re.I), V100_PCIE),
)


def datasheet_for(gpu_name: str | None) -> Datasheet | None:
    """The datasheet of a GPU by the name NVML/torch report ("NVIDIA H100 80GB
    HBM3"), or None for a GPU not in the table."""
    if not gpu_name:
        return None
    for pattern, sheet in _TABLE:
        if pattern.search(gpu_name):
            return sheet
    return None
