"""The package's layering, checked on the source and in a fresh interpreter."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "gputui"


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


#: the analysis modules the hook may import inside a job: pure, stdlib only
HOOK_ANALYSIS = (
    "gputui.analysis.kernels",
    "gputui.analysis.timeline",
    "gputui.analysis.trace_metrics",
    "gputui.analysis.step_breakdown",
)


def modules_under(*parts: str) -> list[Path]:
    return sorted(PACKAGE.joinpath(*parts).rglob("*.py"))


def top(name: str) -> str:
    return name.split(".")[0]


def test_only_tui_imports_textual() -> None:
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in modules_under()
        if "tui" not in path.relative_to(PACKAGE).parts[:1]
        and any(top(m) == "textual" for m in imported_modules(path))
    ]
    assert offenders == []


@pytest.mark.parametrize("layer", ["hook", "protocol"])
def test_hook_and_protocol_import_only_stdlib_torch_and_protocol(layer: str) -> None:
    allowed_third_party = {"torch"}
    for path in modules_under(layer):
        for name in imported_modules(path):
            if name == "gputui":
                # only for __version__: the package's __init__ imports nothing
                assert imported_modules(PACKAGE / "__init__.py") == set()
            elif top(name) == "gputui":
                assert name.startswith(("gputui.protocol", "gputui.hook", *HOOK_ANALYSIS)), (
                    path,
                    name,
                )
            elif top(name) not in sys.stdlib_module_names:
                assert top(name) in allowed_third_party, (path, name)


def test_analysis_the_hook_imports_is_stdlib_only() -> None:
    """What the hook loads from analysis/ must load in any job's interpreter."""
    for module in HOOK_ANALYSIS:
        path = PACKAGE / (module.removeprefix("gputui.").replace(".", "/") + ".py")
        for name in imported_modules(path):
            if top(name) == "gputui":
                assert name.startswith(("gputui.protocol", *HOOK_ANALYSIS)), (path, name)
            else:
                assert top(name) in sys.stdlib_module_names, (path, name)


def test_collection_and_analysis_never_import_the_ui() -> None:
    for layer in ("collectors", "analysis", "protocol", "hook"):
        for path in modules_under(layer):
            assert not any(m.startswith("gputui.tui") for m in imported_modules(path)), path


def test_once_path_does_not_load_textual() -> None:
    code = (
        "import sys; from gputui.cli import main; "
        "rc = main(['--demo', '--once']); "
        "bad = [m for m in ('textual', 'torch') if m in sys.modules]; "
        "print('LOADED', bad); sys.exit(rc)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "LOADED []" in proc.stdout
