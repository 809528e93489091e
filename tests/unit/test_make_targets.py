"""The Makefile's benchmark target calls each script with flags it accepts."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.deadlines import RUN_S

REPO = Path(__file__).resolve().parents[2]

#: parse the arguments as the script would, then stop before any work
PARSE_ONLY = """
import argparse, runpy, sys
real = argparse.ArgumentParser.parse_args
def parse(self, *args, **kwargs):
    real(self, *args, **kwargs)
    raise SystemExit(0)
argparse.ArgumentParser.parse_args = parse
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def bench_commands() -> list[list[str]]:
    text = (REPO / "Makefile").read_text()
    recipe = text.split("\nbench:", 1)[1].split("\n\n", 1)[0]
    return [
        shlex.split(m.group(1))
        for m in re.finditer(r"^\t\$\(PY\) (bench/\S+\.py.*)$", recipe, re.MULTILINE)
    ]


def test_the_bench_target_runs_scripts() -> None:
    assert len(bench_commands()) >= 3


@pytest.mark.parametrize("command", bench_commands(), ids=lambda c: " ".join(c))
def test_each_bench_command_parses(command: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", PARSE_ONLY, *command],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=RUN_S,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
