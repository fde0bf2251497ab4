"""One seeded, batched rollout: every world of a vector env plays one episode under a batch policy.

`rollout` is the only episode loop of the package: recording (`rpg_env.record`), the experts'
evaluator, the demo and watching all call it, each with a callback for what it keeps (files,
returns, pick-up counts, frames). It resets the env with ``seed``, seeds the policy, and steps
until every world has ended its first episode; worlds that end early (an env of uneven
episode lengths) are autoreset by the env but no longer counted, and their policy rows are
told so through ``episode_start``. It reads nothing but the protocol of
`rpg_env.envs.protocol`, so any env with Treasurehunt-v0's spaces works, and a single
`gymnasium.Env` is run as a vector of one through Gymnasium's own `SyncVectorEnv`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import SyncVectorEnv, VectorEnv

from rpg_env.policies.base import BatchPolicy


@dataclass
class Step:
    """One step of every world, as handed to ``on_step`` (``N`` worlds).

    ``obs`` ``(N, ...)`` are the observations the ``actions`` ``(N,)`` were chosen on, with
    ``episode_start`` ``(N,)`` as the policy saw it; ``rewards``, ``terminated``, ``truncated``
    ``(N,)`` and ``infos`` are what the env returned; ``counted`` ``(N,)`` marks the worlds
    still in their first episode (the ones whose step belongs to the rollout).
    """

    index: int
    obs: np.ndarray
    actions: np.ndarray
    episode_start: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    infos: dict[str, Any]
    counted: np.ndarray
    next_obs: np.ndarray


@dataclass
class Rollout:
    """Per-world results: ``returns`` ``(N,)`` float64 (sum of the learner's rewards) and
    ``lengths`` ``(N,)`` int64 (steps) of each world's first episode."""

    returns: np.ndarray
    lengths: np.ndarray


def as_vector_env(env: gym.Env | VectorEnv) -> VectorEnv:
    """``env`` itself if it is a vector env, else a `SyncVectorEnv` of that one env (no copy)."""
    if isinstance(env, VectorEnv):
        return env
    return SyncVectorEnv([lambda: env], autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)


def rollout(env: gym.Env | VectorEnv, policy: BatchPolicy, *, seed: int | None,
            policy_rng: np.random.Generator | None = None,
            on_reset: Callable[[np.ndarray, dict[str, Any]], None] | None = None,
            on_step: Callable[[Step], None] | None = None, max_steps: int = 1_000_000) -> Rollout:
    """Play one episode in every world of ``env``, the learner's actions chosen by ``policy``.

    Args:
        env: a vector env (or a single env, run as a vector of one).
        policy: acts on ``(N, C, V, V)`` views; its ``check_view_shape`` is called first.
        seed: passed to ``env.reset``; the same seed (and policy seed) gives the same episodes.
        policy_rng: handed to ``policy.seed`` after the reset (None: the policy keeps its own).
        on_reset: called with the reset's ``(obs, infos)``.
        on_step: called with a `Step` after every step.
        max_steps: a guard against envs whose episodes never end (raises RuntimeError).
    """
    venv = as_vector_env(env)
    policy.check_view_shape(tuple(venv.single_observation_space.shape))
    obs, infos = venv.reset(seed=seed)
    if policy_rng is not None:
        policy.seed(policy_rng)
    if on_reset is not None:
        on_reset(obs, infos)
    n = venv.num_envs
    counted = np.ones(n, dtype=bool)
    episode_start = np.ones(n, dtype=bool)
    returns = np.zeros(n, dtype=np.float64)
    lengths = np.zeros(n, dtype=np.int64)
    for index in range(max_steps):
        actions = policy.act(obs, episode_start)
        next_obs, rewards, terminated, truncated, infos = venv.step(actions)
        if counted.all():
            returns += rewards
        else:
            returns += np.where(counted, rewards, 0.0)
        lengths += counted
        if on_step is not None:
            on_step(Step(index, obs, actions, episode_start, rewards, terminated, truncated, infos,
                         counted.copy(), next_obs))
        ended = np.asarray(terminated, dtype=bool) | np.asarray(truncated, dtype=bool)
        counted &= ~ended
        if not counted.any():
            return Rollout(returns, lengths)
        # A world that ended restarts on the next step (Gymnasium's next-step autoreset): its
        # policy row starts afresh, although that episode is no longer counted.
        episode_start = ended
        obs = next_obs
    raise RuntimeError(f"{max_steps} steps and some worlds have not ended their episode; the env "
                       f"must terminate or truncate its episodes")
