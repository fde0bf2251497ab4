"""A Gymnasium `VectorEnv` as a Stable-Baselines3 `VecEnv`, so SB3 trains on a batched env
(``Treasurehunt-v0``'s native vector env, or the world model's imagined one) without one Python
env object per world.

SB3 resets a finished world inside the step that ends it and hands the last observation over in
``info["terminal_observation"]``; Gymnasium calls that ``SAME_STEP`` autoreset and puts it in
``info["final_obs"]``. The wrapped env must use that mode. Observations are passed through as
``Box(0, 1, (C, V, V), uint8)`` (the one-hot view as SB3's `VecFrameStack` can stack it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from stable_baselines3.common.vec_env import VecEnv


class SB3VectorEnv(VecEnv):
    """``env`` (a Gymnasium `VectorEnv` with ``autoreset_mode=SAME_STEP``) as an SB3 `VecEnv`.

    ``infos`` become one dict per world holding that world's entries (arrays indexed, masked keys
    dropped where their mask is False); ``terminal_observation`` and ``TimeLimit.truncated`` are
    added where an episode ended.
    """

    def __init__(self, env: VectorEnv) -> None:
        mode = env.metadata.get("autoreset_mode")
        if mode != AutoresetMode.SAME_STEP:
            raise ValueError(f"SB3 needs the env to reset a finished world within the step (autoreset_mode="
                             f"SAME_STEP); this one uses {mode}")
        self.env = env  # before VecEnv.__init__, which asks it for its render mode
        self._actions: np.ndarray | None = None
        self._seed: int | None = None
        space = spaces.Box(0, 1, env.single_observation_space.shape, dtype=np.uint8)
        super().__init__(env.num_envs, space, env.single_action_space)

    def reset(self) -> np.ndarray:
        obs, _ = self.env.reset(seed=self._seed)
        self._seed = None
        return np.asarray(obs, dtype=np.uint8)

    def seed(self, seed: int | None = None) -> Sequence[None | int]:
        self._seed = seed
        return [seed] * self.num_envs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions, dtype=np.int64).reshape(self.num_envs)

    def step_wait(self):
        obs, rewards, terminated, truncated, info = self.env.step(self._actions)
        dones = np.asarray(terminated) | np.asarray(truncated)
        infos = self._split(info)
        final = info.get("final_obs")
        for i in np.flatnonzero(dones):
            infos[i]["terminal_observation"] = np.asarray(final[i], dtype=np.uint8)
            infos[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
        return np.asarray(obs, dtype=np.uint8), np.asarray(rewards, dtype=np.float32), dones, infos

    def _split(self, info: dict[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        for key, value in info.items():
            if key.startswith("_") or key in ("final_obs", "final_info"):
                continue
            mask = info.get(f"_{key}")
            if isinstance(value, np.ndarray) and value.shape[:1] == (self.num_envs,):
                for i in range(self.num_envs):
                    if mask is None or mask[i]:
                        out[i][key] = value[i]
        return out

    def close(self) -> None:
        self.env.close()

    def get_attr(self, attr_name: str, indices=None) -> list[Any]:
        return [getattr(self.env, attr_name)] * len(self._get_indices(indices))

    def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
        setattr(self.env, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices=None, **method_kwargs) -> list[Any]:
        result = getattr(self.env, method_name)(*method_args, **method_kwargs)
        return [result] * len(self._get_indices(indices))

    def env_is_wrapped(self, wrapper_class, indices=None) -> list[bool]:
        return [False] * len(self._get_indices(indices))
