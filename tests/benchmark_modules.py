"""The benchmark scripts (``benchmarks/<name>.py``: scripts, not a package) imported as modules, for
the tests that call their functions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str, alias: str | None = None) -> ModuleType:
    """``benchmarks/<name>.py`` imported as a module named ``alias`` (default ``benchmark_<name>``;
    a test that patches the module takes its own alias, so others see it unpatched)."""
    spec = importlib.util.spec_from_file_location(alias or f"benchmark_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module
