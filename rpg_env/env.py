"""Compatibility alias: `TreasurehuntEnv` moved to `rpg_env.envs.treasurehunt` (Minari datasets and
older code name this path)."""

from rpg_env.envs.treasurehunt import *  # noqa: F403
from rpg_env.envs.treasurehunt import TreasurehuntEnv, validate_action  # noqa: F401
from rpg_env.game.observation import OBS_MODES, full_map_observation, observation_space_for  # noqa: F401
