"""Compatibility alias: `TreasurehuntVectorEnv` moved to `rpg_env.envs.vector`."""

from rpg_env.envs.vector import TreasurehuntVectorEnv, parse_autoreset_mode  # noqa: F401
