"""The CI entry point is a shell script that parses and ends in ``make test``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

RUN = Path(__file__).resolve().parents[2] / ".ci" / "run"


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash here")
def test_ci_run_parses_and_runs_the_suite() -> None:
    check = subprocess.run(["bash", "-n", str(RUN)], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stderr
    code = [
        line.strip()
        for line in RUN.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert code[-1] == "make test"
    assert "set -euo pipefail" in code
