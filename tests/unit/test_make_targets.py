"""The Makefile's benchmark target calls each script with flags it accepts."""

from __future__ import annotations

import os
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


# -- make run ARGS="..." -----------------------------------------------------------------------
def run_line() -> list[str]:
    """The run target's command after the gputui executable, ``$(ARGS)`` last."""
    text = (REPO / "Makefile").read_text()
    recipe = text.split("\nrun:", 1)[1].split("\n\n", 1)[0]
    (line,) = [m.group(1) for m in re.finditer(r"^\t(.*)$", recipe, re.MULTILINE)]
    words = shlex.split(line)
    assert words[0].endswith("bin/gputui") and words[-1] == "$(ARGS)", line
    return words[1:-1]


def readme_args() -> list[str]:
    """Every ``make run ARGS="..."`` the README shows."""
    return re.findall(r'make run ARGS="([^"]*)"', (REPO / "README.md").read_text())


def make_run(args: str) -> subprocess.CompletedProcess[str]:
    """``make run ARGS=args`` without make: the recipe's command through gputui's entry."""
    return subprocess.run(
        [sys.executable, "-m", "gputui", *run_line(), *shlex.split(args)],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "100"},
    )


def test_the_readme_shows_make_run_with_a_sub_command() -> None:
    assert any(args.split()[0] == "attach" for args in readme_args())


@pytest.mark.parametrize(
    "args",
    [
        *readme_args(),
        "",
        "ls",
        "--once",
        "--once --json",
        "--demo --once",
        "--replay tests/samples/monitor-v1.jsonl.gz --once",
        "attach --demo --once",
        "--ascii attach --demo --once",
        "attach --replay tests/samples/attach-v1.jsonl.gz --once",
        "analyze tests/data/traces/healthy.pt.trace.json.gz",
        "record -o /dev/null --demo --duration 2 --quiet",
        "bench --help",
    ],
)
def test_any_args_go_through_make_run(args: str) -> None:
    """Whatever ARGS holds is read as if typed after ``gputui``: it runs, or (a live
    screen, here without a terminal) says that it needs one."""
    proc = make_run(args)
    if proc.returncode != 0:
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert "the live screen needs a terminal" in proc.stderr, proc.stderr
        assert proc.stderr.count("\n") == 1


# -- make test-torch TORCH_PY=... ----------------------------------------------------------------
def test_the_torch_target_names_test_files_that_exist() -> None:
    """``make test-torch`` runs TORCH_TESTS under another torch: every file it
    names exists, and the torch.compile and hook tests are among them."""
    proc = subprocess.run(
        ["make", "-n", "test-torch", "TORCH_PY=python-of-another-torch"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=RUN_S,
    )
    assert proc.returncode == 0, proc.stderr
    files = [w for w in proc.stdout.split() if w.startswith("tests/")]
    assert all((REPO / f).is_file() for f in files), files
    assert "tests/integration/test_hook_compile.py" in files
    assert "tests/integration/test_hook.py" in files and "python-of-another-torch" in proc.stdout
