"""``gputui bench`` on a machine without a GPU: its one-line errors, its JSON and
table output and its cache, with the measuring step replaced by recorded values."""

from __future__ import annotations

import ast
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gputui.ceilings import measured, runner
from gputui.cli import main
from gputui.commands import bench
from tests.helpers.deadlines import RUN_S

PACKAGE = Path(__file__).resolve().parents[2] / "gputui"
UUID = "GPU-3f2c6d8e-1a2b-4c5d-8e9f-0123456789ab"


def _doc(name: str = "NVIDIA H100 80GB HBM3", fail_all: bool = False) -> dict[str, Any]:
    if fail_all:
        ms = [
            measured.Measurement(k, None, None, None, 0, "", "failed: boom")
            for k in measured.MEASUREMENTS
        ]
    else:
        ms = [
            measured.Measurement(measured.HBM_COPY, 2950.0, 2900.0, 2960.0, 15, "1.00GiB copy x20"),
            measured.Measurement(measured.MATMUL_BF16, 781.2, 770.0, 790.0, 15, "8192^3 bf16 x36"),
            measured.Measurement(
                measured.MATMUL_FP8, None, None, None, 0, "", "not supported: why"
            ),
            measured.Measurement(measured.LAUNCH, 4.5, 5.0, 4.2, 12, "1-element add_ x9000"),
        ]
    gpu = {"index": 0, "name": name, "uuid": UUID, "compute_capability": "9.0"}
    sw = {"torch": "2.11.0+cu130", "cuda": "13.0", "driver": "580.159.04"}
    return runner.document(ms, gpu, sw, quick=False, elapsed_s=17.5)


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "gputui" / "ceilings"


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=RUN_S
    )


def test_without_torch_one_line_and_status_2() -> None:
    proc = _run(
        "import sys; sys.modules['torch'] = None\n"
        "from gputui.cli import main; sys.exit(main(['bench']))"
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gputui bench: needs PyTorch")


def test_without_cuda_one_line_and_status_2() -> None:
    # this machine's torch is a CPU build
    proc = _run("import sys; from gputui.cli import main; sys.exit(main(['bench', '--quick']))")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "sees no CUDA GPU" in lines[0], proc.stderr


def test_bad_device_argument(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--device", "x"]) == 2
    assert "not a GPU index" in capsys.readouterr().err


def test_json_output_and_cache(
    cache_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _doc()
    monkeypatch.setattr(bench, "measure", lambda args: doc)
    assert main(["bench", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    saved = cache_home / f"{UUID}.json"
    assert out["saved_to"] == str(saved)
    assert out["measurements"] == doc["measurements"]
    assert stat.S_IMODE(os.stat(saved).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(cache_home).st_mode) == 0o700
    from gputui.ceilings import load_ceilings

    loaded = load_ceilings(UUID)
    assert loaded is not None and loaded.bf16_tflops == 781.2 and loaded.fp8_tflops is None


def test_no_cache_writes_nothing(
    cache_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bench, "measure", lambda args: _doc())
    assert main(["bench", "--no-cache"]) == 0
    out = capsys.readouterr().out
    assert "saved to" not in out
    assert not cache_home.exists()


def test_table(
    cache_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bench, "measure", lambda args: _doc())
    assert main(["bench"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= 80 for line in lines[:-1])  # the saved-to path may be long
    row = next(line for line in lines if line.startswith("HBM copy"))
    assert row.split() == [
        "HBM",
        "copy,",
        "read+write",
        "2,950",
        "GB/s",
        "2,900-2,960",
        "3,350",
        "88%",
    ]
    bf16 = next(line for line in lines if line.startswith("matmul bf16"))
    assert "781 TFLOP/s" in bf16 and "990" in bf16 and "79%" in bf16
    assert any("not supported: why" in line for line in lines)
    assert any(line.startswith("datasheet: H100 SXM5 80GB") for line in lines)
    assert "medians of 12-15 repetitions after warm-up" in "\n".join(lines)
    assert lines[-1] == f"saved to {cache_home / (UUID + '.json')}"


def test_untrusted_text_is_cleaned(
    cache_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bench, "measure", lambda args: _doc(name="GPU\x1b[2J\x07 evil"))
    assert main(["bench", "--no-cache"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "GPU\\x1b[2J\\x07 evil" in out


def test_every_measurement_failed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], cache_home: Path
) -> None:
    monkeypatch.setattr(bench, "measure", lambda args: _doc(fail_all=True))
    assert main(["bench"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["gputui bench: every measurement failed (failed: boom)"]
    assert not cache_home.exists()


def test_cached(
    cache_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "--cached"]) == 0
    assert "no saved results" in capsys.readouterr().err
    monkeypatch.setattr(bench, "measure", lambda args: _doc())
    assert main(["bench", "--json"]) == 0
    capsys.readouterr()
    assert main(["bench", "--cached"]) == 0
    assert "matmul bf16" in capsys.readouterr().out
    assert main(["bench", "--cached", "--json"]) == 0
    docs = json.loads(capsys.readouterr().out)
    assert [d["gpu"]["uuid"] for d in docs] == [UUID]


def test_cached_needs_no_torch(cache_home: Path) -> None:
    proc = _run(
        "import sys; sys.modules['torch'] = None\n"
        "from gputui.cli import main; rc = main(['bench', '--cached'])\n"
        "print([m for m in ('textual', 'rich') if m in sys.modules]); sys.exit(rc)"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize(
    "module",
    [
        "trace/op_costs.py",
        "trace/op_rows.py",
        "analysis/roofline.py",
    ],
)
def test_roofline_modules_are_stdlib_only_for_the_hook(module: str) -> None:
    for name in _imports(PACKAGE / module):
        top = name.split(".")[0]
        if top == "gputui":
            assert name in ("gputui.analysis", "gputui.trace") or name.startswith(
                ("gputui.analysis.", "gputui.trace.", "gputui.protocol.")
            ), name
        else:
            assert top in sys.stdlib_module_names, (module, name)


def test_ceilings_package_never_imports_torch_itself() -> None:
    for path in sorted((PACKAGE / "ceilings").glob("*.py")):
        for name in _imports(path):
            top = name.split(".")[0]
            assert top == "gputui" or top in sys.stdlib_module_names, (path, name)
