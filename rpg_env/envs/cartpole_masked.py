"""`CartPoleMasked-v1`: CartPole-v1 with its two velocities hidden (seed 002's masked CartPole).

The observation keeps the cart's position and the pole's angle, ``Box((2,), float32)``; the
velocities must be read off how those change from step to step, so an agent acting on one
observation balances far worse than one that remembers (or stacks) the last few. Everything else
(actions, reward, the 500-step limit) is CartPole-v1's.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

#: Indices of CartPole's observation that stay: cart position, pole angle.
KEPT = (0, 2)


class MaskVelocity(gym.ObservationWrapper):
    """Keeps CartPole's position and angle, drops both velocities."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        inner = env.observation_space
        self.observation_space = spaces.Box(inner.low[list(KEPT)], inner.high[list(KEPT)], dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.asarray(observation, dtype=np.float32)[list(KEPT)]


def make_cartpole_masked(sutton_barto_reward: bool = False, render_mode: str | None = None) -> gym.Env:
    """The entry point of ``CartPoleMasked-v1``: CartPole-v1 with these arguments, masked."""
    return MaskVelocity(gym.make("CartPole-v1", sutton_barto_reward=sutton_barto_reward,
                                 render_mode=render_mode))
