"""`make_policy`: a policy from a name, an SB3 model or its ``.zip``, or any callable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rpg_env.policies.base import BatchPolicy, CallablePolicy
from rpg_env.policies.sb3 import SB3Policy
from rpg_env.policies.scripted import GreedyPolicy, RandomPolicy

POLICY_NAMES = ("random", "greedy")


def make_policy(spec: Any) -> BatchPolicy:
    """Build a policy from ``"random"``, ``"greedy"``, a path to an SB3 ``.zip``, an SB3 model,
    a `BatchPolicy`, or any callable ``obs -> action``."""
    if isinstance(spec, BatchPolicy):
        return spec
    if isinstance(spec, str) and spec == "random":
        return RandomPolicy()
    if isinstance(spec, str) and spec == "greedy":
        return GreedyPolicy()
    if isinstance(spec, (str, Path)) and str(spec).endswith(".zip"):
        return SB3Policy.load(spec)
    if _is_sb3_model(spec):
        return SB3Policy(spec)
    if callable(spec):
        return CallablePolicy(spec)
    raise ValueError(
        f"unknown policy {spec!r}: use 'random', 'greedy', a path to a Stable-Baselines3 .zip, "
        f"an SB3 model, a BatchPolicy, or a callable obs -> action"
    )


def _is_sb3_model(obj: Any) -> bool:
    return any(cls.__module__.startswith("stable_baselines3") and cls.__name__ == "BaseAlgorithm"
               for cls in type(obj).__mro__)
