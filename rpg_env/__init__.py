"""rpg_env: the Treasurehunt gridworld as a Gymnasium environment.

``import rpg_env`` registers ``Treasurehunt-v0`` (single and native vector entry points) and
``MemoryCue-v0`` (a proof-of-concept memory task in the same views; single entry point), and
``CartPoleMasked-v1`` (CartPole-v1 without its velocities, seed 002's memory task for vectors), and
``OneHotMiniGrid-v0`` (any MiniGrid task in one-hot views with named kinds; needs the ``minigrid`` extra).
Nothing else is imported here, so ``rpg_env.trajectories`` can be used without the game. Every
public name is imported from the module that defines it (docs/architecture.md, "Package faces").
"""

from __future__ import annotations

from gymnasium.envs.registration import register, registry

__version__ = "0.1.0"

ENV_ID = "Treasurehunt-v0"
MEMORY_ENV_ID = "MemoryCue-v0"
CARTPOLE_MASKED_ID = "CartPoleMasked-v1"
MINIGRID_ID = "OneHotMiniGrid-v0"

if ENV_ID not in registry:
    register(
        id=ENV_ID,
        entry_point="rpg_env.envs.treasurehunt:TreasurehuntEnv",
        vector_entry_point="rpg_env.envs.vector:TreasurehuntVectorEnv",
    )

if MEMORY_ENV_ID not in registry:
    register(id=MEMORY_ENV_ID, entry_point="rpg_env.envs.memory_cue:MemoryCueEnv")

if CARTPOLE_MASKED_ID not in registry:
    # The wrapped env keeps CartPole-v1's own 500-step limit; the spec says so too.
    register(id=CARTPOLE_MASKED_ID, entry_point="rpg_env.envs.cartpole_masked:make_cartpole_masked",
             max_episode_steps=None, disable_env_checker=True)

if MINIGRID_ID not in registry:
    # MiniGrid ends its own episodes at its max_steps; the inner env's checker already ran.
    register(id=MINIGRID_ID, entry_point="rpg_env.envs.minigrid_views:make_one_hot_minigrid",
             max_episode_steps=None, disable_env_checker=True)

__all__ = ["ENV_ID", "MEMORY_ENV_ID", "CARTPOLE_MASKED_ID", "MINIGRID_ID", "__version__"]
