"""The package's layering, checked on the source and in a fresh interpreter."""

from __future__ import annotations

import ast
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from tests.helpers.deadlines import RUN_S

PACKAGE = Path(__file__).resolve().parents[2] / "gputui"
#: the rooms that read the machine, files and hooks (the monitor's and the viewers' sources)
COLLECTION_ROOMS = ("nvml", "host", "recording", "client", "tracefile", "sources")


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def runtime_imports(path: Path) -> set[str]:
    """The modules ``path`` imports when it runs: those under ``if
    TYPE_CHECKING:`` load only in a type checker."""
    tree = ast.parse(path.read_text(), filename=str(path))
    checking = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If)
        and isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
        for child in node.body
        for inner in ast.walk(child)
    }
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in checking:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


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


@pytest.mark.parametrize("layer", ["hook", "trace", "protocol"])
def test_hook_trace_and_protocol_import_only_stdlib_torch_and_the_layers_below(
    layer: str,
) -> None:
    """What the hook loads must load in any job's interpreter: the hook imports
    the trace math and the protocol, the trace math the protocol, the protocol
    nothing of gputui."""
    below = {
        "hook": ("gputui.hook", "gputui.trace", "gputui.protocol"),
        "trace": ("gputui.trace", "gputui.protocol"),
        "protocol": ("gputui.protocol",),
    }[layer]
    allowed_third_party = {"torch"} if layer == "hook" else set()
    for path in modules_under(layer):
        for name in imported_modules(path):
            if name == "gputui":
                # only for __version__: the package's __init__ imports nothing
                assert imported_modules(PACKAGE / "__init__.py") == set()
            elif top(name) == "gputui":
                assert name.startswith(below), (path, name)
        # a type checker's own names (typing_extensions) never load in the job
        for name in runtime_imports(path):
            if top(name) not in sys.stdlib_module_names | {"gputui"}:
                assert top(name) in allowed_third_party, (path, name)


def test_a_type_checkers_imports_are_told_from_the_runtimes(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import os\nfrom typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import numpy\n    from rich import text\n"
        "if os.name:\n    import json\n"
    )
    assert runtime_imports(module) == {"os", "typing", "json"}
    assert imported_modules(module) == {"os", "typing", "json", "numpy", "rich"}


def test_collection_and_analysis_never_import_the_ui() -> None:
    for layer in (*COLLECTION_ROOMS, "analysis", "trace", "protocol", "hook"):
        for path in modules_under(layer):
            assert not any(m.startswith("gputui.tui") for m in imported_modules(path)), path


def test_once_path_does_not_load_textual() -> None:
    code = (
        "import sys; from gputui.cli import main; "
        "rc = main(['--demo', '--once']); "
        "bad = [m for m in ('textual', 'torch', 'rich') if m in sys.modules]; "
        "print('LOADED', bad); sys.exit(rc)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=RUN_S
    )
    assert proc.returncode == 0, proc.stderr
    assert "LOADED []" in proc.stdout


# -- structure: no import cycles, no long functions, modules of one concept ------------
#: a module is one concept, whatever its length (docs/architecture.md); past this
#: many lines it is worth a second look, and the suite says so (a warning)
REVIEW_LINES = 800
#: no function or method is longer than this (a long one is several steps: name them)
MAX_FUNCTION_LINES = 100


def module_names(package: Path) -> dict[str, Path]:
    names: dict[str, Path] = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def import_graph(package: Path) -> dict[str, set[str]]:
    """module -> modules of the package it imports, counting every import
    statement: module level, under TYPE_CHECKING, inside functions; relative ones
    resolved.  ``from a import b`` counts a.b when that is a module, else a."""
    names = module_names(package)
    graph: dict[str, set[str]] = {name: set() for name in names}
    for name, path in names.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = name.split(".")[: None if is_package else -1]
                    parts = parts[: len(parts) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    targets.append(full if full in names else base)
            for target in targets:
                while target not in names and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in names and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from . import c\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n"
    )
    assert cycles(import_graph(pkg)) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_no_import_cycles_in_the_package() -> None:
    assert cycles(import_graph(PACKAGE)) == []


def long_modules(package: Path, lines: int) -> dict[str, int]:
    return {
        str(path.relative_to(package)): n
        for path in sorted(package.rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > lines
    }


def long_functions(package: Path, lines: int) -> dict[str, int]:
    """``module:function`` -> its length, for the functions and methods over ``lines``
    (decorators not counted)."""
    found: dict[str, int] = {}
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > lines:
                    found[f"{path.relative_to(package)}:{node.name}"] = n
    return found


def test_modules_past_the_review_length_are_named() -> None:
    """Cohesion, not a cap, decides a module's size: a long one is reported, not failed."""
    for name, n in long_modules(PACKAGE, REVIEW_LINES).items():
        warnings.warn(f"{name} has {n} lines: is it still one concept?", stacklevel=1)


def test_the_length_checks_find_a_long_function_and_a_long_module(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (pkg / "a.py").write_text(
        f"class A:\n    def long(self):\n    {body.replace(chr(10), chr(10) + '    ')}"
    )
    (pkg / "b.py").write_text(f"def short():\n{body[: body.index(chr(10)) + 1]}")
    assert long_functions(pkg, MAX_FUNCTION_LINES) == {"a.py:long": MAX_FUNCTION_LINES + 1}
    assert list(long_modules(pkg, MAX_FUNCTION_LINES)) == ["a.py"]


def test_no_function_over_100_lines() -> None:
    assert long_functions(PACKAGE, MAX_FUNCTION_LINES) == {}


def test_no_module_is_loaded_by_a_name_built_at_run_time() -> None:
    """Every gputui module is imported by an import statement (lazily where it
    must be), never through importlib by a string: the import contracts and a
    reader see only statements."""
    offenders = []
    for path in modules_under():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, (ast.Attribute, ast.Name))
                and getattr(node.func, "attr", getattr(node.func, "id", ""))
                in ("import_module", "__import__")
                and node.args
                and "gputui" in ast.unparse(node.args[0])
            ):
                offenders.append(str(path.relative_to(PACKAGE)))
    assert offenders == []


def test_only_the_jobs_module_talks_to_hooks() -> None:
    """The exporter reaches hooks through one module (a small, listed surface)."""
    for path in [*modules_under("exporter"), *modules_under("cluster")]:
        hook_facing = {
            m
            for m in imported_modules(path)
            if m.startswith(("gputui.client.hook", "gputui.protocol"))
        }
        if path.name == "jobs.py" and path.parent.name == "exporter":
            assert hook_facing <= {
                "gputui.client.hook",
                "gputui.protocol",
                "gputui.protocol.messages",
                "gputui.protocol.schema",
                "gputui.protocol.capture",
            }
        else:
            assert hook_facing == set(), path


def test_exporter_and_cluster_core_stay_headless() -> None:
    code = (
        "import sys; import gputui.exporter.collector, gputui.exporter.server, "
        "gputui.cluster.source, gputui.reports.cluster; "
        "print('LOADED', [m for m in ('textual', 'rich', 'torch', 'pynvml') if m in sys.modules])"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=RUN_S
    )
    assert proc.returncode == 0, proc.stderr
    assert "LOADED []" in proc.stdout


def test_the_monitor_once_loads_only_the_device_rules() -> None:
    """``gputui --once`` runs the device rules alone: no job rule, no wire
    module, no roofline, no trace math is imported for it (of the protocol, the
    value classes' base only)."""
    code = (
        "import sys; from gputui.cli import main; "
        "rc = main(['--demo', '--once']); "
        "heavy = ('gputui.protocol', 'gputui.trace', 'gputui.session', 'gputui.hook', "
        "'gputui.analysis.engine', 'gputui.analysis.evidence', 'gputui.analysis.roofline', "
        "'gputui.analysis.rules.steps', 'gputui.analysis.rules.capture'); "
        "print('LOADED', sorted(m for m in sys.modules if m.startswith(heavy))); sys.exit(rc)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "LOADED ['gputui.protocol', 'gputui.protocol.value']" in proc.stdout, proc.stdout
    assert (
        "gputui.analysis.rules.device"
        in subprocess.run(
            [sys.executable, "-c", code.replace("heavy))", "('gputui.analysis.rules',)))")],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
    )


def defined_names(path: Path) -> set[str]:
    """The names a module defines itself (classes, functions, assignments)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def test_wire_types_are_imported_from_the_protocol_not_through_the_client() -> None:
    """The hook client is no second home for the protocol's types: whatever is
    imported from it, it defines."""
    own = defined_names(PACKAGE / "client" / "hook.py")
    tests = PACKAGE.parent / "tests"
    offenders = []
    for path in [*modules_under(), *sorted(tests.rglob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module == "gputui.client.hook":
                offenders += [(path.name, a.name) for a in node.names if a.name not in own]
    assert offenders == []
