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
PACKAGES = ("rpg_base", "rpg_env", "rpg_worldmodel")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
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
    return sorted(p for folder in (*PACKAGES, "benchmarks", "tests") for p in (ROOT / folder).rglob("*.py"))


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


def test_the_world_model_file_reads_in_one_sitting():
    """models/world_model.py holds the default model's path and nothing else in its way: its
    variants, refiner, memory and heads live in their own modules."""
    lines = (ROOT / "rpg_worldmodel" / "models" / "world_model.py").read_text().splitlines()
    assert len(lines) <= 350, f"world_model.py has {len(lines)} lines; move a part into its own module"


def test_no_comment_points_at_an_issue_number():
    import re

    pattern = re.compile(r"\bissues? \d+\b", re.IGNORECASE)
    offenders = [f"{p.relative_to(ROOT)}:{i}" for p in _python_files()
                 for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert offenders == []


# ------------------------------------------------------------------------------ one path per name
#: Modules kept only because saved files name them (each says which, and a test loads such a file).
KEPT_ALIASES = {"rpg_env.env", "rpg_env.experts.features"}
SOURCE_DIRS = (*PACKAGES, "tests", "benchmarks")


def _module_file(module: str) -> Path | None:
    base = ROOT / module.replace(".", "/")
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _defined_names(path: Path) -> set[str]:
    """Names a module binds itself at top level (not by importing them)."""
    names: set[str] = set()

    def visit(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(ast.parse(path.read_text()).body)
    return names


def _project_imports():
    for folder in SOURCE_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
                        node.module.split(".")[0] in PACKAGES):
                    yield path, node


def test_every_name_is_imported_from_the_module_that_defines_it():
    offenders = []
    for path, node in _project_imports():
        file = _module_file(node.module)
        assert file is not None, f"{path.relative_to(ROOT)}:{node.lineno} imports a missing {node.module}"
        defined = _defined_names(file)
        for alias in node.names:
            submodule = _module_file(f"{node.module}.{alias.name}")
            if alias.name not in defined and submodule is None:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.module}.{alias.name}")
            if node.module in KEPT_ALIASES:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} imports kept alias {node.module}")
    assert offenders == []


def test_package_faces_only_describe_their_package():
    # The rule (docs/architecture.md, "Package faces"): an __init__.py holds the package's docstring;
    # the two top packages also register their Gymnasium ids, and rpg_env.experts finds its shipped
    # experts. None re-exports a name of its modules.
    for folder in PACKAGES:
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            imports = [n for n in ast.walk(ast.parse(init.read_text())) if isinstance(n, ast.ImportFrom)
                       and n.module and n.module.split(".")[0] in PACKAGES]
            assert imports == [], f"{init.relative_to(ROOT)} re-exports {[n.module for n in imports]}"


# ------------------------------------------------------------------------------ one name per meaning
#: Entry points every command-line module (one run by ``python -m``) defines for itself.
COMMAND_NAMES = {"main", "build_parser"}
#: Other public names more than one module defines on purpose: the modules, and why.
SHARED_NAMES = {
    "train": ({"rpg_env.experts.train", "rpg_worldmodel.train"},
              "the entry point of each package's train module, named after it as main is: one trains an "
              "expert from an ExpertConfig, the other a world model from a WorldModelConfig"),
    "pretrained_path": ({"rpg_env.experts", "rpg_worldmodel.shipped"},
                        "each package's own shipped artefacts by name: the experts; the world model and the "
                        "agents trained in it"),
    "PRETRAINED_DIR": ({"rpg_env.experts", "rpg_worldmodel.shipped"},
                       "the folder of each package's shipped artefacts (pretrained_path's)"),
}


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _is_command(path: Path) -> bool:
    """A module run as a command: a ``__main__`` module, or one ending in ``if __name__ == "__main__"``."""
    text = path.read_text()
    return path.name == "__main__.py" or 'if __name__ == "__main__":' in text


def _public_definitions() -> dict[str, set[str]]:
    """Public (not underscore) top-level name -> the modules of the packages that define it; a
    command-line module's `COMMAND_NAMES` are left out (and kept to such modules)."""
    where: dict[str, set[str]] = {}
    for folder in PACKAGES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            module = _module_name(path)
            if module in KEPT_ALIASES:
                continue
            names = _defined_names(path) - (COMMAND_NAMES if _is_command(path) else set())
            for name in names:
                if not name.startswith("_"):
                    where.setdefault(name, set()).add(module)
    return where


def test_every_public_name_is_defined_in_one_module():
    # One meaning per name: a function, class or constant of rpg_base, rpg_env or rpg_worldmodel is
    # defined in one module, so a name says which thing it is wherever it is read.
    defined = _public_definitions()
    offenders = {name: sorted(modules) for name, modules in defined.items()
                 if len(modules) > 1 and name not in SHARED_NAMES or name in COMMAND_NAMES}
    assert offenders == {}, "define each in one module, or name each by what it is"
    assert {name: defined.get(name) for name in SHARED_NAMES} == {
        name: modules for name, (modules, _why) in SHARED_NAMES.items()}
