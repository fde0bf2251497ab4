"""rpg_env: the Treasurehunt gridworld as a Gymnasium environment.

``import rpg_env`` registers ``Treasurehunt-v0`` (single and native vector entry points).
Heavy pieces are imported lazily, so ``rpg_env.trajectories`` can be used without the game.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from gymnasium.envs.registration import register, registry

__version__ = "0.1.0"

ENV_ID = "Treasurehunt-v0"

if ENV_ID not in registry:
    register(
        id=ENV_ID,
        entry_point="rpg_env.envs.treasurehunt:TreasurehuntEnv",
        vector_entry_point="rpg_env.envs.vector:TreasurehuntVectorEnv",
    )

_LAZY = {
    "TreasurehuntEnv": "rpg_env.envs.treasurehunt",
    "TreasurehuntVectorEnv": "rpg_env.envs.vector",
    "WorldParams": "rpg_env.game.world",
    "CELL_NAMES": "rpg_env.game.constants",
    "ACTION_NAMES": "rpg_env.game.constants",
    "vocabulary": "rpg_env.game.constants",
    "GreedyPolicy": "rpg_env.policies",
    "RandomPolicy": "rpg_env.policies",
    "BatchPolicy": "rpg_env.policies",
    "make_policy": "rpg_env.policies",
    "HDF5Recorder": "rpg_env.trajectories",
    "HDF5VectorRecorder": "rpg_env.trajectories",
    "TrajectoryFile": "rpg_env.trajectories",
}

__all__ = ["ENV_ID", "__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rpg_env' has no attribute {name!r}")
