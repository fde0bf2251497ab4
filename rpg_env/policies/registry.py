"""`make_policy`: a policy from a name, an SB3 model or its ``.zip``, an entry point
``"package.module:factory"``, or any callable."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

from gymnasium import spaces

from rpg_env.policies.base import BatchPolicy, CallablePolicy
from rpg_env.policies.sb3 import SB3Policy
from rpg_env.policies.scripted import EpsilonGreedyPolicy, GreedyPolicy, RandomPolicy, WallFollowerPolicy

#: The scripted policies by name: uniform random, greedy, greedy with 30% random actions, and a
#: wall-follower (a wall on its right hand).
SCRIPTED_POLICIES = {"random": RandomPolicy, "greedy": GreedyPolicy, "eps-greedy": EpsilonGreedyPolicy,
                     "wall-follower": WallFollowerPolicy}
POLICY_NAMES = tuple(SCRIPTED_POLICIES)
#: ``package.module:attribute``, as setuptools writes entry points.
ENTRY_POINT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def make_policy(spec: Any, action_space: spaces.Space | None = None) -> BatchPolicy:
    """Build a policy from a name of `POLICY_NAMES` (``"random"``, ``"greedy"``, ``"eps-greedy"``,
    ``"wall-follower"``), a path to an SB3 ``.zip``, an SB3 model,
    a `BatchPolicy`, an entry point ``"package.module:factory"`` (called with no arguments; it
    returns a `BatchPolicy`, e.g. ``"rpg_worldmodel.policy:pretrained"``), or any callable
    ``obs -> action``. ``action_space``: the env's, which ``"random"`` draws from (None: the game's
    moves); the other scripted policies play the game's moves."""
    if isinstance(spec, BatchPolicy):
        return spec
    if isinstance(spec, str) and spec == "random" and action_space is not None:
        return RandomPolicy(action_space=action_space)
    if isinstance(spec, str) and spec in SCRIPTED_POLICIES:
        return SCRIPTED_POLICIES[spec]()
    if isinstance(spec, (str, Path)) and str(spec).endswith(".zip"):
        return load_expert_policy(spec)
    if isinstance(spec, str) and ENTRY_POINT.match(spec):
        return _from_entry_point(spec)
    if _is_sb3_model(spec):
        return SB3Policy(spec)
    if callable(spec):
        return CallablePolicy(spec)
    raise ValueError(
        f"unknown policy {spec!r}: use one of {', '.join(map(repr, POLICY_NAMES))}, a path to a "
        f"Stable-Baselines3 .zip, an entry point 'package.module:factory', an SB3 model, a BatchPolicy, "
        f"or a callable obs -> action"
    )


def load_expert_policy(path: str | Path, deterministic: bool = True) -> BatchPolicy:
    """The expert in ``path`` (a ``model.zip`` of ``python -m rpg_env.experts train``) as a batched
    policy: `TrXLPolicy` for ``trxl-ppo``, `SB3Policy` for the SB3 algorithms; read without unpickling."""
    from rpg_env.policies.sb3 import read_expert_record
    from rpg_env.policies.transformer_xl import TRXL_ALGO

    record = read_expert_record(Path(path))
    if record.get("algo") == TRXL_ALGO:
        from rpg_env.policies.transformer_xl import TrXLPolicy

        return TrXLPolicy.load(path, deterministic=deterministic, record=record)
    return SB3Policy.load(path, deterministic=deterministic)


def _is_sb3_model(obj: Any) -> bool:
    return any(cls.__module__.startswith("stable_baselines3") and cls.__name__ == "BaseAlgorithm"
               for cls in type(obj).__mro__)


def _from_entry_point(spec: str) -> BatchPolicy:
    module_name, _, attribute = spec.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"policy entry point {spec!r} cannot be loaded: {err}") from None
    policy = factory()
    if not isinstance(policy, BatchPolicy):
        raise ValueError(f"policy entry point {spec!r} returned {type(policy).__name__}, not a BatchPolicy")
    return policy

