"""The package's shape: imports run one way (the pipeline's layers), no import circles, deferred imports say why.

``lint-imports`` (the layers contract in pyproject.toml) runs in ``.ci/run``; these tests check the same
graph from the developer's tier, plus what import-linter cannot see: circles inside a layer, a function-level
import with no reason, and that ``import trtcheck`` and ``trtcheck --help`` start without torch.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

import trtcheck

ROOT = Path(trtcheck.__file__).resolve().parent.parent


def _graph() -> grimp.ImportGraph:
    return grimp.build_graph("trtcheck", exclude_type_checking_imports=True)


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_imports_itself_back_through_others():
    graph = _graph()
    # The package roots re-export their modules' names (trtcheck.partitioning imports trtcheck.partitioning.driver,
    # which imports trtcheck.partitioning.partition...): an edge into a package's __init__ from inside it is no circle.
    for package in [m for m in graph.modules if (ROOT / m.replace(".", "/") / "__init__.py").exists()]:
        for child in graph.find_children(package):
            if graph.direct_import_exists(importer=child, imported=package):
                graph.remove_import(importer=child, imported=package)
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_planted_circle():
    graph = _graph()
    graph.add_import(importer="trtcheck.lowering.graph", imported="trtcheck.partitioning.partition")
    assert any("trtcheck.lowering.graph" in cycle and "trtcheck.partitioning.partition" in cycle for cycle in _cycles(graph))


@pytest.mark.skipif(shutil.which("lint-imports") is None, reason="import-linter is in the dev extra: pip install -e '.[dev]'")
def test_the_layers_contract_holds():
    result = subprocess.run(["lint-imports", "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:]


def _function_level_imports() -> list[tuple[Path, int, str]]:
    found = []
    for path in sorted((ROOT / "trtcheck").rglob("*.py")):
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines))
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("trtcheck") and node.level == 0:
                    found.append((path, node.lineno, lines[node.lineno - 1]))
                elif isinstance(node, ast.Import) and any(alias.name.startswith("trtcheck") for alias in node.names):
                    found.append((path, node.lineno, lines[node.lineno - 1]))
    return found


def test_every_function_level_import_of_trtcheck_says_why_it_is_deferred():
    imports = _function_level_imports()
    assert imports, "the scan found no function-level import at all: it no longer reads the package"
    unexplained = [f"{path.relative_to(ROOT)}:{line}: {text.strip()}" for path, line, text in imports if "# deferred:" not in text]
    assert unexplained == []


def test_the_public_names_and_their_lazy_table_agree():
    assert sorted(trtcheck.__all__) == sorted(trtcheck._PUBLIC)
    for name in trtcheck.__all__:
        assert getattr(trtcheck, name) is not None


@pytest.mark.parametrize(
    "code",
    [
        "import trtcheck",
        "import trtcheck.testing.pytest_plugin",
        "import trtcheck.settings, trtcheck.presets, trtcheck.errors",
        "from trtcheck.tools.cli import build_parser; build_parser().format_help()",
    ],
)
def test_starting_up_imports_no_torch(code):
    """The CLI's parser and the pytest plugin load in every shell and every pytest session: no torch (2 s)."""
    result = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint('torch' in sys.modules)"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
