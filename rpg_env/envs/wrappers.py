"""Generic Gymnasium wrappers for envs of other packages, named in expert configs' ``wrappers``.

`FirstActions` keeps the first ``n`` actions of a `Discrete` space: seed 002 trains on MiniGrid
Memory with forward and the two turns only (MiniGrid numbers them 0 left, 1 right, 2 forward),
``"rpg_env.envs.wrappers:FirstActions n=3"``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rpg_base.errors import InputError


class FirstActions(gym.ActionWrapper):
    """``Discrete(n)``: the env's actions ``0 .. n - 1``; the others cannot be chosen."""

    def __init__(self, env: gym.Env, n: int) -> None:
        super().__init__(env)
        inner = env.action_space
        if not isinstance(inner, spaces.Discrete) or int(inner.start) != 0:
            raise InputError(f"FirstActions keeps the first actions of a Discrete space from 0, got {inner}")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= int(inner.n):
            raise InputError(f"FirstActions n must be an int in 1..{int(inner.n)}, got {n!r}")
        self.action_space = spaces.Discrete(int(n))

    def action(self, action: int | np.integer) -> int:
        if not self.action_space.contains(action):
            raise InputError(f"action {action!r} is outside {self.action_space}")
        return int(action)
