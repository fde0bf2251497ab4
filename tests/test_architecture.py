"""The shape of the code: layers (import-linter contracts in setup.cfg), no import cycles at
all, and modules and functions small enough to read."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rpg_env", "rpg_worldmodel")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80
#: A function may run longer when a comment on its ``def`` line (or the line above) says why.
LONG_FUNCTION_MARK = "# long:"


def test_import_linter_contracts_are_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint), "--config", str(ROOT / "setup.cfg")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "broken" in proc.stdout and "0 broken" in proc.stdout


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
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
            for child in children:
                if child not in graph.modules:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
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


def test_the_import_graph_has_no_cycle():
    # Every import statement counts, function-level ones included.
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    assert _cycles(graph) == []


def _python_files() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("path", _python_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_and_functions_stay_small(path):
    lines = path.read_text().splitlines()
    assert len(lines) <= MAX_MODULE_LINES, f"{path.name} has {len(lines)} lines; split it by job"
    tree = ast.parse("\n".join(lines))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            start = node.decorator_list[0].lineno if node.decorator_list else node.lineno
            near = (start - 1, start, node.lineno)
            marked = any(LONG_FUNCTION_MARK in lines[i - 1] for i in near if i >= 1)
            assert length <= MAX_FUNCTION_LINES or marked, (
                f"{path.name}:{node.lineno} {node.name} is {length} lines; split it or say why "
                f"with a '{LONG_FUNCTION_MARK} reason' comment")


def test_no_comment_points_at_an_issue_number():
    import re

    pattern = re.compile(r"\bissues? \d+\b", re.IGNORECASE)
    offenders = [f"{p.relative_to(ROOT)}:{i}" for p in _python_files()
                 for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert offenders == []
