"""`TreasurehuntVectorEnv`: a native `gymnasium.vector.VectorEnv` over `rpg_env.core`.

All ``num_envs`` worlds advance in one batched NumPy call per step; co-players of every
world act in one batched policy call. Registered as the vector entry point of
``Treasurehunt-v0``, so ``gymnasium.make_vec("Treasurehunt-v0", num_envs=N)`` returns it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from rpg_env.core import BONE, FOOD, GEM, NUM_ACTIONS, NUM_CELL_KINDS, WALL, WorldBatch, WorldParams
from rpg_env.env import RENDER_MODES, observation_space_for
from rpg_env.observation import codes_to_rgb, one_hot
from rpg_env.policies import BatchPolicy, make_policy


class TreasurehuntVectorEnv(VectorEnv):
    """``num_envs`` Treasurehunt worlds stepped together (see `TreasurehuntEnv` for the game).

    Shapes: observations ``(N, *single_observation_space.shape)``, actions ``(N,)`` int,
    rewards ``(N,)`` float32, terminations/truncations ``(N,)`` bool. Infos follow the
    Gymnasium vector convention (arrays over worlds, ``_key`` masks): ``turn`` ``(N,)``,
    ``positions`` ``(N, A, 2)``, ``episode_return`` ``(N,)``, ``pickups`` (dict of ``(N,)``),
    ``bumped`` ``(N,)``, ``co_obs`` ``(N, A-1, 6, V, V)``, ``co_actions``/``co_rewards``
    ``(N, A-1)``.

    Autoreset: ``autoreset_mode`` is ``NEXT_STEP`` (Gymnasium's default: the step after an
    episode ends resets that world and ignores its action) or ``SAME_STEP`` (the world is
    reset within the ending step; the last observation is in ``info["final_obs"]``).
    """

    metadata = {"render_modes": ["rgb_array", "ansi"], "render_fps": 8,
                "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(
        self,
        num_envs: int = 1,
        *,
        height: int = 20,
        width: int = 20,
        vision_radius: int = 4,
        num_agents: int = 2,
        spawn_prob: float = 0.01,
        max_turns: int = 100,
        gem_value: float = 10.0,
        food_value: float = 5.0,
        bone_value: float = -10.0,
        wall_penalty: float = -1.0,
        co_policy: Any = "random",
        obs_mode: str = "onehot",
        render_mode: str | None = None,
        tile_size: int = 8,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
    ) -> None:
        self.params = WorldParams(height, width, vision_radius, num_agents, spawn_prob, max_turns,
                                  gem_value, food_value, bone_value, wall_penalty)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode for the vector env must be one of "
                             f"{self.metadata['render_modes']} or None, got {render_mode!r}"
                             + (" (use gymnasium.make for a pygame window)" if render_mode in
                                RENDER_MODES else ""))
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        if self.autoreset_mode == AutoresetMode.DISABLED:
            raise ValueError("autoreset_mode DISABLED is not supported; use NEXT_STEP or SAME_STEP")
        self.metadata = {**self.metadata, "autoreset_mode": self.autoreset_mode}
        self.num_envs = int(num_envs)
        self.obs_mode = obs_mode
        self.tile_size = int(tile_size)
        self.render_mode = render_mode
        self.single_observation_space = observation_space_for(self.params, obs_mode, self.tile_size)
        self.single_action_space = spaces.Discrete(NUM_ACTIONS)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.co_policy: BatchPolicy | None = make_policy(co_policy) if num_agents > 1 else None
        self.world = WorldBatch(self.params, self.num_envs)
        self._side = self.params.view_size
        n, a = self.num_envs, num_agents
        self._actions = np.zeros((n, a), dtype=np.int64)
        self._returns = np.zeros((n, a), dtype=np.float64)
        self._co_start = np.ones((n, a - 1), dtype=bool)
        self._needs_reset = np.zeros(n, dtype=bool)
        self._views: np.ndarray | None = None
        self._all = np.ones(n, dtype=bool)
        self._started = False

    @property
    def co_policy_id(self) -> str | None:
        return None if self.co_policy is None else self.co_policy.policy_id

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | list[int] | None = None, options: dict | None = None):
        if isinstance(seed, (list, tuple)):
            raise ValueError("TreasurehuntVectorEnv draws all worlds from one generator: pass "
                             "one int seed, not a list of per-world seeds")
        super().reset(seed=seed)
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        if options:
            raise ValueError(f"unknown reset option(s) {sorted(options)}; supported: 'reset_mask' "
                             f"(layouts are a single-env option: use gymnasium.make)")
        if seed is not None or not self._started:
            self._co_rng = np.random.default_rng(self.np_random.integers(2**63))
            if self.co_policy is not None:
                self.co_policy.seed(self._co_rng)
        if mask is None or not self._started:
            mask = self._all
        mask = np.asarray(mask, dtype=bool)
        self._started = True
        self._reset_worlds(mask)
        self._views = one_hot(self.world.views(), self._side)
        return self._observations(), self._infos(None, None)

    def step(self, actions):
        if not self._started:
            from gymnasium.error import ResetNeeded

            raise ResetNeeded("cannot call step() before reset()")
        actions = self._validate(actions)
        n = self.num_envs
        resetting = self._needs_reset if self.autoreset_mode == AutoresetMode.NEXT_STEP else None
        if resetting is not None and resetting.any():
            self._reset_worlds(resetting)
            self._views = one_hot(self.world.views(), self._side)
            active = ~resetting
        else:
            resetting, active = None, None
        self._actions[:, 0] = actions
        if self.co_policy is not None:
            co_obs = self._views[:, 1:].reshape(-1, NUM_CELL_KINDS, self._side, self._side)
            co = self.co_policy.act(co_obs, self._co_start.reshape(-1))
            self._co_start[:] = False
            self._actions[:, 1:] = co.reshape(n, -1)
        rewards, target_codes = self.world.step(self._actions, self.np_random, active)
        self._returns += rewards
        self._views = one_hot(self.world.views(), self._side)
        truncated = self.world.truncated()
        if active is not None:
            truncated &= active
        terminated = np.zeros(n, dtype=bool)
        infos = self._infos(rewards, target_codes)
        if self.autoreset_mode == AutoresetMode.SAME_STEP and truncated.any():
            infos["final_obs"] = self._observations()
            infos["_final_obs"] = truncated.copy()
            infos["final_info"] = {k: v for k, v in infos.items() if k not in ("final_obs", "_final_obs")}
            infos["_final_info"] = truncated.copy()
            self._reset_worlds(truncated)
            self._views = one_hot(self.world.views(), self._side)
            self._needs_reset[:] = False
        else:
            self._needs_reset = truncated.copy()
        obs = self._observations()
        return obs, rewards[:, 0].copy(), terminated, truncated, infos

    def render(self):
        if self.render_mode is None:
            return None
        from rpg_env.render import render_ansi, render_rgb

        grids, rcs = self.world.grid, self.world.agent_rc()
        if self.render_mode == "ansi":
            return tuple(render_ansi(g, rc, self.params, turn=int(t), score=float(s))
                         for g, rc, t, s in zip(grids, rcs, self.world.turn, self._returns[:, 0]))
        return tuple(render_rgb(g, rc, self.params) for g, rc in zip(grids, rcs))

    # ------------------------------------------------------------------ helpers
    def _validate(self, actions) -> np.ndarray:
        arr = np.asarray(actions)
        if arr.shape != (self.num_envs,):
            raise ValueError(f"actions must have shape ({self.num_envs},), one per world, "
                             f"got shape {arr.shape}")
        if arr.dtype.kind not in "iu":
            raise TypeError(f"actions must be integers in 0..{NUM_ACTIONS - 1}, got dtype {arr.dtype}")
        if arr.size and (arr.min() < 0 or arr.max() >= NUM_ACTIONS):
            bad = np.flatnonzero((arr < 0) | (arr >= NUM_ACTIONS))
            raise ValueError(f"actions out of range 0..{NUM_ACTIONS - 1} at worlds {bad[:8].tolist()}: "
                             f"{arr[bad[:8]].tolist()}")
        return arr

    def _reset_worlds(self, mask: np.ndarray) -> None:
        self.world.reset(self.np_random, mask)
        self._returns[mask] = 0.0
        self._co_start[mask] = True
        self._needs_reset[mask] = False

    def _observations(self) -> np.ndarray:
        if self.obs_mode == "onehot":
            return self._views[:, 0]
        if self.obs_mode == "rgb":
            codes = self.world.views()[:, 0].reshape(self.num_envs, self._side, self._side)
            return codes_to_rgb(codes, self.tile_size)
        grid = self.world.grid
        full = np.zeros((self.num_envs, NUM_CELL_KINDS + 1, *grid.shape[1:]), dtype=np.uint8)
        full[:, :NUM_CELL_KINDS] = grid[:, None] == np.arange(NUM_CELL_KINDS)[None, :, None, None]
        rc = self.world.agent_rc()[:, 0]
        full[np.arange(self.num_envs), NUM_CELL_KINDS, rc[:, 0], rc[:, 1]] = 1
        return full

    def _infos(self, rewards: np.ndarray | None, target_codes: np.ndarray | None) -> dict:
        n = self.num_envs
        infos: dict[str, Any] = {
            "turn": self.world.turn.copy(),
            "positions": self.world.agent_rc(),
            "episode_return": self._returns[:, 0].copy(),
        }
        if target_codes is not None:
            learner = target_codes[:, 0]
            infos["pickups"] = {"gem": (learner == GEM).astype(np.int64),
                                "food": (learner == FOOD).astype(np.int64),
                                "bone": (learner == BONE).astype(np.int64)}
            infos["_pickups"] = np.ones(n, dtype=bool)
            infos["bumped"] = learner == WALL
        if self.params.num_agents > 1:
            infos["co_obs"] = self._views[:, 1:]
            infos["co_returns"] = self._returns[:, 1:].copy()
            if rewards is not None:
                infos["co_actions"] = self._actions[:, 1:].copy()
                infos["co_rewards"] = rewards[:, 1:].copy()
        for key in [k for k in infos if not k.startswith("_") and k != "pickups"]:
            infos["_" + key] = np.ones(n, dtype=bool)
        return infos
