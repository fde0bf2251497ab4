"""`TreasurehuntEnv`: the Treasurehunt rules (`rpg_env.game.world`) as a Gymnasium environment, N = 1.

The learner is agent 0; agents 1..A-1 are co-players driven by ``co_policy``. Every step
the co-players act on their own one-hot views, then all agents move in index order.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import ResetNeeded

from rpg_env.game.constants import Vocabulary, vocabulary
from rpg_env.game.observation import codes_to_rgb, full_map_observation, observation_space_for, one_hot
from rpg_env.game.world import DEFAULT_WORLD, WorldBatch, WorldParams, parse_layout
from rpg_env.policies.base import BatchPolicy, check_policy_actions
from rpg_env.policies.registry import POLICY_NAMES, make_policy
from rpg_env.policies.scripted import GreedyPolicy, RandomPolicy
from rpg_env.render import PygameWindow, game_legend, render_ansi, render_rgb

RENDER_MODES = ("human", "rgb_array", "ansi")


def validate_action(action: Any, num_actions: int | None = None) -> int:
    """Return ``action`` as an int in ``0..A-1`` or raise a clear error.

    Accepts Python and NumPy integers and 0-d integer arrays, as Gymnasium's ``Discrete``
    samples and Stable-Baselines3's ``predict`` (on one observation) produce them.
    """
    vocab = vocabulary()
    n = vocab.num_actions if num_actions is None else num_actions
    if type(action) is int and 0 <= action < n:  # the common case, kept cheap
        return action
    if isinstance(action, np.ndarray):
        if action.ndim != 0:
            raise ValueError(f"action must be a single integer in 0..{n - 1} ({vocab.action_help()}), "
                             f"got an array of shape {action.shape}; pass a scalar (e.g. action.item())")
        action = action.item()
    if isinstance(action, (bool, np.bool_)) or not isinstance(action, (int, np.integer)):
        raise TypeError(f"action must be an integer in 0..{n - 1} ({vocab.action_help()}), "
                        f"got {type(action).__name__} {action!r}")
    if not 0 <= action < n:
        raise ValueError(f"action {action} is out of range: use 0..{n - 1} ({vocab.action_help()})")
    return int(action)


def validate_tile_size(tile_size: Any) -> int:
    if isinstance(tile_size, bool) or not isinstance(tile_size, (int, np.integer)) or tile_size < 1:
        raise ValueError(f"tile_size must be a positive int (pixels per cell in 'rgb' observations), "
                         f"got {tile_size!r}")
    return int(tile_size)


def build_co_policy(co_policy: Any, num_agents: int) -> BatchPolicy | None:
    """The co-players' policy, or None when the learner plays alone (the spec is still checked)."""
    if num_agents > 1:
        return make_policy(co_policy)
    if isinstance(co_policy, str) and co_policy not in POLICY_NAMES and not co_policy.endswith(".zip"):
        make_policy(co_policy)  # raises the same clear error as with co-players
    return None


def game_metadata(params: WorldParams, vocab: Vocabulary, co_policy: BatchPolicy | None) -> dict[str, Any]:
    """The env-protocol keys (`rpg_env.envs.protocol`) of a game with ``params``."""
    return {"channel_names": vocab.cell_names, "action_names": vocab.action_names,
            "max_turns": params.max_turns, "rules": params.rules(),
            "co_policy_id": None if co_policy is None else co_policy.policy_id}


def pickup_info(vocab: Vocabulary, code: int | None) -> dict[str, int]:
    """``{item name: 1 if the learner just picked it up, else 0}`` for every pick-up kind."""
    return {vocab.cells[c].name: int(code == c) for c in vocab.pickup_codes}


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
    ``(A-1,)`` (this step; absent after reset) and ``co_returns`` ``(A-1,)``, and ``level``
    (the level id being played, -1 for the open room or a ``layout``).
    Returned arrays are fresh every step (safe to keep in a replay buffer).

    Levels (ProcGen's keywords): ``num_levels`` > 0 starts every episode on a level drawn
    from ``start_level .. start_level + num_levels - 1``, whose walls (rooms for
    ``distribution_mode="easy"``, a maze for ``"hard"``) are generated from the level id alone;
    ``num_levels=0`` (default) is the open room, exactly as before levels existed.

    Memory variant: ``item_visible_turns=k`` > 0 shows an item in the agents' views (one-hot and
    RGB observations, ``co_obs``) only during the ``k`` turns after it appears (its spawn turn
    first; items on the map at reset appeared at turn 0); after that its cell reads as empty
    floor, but the item stays: entering it still collects it and scores its value
    (`rpg_env.game.visibility`). ``obs_mode="full"`` and ``render()`` stay truthful and show
    every item. ``item_visible_turns=0`` (default) shows items always, exactly as before.

    ``reset(seed=s)`` makes everything that follows (spawns, co-player choices) a function of
    ``s`` and the actions. ``reset(options={"layout": rows})`` starts from a text map
    (``#`` wall, ``.`` empty, ``g`` gem, ``f`` food, ``b`` bone, ``A`` the learner, ``B``..
    co-players; ``height`` x ``width`` characters); a malformed map raises ValueError.
    """

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": 8}

    def __init__(
        self,
        height: int = DEFAULT_WORLD.height,
        width: int = DEFAULT_WORLD.width,
        vision_radius: int = DEFAULT_WORLD.vision_radius,
        num_agents: int = DEFAULT_WORLD.num_agents,
        spawn_prob: float = DEFAULT_WORLD.spawn_prob,
        max_turns: int = DEFAULT_WORLD.max_turns,
        gem_value: float = DEFAULT_WORLD.gem_value,
        food_value: float = DEFAULT_WORLD.food_value,
        bone_value: float = DEFAULT_WORLD.bone_value,
        wall_penalty: float = DEFAULT_WORLD.wall_penalty,
        num_levels: int = DEFAULT_WORLD.num_levels,
        start_level: int = DEFAULT_WORLD.start_level,
        distribution_mode: str = DEFAULT_WORLD.distribution_mode,
        item_visible_turns: int = DEFAULT_WORLD.item_visible_turns,
        co_policy: Any = "random",
        obs_mode: str = "onehot",
        render_mode: str | None = None,
        tile_size: int = 8,
    ) -> None:
        self.params = WorldParams(height, width, vision_radius, num_agents, spawn_prob, max_turns,
                                  gem_value, food_value, bone_value, wall_penalty,
                                  num_levels, start_level, distribution_mode, item_visible_turns)
        if render_mode is not None and render_mode not in RENDER_MODES:
            raise ValueError(f"render_mode must be one of {RENDER_MODES} or None, got {render_mode!r}")
        self.vocab = vocabulary()
        self.obs_mode = obs_mode
        self.tile_size = validate_tile_size(tile_size)
        self.observation_space = observation_space_for(self.params, obs_mode, self.tile_size,
                                                       self.vocab.num_kinds)
        self.action_space = spaces.Discrete(self.vocab.num_actions)
        self.render_mode = render_mode
        self.co_policy: BatchPolicy | None = build_co_policy(co_policy, num_agents)
        self.metadata = {**type(self).metadata, **game_metadata(self.params, self.vocab, self.co_policy)}
        # Built-in policies are trusted to return valid actions; anything else is checked.
        self._check_co_actions = type(self.co_policy) not in (RandomPolicy, GreedyPolicy)
        self.world = WorldBatch(self.params, 1)
        self._side = self.params.view_size
        self._actions = np.zeros((1, num_agents), dtype=np.int64)
        # episode_start flags for the co-players: all True on the first step of an episode.
        self._co_first = np.ones(num_agents - 1, dtype=bool)
        self._co_later = np.zeros(num_agents - 1, dtype=bool)
        self._co_start = self._co_first
        self._returns = np.zeros(num_agents, dtype=np.float64)
        self._views: np.ndarray | None = None  # (A, K, V, V) one-hot, current
        self._needs_reset = True
        self._renderer = None
        self._num_actions = self.vocab.num_actions
        # pickups info by the code of the cell the learner tried to enter (copied per step).
        self._pickups_by_code = tuple(pickup_info(self.vocab, code) for code in range(self.vocab.num_kinds))
        self.last_pickups = pickup_info(self.vocab, None)

    # ------------------------------------------------------------------ gym API
    @property
    def co_policy_id(self) -> str | None:
        return None if self.co_policy is None else self.co_policy.policy_id

    def reset(self, *, seed: int | None = None,
              options: dict | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode. ``options={"layout": [...]}`` starts from a text map instead."""
        options = options or {}
        if not isinstance(options, dict):
            raise TypeError(f"options must be a dict (e.g. {{'layout': [...]}}), "
                            f"got {type(options).__name__}")
        unknown = set(options) - {"layout"}
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; supported: 'layout'")
        layout = options.get("layout")
        parsed = None if layout is None else parse_layout(layout, self.params)  # raises before any change
        super().reset(seed=seed)
        if seed is not None or not hasattr(self, "_co_rng"):
            # A separate stream for the co-players keeps the world's draws independent of them.
            self._co_rng = np.random.default_rng(self.np_random.integers(2**63))
            if self.co_policy is not None:
                self.co_policy.seed(self._co_rng)
        if parsed is not None:
            self.world.load_layout(0, *parsed)
            self.world.discard_buffered_draws()
        else:
            self.world.reset(self.np_random)
        self._returns[:] = 0.0
        self._co_start = self._co_first
        self._needs_reset = False
        self.last_pickups = pickup_info(self.vocab, None)
        self._views = one_hot(self.world.world_views(0), self._side, self.vocab.num_kinds)
        info = self._info(0, None, None)
        if self.render_mode == "human":
            self.render()
        return self._learner_obs(), info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Play one turn: the learner's ``action`` (0 up, 1 down, 2 left, 3 right), then the
        co-players' (chosen by ``co_policy`` on their current views), then spawns."""
        if self._needs_reset:
            raise ResetNeeded("cannot call step(): the episode has ended (or reset() was never "
                              "called); call reset() first")
        actions = self._actions
        actions[0, 0] = action if type(action) is int and 0 <= action < self._num_actions else (
            validate_action(action, self._num_actions))
        if self.co_policy is not None:
            co_actions = self.co_policy.act(self._views[1:], self._co_start)
            if self._check_co_actions:
                co_actions = check_policy_actions(co_actions, len(self._co_start),
                                                  self.co_policy.policy_id)
            self._co_start = self._co_later
            actions[0, 1:] = co_actions
        rewards, target_codes = self.world.step(actions, self.np_random)
        rewards = rewards[0]
        self._returns += rewards
        self._views = one_hot(self.world.world_views(0), self._side, self.vocab.num_kinds)
        code = int(target_codes[0, 0])
        self.last_pickups = dict(self._pickups_by_code[code])
        turn = int(self.world.turn[0])
        truncated = turn >= self.params.max_turns
        self._needs_reset = truncated
        info = self._info(turn, rewards, code)
        if self.render_mode == "human":
            self.render()
        return self._learner_obs(), float(rewards[0]), False, truncated, info

    def render(self) -> np.ndarray | str | None:
        if self.render_mode is None:
            gym.logger.warn("render() called without a render_mode; pass render_mode="
                            "'rgb_array', 'ansi' or 'human' to gymnasium.make")
            return None
        rc = self.world.world_agent_rc(0)
        turn, score = int(self.world.turn[0]), float(self._returns[0])
        if self.render_mode == "ansi":
            return render_ansi(self.world.grid[0], rc, self.params, turn=turn, score=score)
        frame = render_rgb(self.world.grid[0], rc, self.params)
        if self.render_mode == "rgb_array":
            return frame
        if self._renderer is None:
            self._renderer = PygameWindow(self.metadata["render_fps"],
                                          legend=game_legend(self.params, self.params.num_agents))
        self._renderer.show(frame, header=f"turn {turn}/{self.params.max_turns}   score {score:+g}")
        return None

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

    # ------------------------------------------------------------------ helpers
    def _learner_obs(self) -> np.ndarray:
        if self.obs_mode == "onehot":
            return self._views[0]
        if self.obs_mode == "rgb":
            return codes_to_rgb(self.world.world_views(0)[0].reshape(self._side, self._side),
                                self.tile_size)
        return full_map_observation(self.world.grid[0], self.world.world_agent_rc(0)[0], self.vocab.num_kinds)

    def _info(self, turn: int, rewards: np.ndarray | None, code: int | None) -> dict[str, Any]:
        info: dict[str, Any] = {
            "turn": turn,
            "positions": self.world.world_agent_rc(0),
            "pickups": self.last_pickups,
            "bumped": code == self.vocab.wall,
            "episode_return": float(self._returns[0]),
            "level": int(self.world.level[0]),
        }
        if self.params.num_agents > 1:
            info["co_obs"] = self._views[1:]
            info["co_returns"] = self._returns[1:].copy()
            if rewards is not None:
                info["co_actions"] = self._actions[0, 1:].copy()
                info["co_rewards"] = rewards[1:].copy()
        return info
