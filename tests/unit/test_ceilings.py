"""gputui.ceilings without a GPU: the timing rules with a scripted clock, the
probes' torch code on the CPU, the cache's files and the loader the monitor uses."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gputui.ceilings import cache, measured, probes, runner, timing
from gputui.ceilings.datasheet import (
    A10,
    A100_SXM_80,
    H100_PCIE,
    H100_SXM,
    L4,
    L40S,
    T4,
    V100_PCIE,
    V100_SXM2,
    datasheet_for,
)
from gputui.errors import GputuiError
from tests.helpers.deadlines import RUN_S

UUID = "GPU-3f2c6d8e-1a2b-4c5d-8e9f-0123456789ab"


class ScriptedClock:
    """Device times from a list; counts the runs it was asked for."""

    def __init__(self, times_ms: list[float]) -> None:
        self.times = list(times_ms)
        self.calls: list[int] = []

    def time_ms(self, run: Callable[[], object], inner: int) -> float:
        self.calls.append(inner)
        return self.times.pop(0) if len(self.times) > 1 else self.times[0]


class FakeNow:
    def __init__(self, step: float) -> None:
        self.t = 0.0
        self.step = step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


def test_measure_batches_warms_up_and_takes_the_median() -> None:
    plan = timing.Plan(warmup_s=0.15, target_rep_ms=10.0, reps=5, min_reps=3, max_s=100.0)
    # first single run 2 ms -> 5 runs per repetition; 2 warm-ups; then 5 timed
    clock = ScriptedClock([2.0, 90.0, 80.0, 10.0, 30.0, 20.0, 11.0, 12.0])
    result = timing.measure(lambda: None, clock, plan, now=FakeNow(0.1))
    assert clock.calls == [1, 5, 5, 5, 5, 5, 5, 5]
    assert result.inner == 5 and result.warmup_reps == 2
    assert result.samples_ms == (10.0, 30.0, 20.0, 11.0, 12.0)
    assert result.median_ms == 12.0
    assert result.per_run_median_s == pytest.approx(12.0 / 1000 / 5)
    value, worst, best = timing.rate(1e9, result, 1e9)  # 1 GB per run
    assert (value, worst, best) == pytest.approx((1 / 0.0024, 1 / 0.006, 1 / 0.002))


def test_measure_stops_at_its_budget_after_the_minimum() -> None:
    plan = timing.Plan(warmup_s=0.0, target_rep_ms=1.0, reps=50, min_reps=3, max_s=1.0)
    clock = ScriptedClock([5.0])
    result = timing.measure(lambda: None, clock, plan, now=FakeNow(0.5))
    assert len(result.samples_ms) == 3  # the budget is gone, but three are needed
    assert result.inner == 1


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan")])
def test_measure_refuses_impossible_times(bad: float) -> None:
    plan = timing.Plan(warmup_s=0.0, target_rep_ms=1.0, reps=3, min_reps=1, max_s=1.0)
    with pytest.raises(timing.MeasureError):
        timing.measure(lambda: None, ScriptedClock([1.0, bad]), plan, now=FakeNow(0.01))


def test_full_and_quick_plans_fit_the_time_budget() -> None:
    # worst case per measurement: its cap, plus one repetition started just before
    for plan, limit in ((timing.FULL, 60.0), (timing.QUICK, 20.0)):
        worst = len(probes.PROBES) * (plan.max_s + plan.target_rep_ms / 1000)
        assert worst < limit
        assert plan.reps * plan.target_rep_ms / 1000 + plan.warmup_s <= plan.max_s


def test_fit_sizes_leaves_memory_to_others() -> None:
    assert probes.fit_sizes(probes.FULL_SIZES, None) == probes.FULL_SIZES
    assert probes.fit_sizes(probes.FULL_SIZES, 80 << 30) == probes.FULL_SIZES
    small = probes.fit_sizes(probes.FULL_SIZES, 1 << 30)  # 1 GiB free
    assert 2 * small.copy_bytes <= 512 << 20
    assert 3 * small.matmul_n**2 * 4 <= 512 << 20
    assert small.pcie_bytes <= 256 << 20
    tiny = probes.fit_sizes(probes.FULL_SIZES, 0)
    assert tiny.copy_bytes >= 16 << 20 and tiny.matmul_n >= 1024  # floors, not zero


def _torch() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torch
    return torch


TINY = probes.Sizes(copy_bytes=1 << 16, matmul_n=32, pcie_bytes=1 << 16)
TINY_PLAN = timing.Plan(warmup_s=0.0, target_rep_ms=0.5, reps=3, min_reps=2, max_s=0.2)


def test_probes_run_on_the_cpu() -> None:
    torch = _torch()
    seen: list[str] = []
    results = runner.run_probes(
        torch, "cpu", TINY, TINY_PLAN, timing.WallClock(), progress=seen.append
    )
    assert [m.key for m in results] == list(probes.PROBES)
    assert seen == [measured.MEASUREMENTS[k][0] for k in probes.PROBES]
    by = {m.key: m for m in results}
    fp8 = by.pop(measured.MATMUL_FP8)
    assert fp8.value is None and fp8.error.startswith("not supported: ")  # type: ignore[union-attr]
    for m in by.values():
        assert m.error is None, m
        assert m.value is not None and m.value > 0 and m.repetitions >= 2
        assert m.worst is not None and m.best is not None
    assert by[measured.LAUNCH].worst >= by[measured.LAUNCH].best  # type: ignore[operator]
    assert by[measured.HBM_COPY].worst <= by[measured.HBM_COPY].best  # type: ignore[operator]


def test_fp32_precision_is_put_back() -> None:
    torch = _torch()
    matmul = torch.backends.cuda.matmul
    attr = "fp32_precision" if hasattr(matmul, "fp32_precision") else "allow_tf32"
    before = getattr(matmul, attr)
    with probes.fp32_matmul_precision(torch, tf32=True):
        assert getattr(matmul, attr) in ("tf32", True)
    assert getattr(matmul, attr) == before
    with pytest.raises(RuntimeError), probes.fp32_matmul_precision(torch, tf32=False):
        assert getattr(matmul, attr) in ("ieee", False)
        raise RuntimeError("a failing probe")
    assert getattr(matmul, attr) == before


def test_a_failing_probe_is_one_error_line_and_the_others_go_on() -> None:
    torch = _torch()

    def broken(torch: Any, device: str, sizes: probes.Sizes) -> probes.Probe:
        raise RuntimeError("CUDA out of memory.\nTried to allocate 2.00 GiB")

    failed = runner.measure_probe(
        measured.HBM_COPY, torch, "cpu", TINY, TINY_PLAN, timing.WallClock(), factory=broken
    )
    assert failed.value is None
    assert failed.error == "failed: RuntimeError: CUDA out of memory."

    zero = runner.run_probes(
        torch, "cpu", TINY, TINY_PLAN, ScriptedClock([0.0]), keys=(measured.LAUNCH,)
    )
    assert zero[0].error == "failed: the device clock gave 0.0 ms"
    late = runner.run_probes(
        torch,
        "cpu",
        TINY,
        TINY_PLAN,
        timing.WallClock(),
        keys=(measured.LAUNCH,),
        deadline_s=-1.0,
    )
    assert late[0].error == "skipped: past the -1 s budget"


def _measurements() -> list[measured.Measurement]:
    return [
        measured.Measurement(measured.HBM_COPY, 2950.0, 2900.0, 2960.0, 15, "1.00GiB copy x20"),
        measured.Measurement(measured.MATMUL_BF16, 780.0, 770.0, 790.0, 15, "8192^3 bf16 x36"),
        measured.Measurement(measured.MATMUL_FP32, 51.0, 50.0, 52.0, 15, "8192^3 fp32 x3"),
        measured.Measurement(measured.MATMUL_FP8, None, None, None, 0, "", "not supported: why"),
        measured.Measurement(measured.H2D_PINNED, 55.0, 54.0, 56.0, 15, "256MiB pinned x4"),
        measured.Measurement(measured.LAUNCH, 4.5, 5.0, 4.2, 15, "1-element add_ x9000"),
    ]


def _document(name: str = "NVIDIA H100 80GB HBM3", uuid: str = UUID) -> dict[str, Any]:
    gpu = {"index": 0, "name": name, "uuid": uuid, "compute_capability": "9.0"}
    software = {"torch": "2.11.0+cu130", "cuda": "13.0", "driver": "580.159.04"}
    return runner.document(_measurements(), gpu, software, quick=False, elapsed_s=18.25)


def test_document_shape() -> None:
    doc = _document()
    assert json.loads(json.dumps(doc)) == doc  # plain JSON
    assert set(doc) == {
        "gpu", "software", "measured_at", "quick", "elapsed_s", "measurements", "datasheet",
        "ceilings",
    }  # fmt: skip
    hbm = doc["measurements"][0]
    assert hbm == {
        "key": "hbm_copy",
        "label": "HBM copy, read+write",
        "unit": "GB/s",
        "value": 2950.0,
        "worst": 2900.0,
        "best": 2960.0,
        "repetitions": 15,
        "size": "1.00GiB copy x20",
        "error": None,
        "datasheet": 3350.0,
        "pct_of_datasheet": 88.1,
    }
    fp8 = doc["measurements"][3]
    assert fp8["value"] is None and fp8["datasheet"] == 1979.0 and fp8["pct_of_datasheet"] is None
    assert doc["measurements"][5]["datasheet"] is None  # no datasheet launch time
    c = doc["ceilings"]
    assert (c["hbm_copy_gbps"], c["bf16_tflops"], c["fp8_tflops"], c["launch_us"]) == (
        2950.0, 780.0, None, 4.5,
    )  # fmt: skip
    assert c["gpu_uuid"] == UUID and c["driver_version"] == "580.159.04"
    assert doc["datasheet"]["model"] == "H100 SXM5 80GB"
    assert _document(name="Some Future GPU")["datasheet"] is None


def test_cache_round_trip_and_permissions(tmp_path: Path) -> None:
    folder = tmp_path / "cache" / "gputui" / "ceilings"
    path = cache.save(_document(), UUID, folder)
    assert path.name == f"{UUID}.json"
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    loaded = cache.load_ceilings(UUID, folder)
    assert loaded is not None and loaded.bf16_tflops == 780.0 and loaded.tf32_tflops is None
    # torch's spelling of the same UUID (no prefix, any case) finds it too
    assert cache.load_ceilings(UUID[4:].upper(), folder) == loaded
    roof = loaded.roof()
    assert roof is not None and roof.bandwidth_gbps == 2950.0 and roof.tflops("bf16") == 780.0
    assert roof.source == "measured" and roof.label == f"measured {loaded.measured_at[:10]}"
    assert [p for p, _doc in cache.cached_documents(folder)] == [path]
    assert not list(folder.glob(".*"))  # no temporary file left


def test_cache_dir_follows_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_dir() == tmp_path / "gputui" / "ceilings"
    cache.save(_document(), UUID)
    assert cache.load_ceilings(UUID) is not None


@pytest.mark.parametrize(
    "damage",
    ["garbage", "truncated", "other_uuid", "bad_field", "group_writable", "symlink", "huge"],
)
def test_unusable_files_load_as_none(tmp_path: Path, damage: str) -> None:
    folder = tmp_path / "c"
    path = cache.save(_document(), UUID, folder)
    text = path.read_text()
    if damage == "garbage":
        path.write_text("not json {")
    elif damage == "truncated":
        path.write_text(text[: len(text) // 2])
    elif damage == "other_uuid":
        data = json.loads(text)
        data["ceilings"]["gpu_uuid"] = "GPU-00000000-0000-0000-0000-000000000000"
        path.write_text(json.dumps(data))
    elif damage == "bad_field":
        data = json.loads(text)
        data["ceilings"]["bf16_tflops"] = "fast"
        path.write_text(json.dumps(data))
    elif damage == "group_writable":
        os.chmod(path, 0o664)
    elif damage == "symlink":
        real = tmp_path / "elsewhere.json"
        real.write_text(text)
        os.chmod(real, 0o600)
        path.unlink()
        path.symlink_to(real)
    elif damage == "huge":
        path.write_text(text + " " * cache.MAX_BYTES)
    assert cache.load_ceilings(UUID, folder) is None
    assert cache.cached_documents(folder) == []


@pytest.mark.parametrize("uuid", ["", "../../etc/passwd", "GPU-../x", None, "GPU-1234"])
def test_not_a_uuid(tmp_path: Path, uuid: Any) -> None:
    assert cache.load_ceilings(uuid, tmp_path) is None
    with pytest.raises(GputuiError):
        cache.save(_document(), uuid, tmp_path)


def test_save_refuses_a_directory_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "c").write_text("")
    with pytest.raises((GputuiError, OSError)):
        cache.save(_document(), UUID, tmp_path / "c")


def test_normalize_uuid() -> None:
    assert cache.normalize_uuid("GPU-" + UUID[4:].upper()) == UUID
    assert cache.normalize_uuid(UUID[4:]) == UUID
    mig = "MIG-3f2c6d8e-1a2b-4c5d-8e9f-0123456789ab"
    assert cache.normalize_uuid(mig) == mig


def test_ceilings_from_dict_rejects_wrong_types() -> None:
    good = _document()["ceilings"]
    assert measured.Ceilings.from_dict(good) is not None
    for field, value in [
        ("hbm_copy_gbps", True),
        ("hbm_copy_gbps", -1.0),
        ("hbm_copy_gbps", float("inf")),
        ("quick", "no"),
        ("gpu_name", ""),
        ("torch_version", 2),
    ]:
        assert measured.Ceilings.from_dict({**good, field: value}) is None, field
    assert measured.Ceilings.from_dict([]) is None


def test_datasheets() -> None:
    assert datasheet_for("NVIDIA H100 80GB HBM3") is H100_SXM
    assert datasheet_for("NVIDIA H100 PCIe") is H100_PCIE
    assert datasheet_for("NVIDIA A100-SXM4-80GB") is A100_SXM_80
    assert datasheet_for("NVIDIA H100 NVL") is None  # other clocks: no wrong figures
    assert datasheet_for("NVIDIA GeForce RTX 4090") is None
    assert datasheet_for(None) is None
    # the cloud's inference and older training GPUs, by the names NVML gives them
    assert datasheet_for("Tesla T4") is T4
    assert datasheet_for("NVIDIA A10") is A10
    assert datasheet_for("NVIDIA L4") is L4 and datasheet_for("NVIDIA L40S") is L40S
    assert datasheet_for("Tesla V100-SXM2-32GB") is V100_SXM2
    assert datasheet_for("Tesla V100-PCIE-16GB") is V100_PCIE
    # other clocks than the sheet's: no figures rather than wrong ones
    for name in ("NVIDIA A10G", "NVIDIA L40", "Tesla V100S-PCIE-32GB", "Tesla V100-FHHL-16GB"):
        assert datasheet_for(name) is None, name
    # before sm 8.0: fp16 tensor cores, no TF32 or bf16 peak to measure against
    t4 = T4.roof()
    assert (t4.tflops("fp16"), t4.tflops("fp32")) == (65.0, 8.1)
    assert t4.tflops("tf32") is None and t4.tflops("bf16") is None
    assert L4.roof().tflops("fp8") == 242.5
    roof = H100_SXM.roof()
    # the seeds' balance point: 990 TFLOP/s over 3,350 GB/s, ~295 FLOP/byte
    assert roof.balance_flop_per_byte("bf16") == pytest.approx(295.4, abs=0.1)
    assert A100_SXM_80.roof().tflops("fp8") is None


def test_loader_needs_no_torch(tmp_path: Path) -> None:
    cache.save(_document(), UUID, tmp_path)
    code = (
        "import sys; from pathlib import Path; from gputui.ceilings import load_ceilings; "
        f"c = load_ceilings({UUID!r}, Path({str(tmp_path)!r})); "
        "print(c.bf16_tflops, [m for m in ('torch', 'textual', 'rich') if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=RUN_S, check=True
    )
    assert out.stdout.split() == ["780.0", "[]"]


class _Props:
    def __init__(self, uuid: object) -> None:
        self.name = "NVIDIA H100 80GB HBM3"
        self.uuid = uuid
        self.major, self.minor = 9, 0
        self.total_memory = 85017493504
        self.multi_processor_count = 132


class _RawUuid:
    """torch's _CUuuid when its text is not the usual 8-4-4-4-12 form."""

    bytes = bytes.fromhex(UUID[4:].replace("-", ""))

    def __str__(self) -> str:
        return "<uuid>"


@pytest.mark.parametrize("raw", [UUID[4:], UUID, _RawUuid()])
def test_gpu_identity_speaks_nvmls_uuid(raw: object) -> None:
    fake = type("T", (), {})()
    fake.cuda = type("C", (), {"get_device_properties": staticmethod(lambda i: _Props(raw))})
    ident = runner.gpu_identity(fake, 0)
    assert ident == {
        "index": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": UUID,
        "compute_capability": "9.0",
        "memory_bytes": 85017493504,
        "sm_count": 132,
    }


def test_gpu_identity_without_uuid_is_an_error() -> None:
    fake = type("T", (), {})()
    fake.cuda = type("C", (), {"get_device_properties": staticmethod(lambda i: _Props(None))})
    with pytest.raises(GputuiError, match="no usable UUID"):
        runner.gpu_identity(fake, 0)
