"""docs/json.md: its tables are whole tables, and the ``attach --once --json``
table names every key the document has."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gputui import cli

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "json.md"


def test_every_table_row_belongs_to_a_table() -> None:
    """A row is under a table's header and the rows above it, never after a
    paragraph (rows left there read as part of the wrong section)."""
    lines = DOC.read_text().splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("|"):
            continue
        header = i + 1 < len(lines) and lines[i + 1].startswith("| ---")
        assert header or lines[i - 1].startswith("|"), f"docs/json.md:{i + 1}: {line[:60]}"


def _section_keys(title: str) -> set[str]:
    text = DOC.read_text()
    start = text.index(f"# {title}\n")
    end = text.index("\n# ", start + 1)
    keys: set[str] = set()
    for row in re.findall(r"^\| (.+?) \|", text[start:end], flags=re.M):
        keys.update(re.findall(r"`([a-z_]+)`", row))
    return keys


def test_attach_once_json_keys_are_documented(capsys: pytest.CaptureFixture[str]) -> None:
    documented = _section_keys("`gputui attach ... --once --json`")
    ranks = REPO / "tests" / "samples" / "attach-ranks-v2.jsonl.gz"
    for args in (["--demo"], ["--replay", str(ranks)]):
        assert cli.main(["attach", *args, "--once", "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert set(doc) - documented == set(), args
