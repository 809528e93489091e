"""The README's printed samples are what the commands print now (80 columns)."""

from __future__ import annotations

import re
import shlex
import time
from pathlib import Path

import pytest

from gputui import cli

REPO = Path(__file__).resolve().parents[2]
SAMPLE = re.compile(r"^```text\n\$ gputui (.*?)\n(.*?)^```$", re.M | re.S)


def samples() -> list[tuple[str, str]]:
    return SAMPLE.findall((REPO / "README.md").read_text())


def test_the_readme_has_the_printed_samples() -> None:
    commands = [command for command, _ in samples()]
    assert "--demo --once" in commands
    assert any(c.startswith("analyze") and "dataloader" in c for c in commands)
    assert any(c.startswith("analyze") and "flops" in c for c in commands)


@pytest.mark.parametrize(("command", "shown"), samples(), ids=[c for c, _ in samples()])
def test_a_readme_sample_is_the_real_output(
    command: str, shown: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each part of a sample between "..." lines is a run of the real output's
    lines, in order."""
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        assert cli.main(shlex.split(command)) == 0
    finally:
        monkeypatch.undo()
        time.tzset()
    out = capsys.readouterr().out.splitlines()
    at = 0
    for part in re.split(r"^\.\.\.\n", shown, flags=re.M):
        lines = part.splitlines()
        if not lines:
            continue
        starts = [i for i in range(at, len(out)) if out[i : i + len(lines)] == lines]
        assert starts, f"not in the output of gputui {command}:\n" + "\n".join(lines[:5])
        at = starts[0] + len(lines)
    if not shown.rstrip().endswith("..."):
        assert at == len(out), f"the sample leaves out the end of gputui {command}"
