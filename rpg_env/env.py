"""`TreasurehuntEnv`: the Treasurehunt rules (`rpg_env.core`) as a Gymnasium environment, N = 1.

The learner is agent 0; agents 1..A-1 are co-players driven by ``co_policy``. Every step
the co-players act on their own one-hot views, then all agents move in index order.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import ResetNeeded

from rpg_env.core import (
    ACTION_NAMES,
    BONE,
    CELL_NAMES,
    FOOD,
    GEM,
    NUM_ACTIONS,
    NUM_CELL_KINDS,
    WALL,
    WorldBatch,
    WorldParams,
    parse_layout,
)
from rpg_env.observation import codes_to_rgb, one_hot
from rpg_env.policies import BatchPolicy, make_policy

OBS_MODES = ("onehot", "rgb", "full")
RENDER_MODES = ("human", "rgb_array", "ansi")
_NO_PICKUPS = {"gem": 0, "food": 0, "bone": 0}


def validate_action(action: Any) -> int:
    """Return ``action`` as an int in ``0..3`` or raise a clear error."""
    if isinstance(action, np.ndarray) and action.ndim == 0:
        action = action.item()
    if isinstance(action, (bool, np.bool_)) or not isinstance(action, (int, np.integer)):
        raise TypeError(f"action must be an integer in 0..{NUM_ACTIONS - 1} "
                        f"({', '.join(ACTION_NAMES)}), got {type(action).__name__} {action!r}")
    if not 0 <= action < NUM_ACTIONS:
        raise ValueError(f"action {action} is out of range: use 0..{NUM_ACTIONS - 1} "
                         f"({', '.join(f'{i} {n}' for i, n in enumerate(ACTION_NAMES))})")
    return int(action)


def observation_space_for(params: WorldParams, obs_mode: str, tile_size: int) -> spaces.Box:
    """The learner's observation space for one world."""
    side = params.view_size
    if obs_mode == "onehot":
        return spaces.Box(0, 1, (NUM_CELL_KINDS, side, side), dtype=np.uint8)
    if obs_mode == "rgb":
        return spaces.Box(0, 255, (side * tile_size, side * tile_size, 3), dtype=np.uint8)
    if obs_mode == "full":
        return spaces.Box(0, 1, (NUM_CELL_KINDS + 1, params.height, params.width), dtype=np.uint8)
    raise ValueError(f"obs_mode must be one of {OBS_MODES}, got {obs_mode!r}")


class TreasurehuntEnv(gym.Env[np.ndarray, np.int64]):
    """Treasurehunt: collect gems (+10) and food (+5), avoid bones (-10) and walls (-1).

    Observation (``obs_mode``):
        - ``"onehot"`` (default): ``(6, V, V)`` uint8, the learner's egocentric view,
          channels ``empty, wall, gem, bone, food, agent``; outside the map reads as wall.
        - ``"rgb"``: ``(V * tile_size, V * tile_size, 3)`` uint8 pixels of the same view.
        - ``"full"``: ``(7, H, W)`` uint8 one-hot of the whole map plus a 7th ``self``
          plane marking the learner.
    Action: ``Discrete(4)``: 0 up, 1 down, 2 left, 3 right.
    Reward: points of the learner's move this turn (float).
    Episode end: truncation after ``max_turns`` turns; the game never terminates.

    ``info`` holds: ``turn``, ``positions`` ``(A, 2)`` (row, col; row 0 is the learner),
    ``pickups`` (dict gem/food/bone -> 0/1 this step), ``bumped`` (bool),
    ``episode_return`` (learner's running return), and for co-players ``co_obs``
    ``(A-1, 6, V, V)`` (the views they act on next), ``co_actions`` and ``co_rewards``
    ``(A-1,)`` (this step; absent after reset) and ``co_returns`` ``(A-1,)``.
    """

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": 8}

    def __init__(
        self,
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
    ) -> None:
        self.params = WorldParams(height, width, vision_radius, num_agents, spawn_prob, max_turns,
                                  gem_value, food_value, bone_value, wall_penalty)
        if render_mode is not None and render_mode not in RENDER_MODES:
            raise ValueError(f"render_mode must be one of {RENDER_MODES} or None, got {render_mode!r}")
        self.obs_mode = obs_mode
        self.tile_size = int(tile_size)
        self.observation_space = observation_space_for(self.params, obs_mode, self.tile_size)
        self.action_space = spaces.Discrete(NUM_ACTIONS)
        self.render_mode = render_mode
        self.co_policy: BatchPolicy | None = make_policy(co_policy) if num_agents > 1 else None
        self.world = WorldBatch(self.params, 1)
        self._side = self.params.view_size
        self._actions = np.zeros((1, num_agents), dtype=np.int64)
        self._co_start = np.ones(num_agents - 1, dtype=bool)
        self._returns = np.zeros(num_agents, dtype=np.float64)
        self._views: np.ndarray | None = None  # (A, 6, V, V) one-hot, current
        self._needs_reset = True
        self._renderer = None
        self.last_pickups = dict(_NO_PICKUPS)

    # ------------------------------------------------------------------ gym API
    @property
    def co_policy_id(self) -> str | None:
        return None if self.co_policy is None else self.co_policy.policy_id

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None or not hasattr(self, "_co_rng"):
            # A separate stream for the co-players keeps the world's draws independent of them.
            self._co_rng = np.random.default_rng(self.np_random.integers(2**63))
            if self.co_policy is not None:
                self.co_policy.seed(self._co_rng)
        layout = (options or {}).get("layout")
        if layout is not None:
            self.world.load_layout(0, *parse_layout(layout, self.params))
        else:
            self.world.reset(self.np_random)
        unknown = set(options or {}) - {"layout"}
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; supported: 'layout'")
        self._returns[:] = 0.0
        self._co_start[:] = True
        self._needs_reset = False
        self.last_pickups = dict(_NO_PICKUPS)
        self._views = one_hot(self.world.views()[0], self._side)
        info = self._info(rewards=None, bumped=False)
        if self.render_mode == "human":
            self.render()
        return self._learner_obs(), info

    def step(self, action):
        if self._needs_reset:
            raise ResetNeeded("cannot call step(): the episode has ended (or reset() was never "
                              "called); call reset() first")
        self._actions[0, 0] = validate_action(action)
        if self.co_policy is not None:
            co_actions = self.co_policy.act(self._views[1:], self._co_start)
            self._co_start[:] = False
            self._actions[0, 1:] = co_actions
        rewards, target_codes = self.world.step(self._actions, self.np_random)
        rewards = rewards[0]
        self._returns += rewards
        self._views = one_hot(self.world.views()[0], self._side)
        code = target_codes[0, 0]
        self.last_pickups = {"gem": int(code == GEM), "food": int(code == FOOD),
                             "bone": int(code == BONE)}
        truncated = bool(self.world.turn[0] >= self.params.max_turns)
        self._needs_reset = truncated
        info = self._info(rewards=rewards, bumped=bool(code == WALL))
        if self.render_mode == "human":
            self.render()
        return self._learner_obs(), float(rewards[0]), False, truncated, info

    def render(self):
        if self.render_mode is None:
            gym.logger.warn("render() called without a render_mode; pass render_mode="
                            "'rgb_array', 'ansi' or 'human' to gymnasium.make")
            return None
        from rpg_env.render import render_ansi, render_rgb

        if self.render_mode == "ansi":
            return render_ansi(self.world.grid[0], self.world.agent_rc()[0], self.params,
                               turn=int(self.world.turn[0]), score=float(self._returns[0]))
        if self.render_mode == "rgb_array":
            return render_rgb(self.world.grid[0], self.world.agent_rc()[0], self.params)
        if self._renderer is None:
            from rpg_env.render import PygameWindow

            self._renderer = PygameWindow(self.params, fps=self.metadata["render_fps"])
        self._renderer.draw(self.world.grid[0], self.world.agent_rc()[0],
                            turn=int(self.world.turn[0]), score=float(self._returns[0]))
        return None

    def close(self):
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

    # ------------------------------------------------------------------ helpers
    def _learner_obs(self) -> np.ndarray:
        if self.obs_mode == "onehot":
            return self._views[0]
        if self.obs_mode == "rgb":
            return codes_to_rgb(self.world.views()[0, 0].reshape(self._side, self._side),
                                self.tile_size)
        grid = self.world.grid[0]
        full = np.zeros((NUM_CELL_KINDS + 1, *grid.shape), dtype=np.uint8)
        full[:NUM_CELL_KINDS] = grid[None] == np.arange(NUM_CELL_KINDS)[:, None, None]
        row, col = self.world.agent_rc()[0, 0]
        full[NUM_CELL_KINDS, row, col] = 1
        return full

    def _info(self, rewards: np.ndarray | None, bumped: bool) -> dict[str, Any]:
        info: dict[str, Any] = {
            "turn": int(self.world.turn[0]),
            "positions": self.world.agent_rc()[0],
            "pickups": self.last_pickups,
            "bumped": bumped,
            "episode_return": float(self._returns[0]),
        }
        if self.params.num_agents > 1:
            info["co_obs"] = self._views[1:]
            info["co_returns"] = self._returns[1:].copy()
            if rewards is not None:
                info["co_actions"] = self._actions[0, 1:].copy()
                info["co_rewards"] = rewards[1:].copy()
        return info

