"""`TreasurehuntVectorEnv`: a native `gymnasium.vector.VectorEnv` over `rpg_env.game.world`.

All ``num_envs`` worlds advance in one batched NumPy call per step; co-players of every
world act in one batched policy call. Registered as the vector entry point of
``Treasurehunt-v0``, so ``gymnasium.make_vec("Treasurehunt-v0", num_envs=N)`` returns it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.error import ResetNeeded
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from rpg_env.envs.treasurehunt import (
    RENDER_MODES,
    build_co_policy,
    game_metadata,
    validate_tile_size,
)
from rpg_env.game.constants import vocabulary
from rpg_env.game.observation import codes_to_rgb, full_map_observation, observation_space_for, one_hot
from rpg_env.game.world import DEFAULT_WORLD, WorldBatch, WorldParams
from rpg_env.policies.base import BatchPolicy, check_policy_actions
from rpg_env.policies.scripted import GreedyPolicy, RandomPolicy
from rpg_env.render import render_ansi, render_rgb


def parse_autoreset_mode(mode: AutoresetMode | str) -> AutoresetMode:
    """``AutoresetMode.NEXT_STEP``/``SAME_STEP`` or a name like ``"next_step"``, ``"SameStep"``."""
    if isinstance(mode, AutoresetMode):
        parsed = mode
    else:
        names = {m.name.replace("_", "").lower(): m for m in AutoresetMode}
        parsed = names.get(str(mode).replace("_", "").replace("-", "").lower())
    if parsed not in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP):
        raise ValueError(f"autoreset_mode must be AutoresetMode.NEXT_STEP or AutoresetMode.SAME_STEP "
                         f"(or 'next_step' / 'same_step'), got {mode!r}; DISABLED is not supported")
    return parsed


class TreasurehuntVectorEnv(VectorEnv):
    """``num_envs`` Treasurehunt worlds stepped together (see `TreasurehuntEnv` for the game).

    Shapes: observations ``(N, *single_observation_space.shape)``, actions ``(N,)`` int,
    rewards ``(N,)`` float32, terminations/truncations ``(N,)`` bool. Infos are the single
    env's, batched the way Gymnasium's own vector envs batch them (arrays over worlds plus
    ``_key`` masks): ``turn`` ``(N,)``, ``positions`` ``(N, A, 2)``, ``episode_return``
    ``(N,)``, ``level`` ``(N,)``, ``pickups`` (dict of ``(N,)``), ``bumped`` ``(N,)``, ``co_obs``
    ``(N, A-1, 6, V, V)``, ``co_returns`` and, for worlds that played the step,
    ``co_actions``/``co_rewards`` ``(N, A-1)``. All-True masks are one shared read-only array.

    Autoreset: ``autoreset_mode`` is ``NEXT_STEP`` (Gymnasium's default: the step after an
    episode ends resets that world, ignores its action and returns its reset observation and
    info with reward 0) or ``SAME_STEP`` (the world is reset within the ending step; the
    ending observations are in ``info["final_obs"]``, an object array, and their infos in
    ``info["final_info"]``, both masked by ``_final_obs``/``_final_info``).

    ``item_visible_turns`` > 0 hides old items from the views, as in `TreasurehuntEnv`; autoreset
    and ``reset`` restart the ages of the worlds they reset.

    Seeding: all worlds draw from one generator; ``reset(seed=s)`` fixes everything after it.
    Changing ``num_envs`` changes which world gets which draws.
    """

    metadata = {"render_modes": ["rgb_array", "ansi"], "render_fps": 8,
                "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(
        self,
        num_envs: int = 1,
        *,
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
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
    ) -> None:
        self.params = WorldParams(height, width, vision_radius, num_agents, spawn_prob, max_turns,
                                  gem_value, food_value, bone_value, wall_penalty,
                                  num_levels, start_level, distribution_mode, item_visible_turns)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode for the vector env must be one of "
                             f"{self.metadata['render_modes']} or None, got {render_mode!r}"
                             + (" (use gymnasium.make for a pygame window)" if render_mode in
                                RENDER_MODES else ""))
        self.autoreset_mode = parse_autoreset_mode(autoreset_mode)
        self.metadata = {**self.metadata, "autoreset_mode": self.autoreset_mode}
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        self.num_envs = int(num_envs)
        self.vocab = vocab = vocabulary()
        self.obs_mode = obs_mode
        self.tile_size = validate_tile_size(tile_size)
        self.render_mode = render_mode
        self.single_observation_space = observation_space_for(self.params, obs_mode, self.tile_size,
                                                              vocab.num_kinds)
        self.single_action_space = spaces.Discrete(vocab.num_actions)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.co_policy: BatchPolicy | None = build_co_policy(co_policy, num_agents)
        self.metadata.update(game_metadata(self.params, vocab, self.co_policy))
        self._check_co_actions = type(self.co_policy) not in (RandomPolicy, GreedyPolicy)
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
    def reset(self, *, seed: int | list[int] | None = None,
              options: dict | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset all worlds, or those in ``options["reset_mask"]`` (``(N,)`` bool)."""
        if isinstance(seed, (list, tuple)):
            raise ValueError("TreasurehuntVectorEnv draws all worlds from one generator: pass "
                             "one int seed, not a list of per-world seeds")
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        if options:
            raise ValueError(f"unknown reset option(s) {sorted(options)}; supported: 'reset_mask' "
                             f"(layouts are a single-env option: use gymnasium.make)")
        if mask is not None:
            mask = np.asarray(mask)
            if mask.shape != (self.num_envs,) or mask.dtype != np.bool_:
                raise ValueError(f"reset_mask must be a bool array of shape ({self.num_envs},), "
                                 f"got {mask.dtype} of shape {mask.shape}")
        super().reset(seed=seed)
        if seed is not None or not self._started:
            self._co_rng = np.random.default_rng(self.np_random.integers(2**63))
            if self.co_policy is not None:
                self.co_policy.seed(self._co_rng)
        if mask is None or not self._started:
            self.world.reset(self.np_random)  # every world; restarts the spawn draws too
            mask = self._all
        else:
            self.world.reset(self.np_random, mask)
        self._started = True
        self._returns[mask] = 0.0
        self._co_start[mask] = True
        self._needs_reset[mask] = False
        self._views = self._encode_views()
        return self._observations(), self._infos(None, None, None)

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every world with ``actions`` ``(N,)`` (the learners'); see the class docstring."""
        if not self._started:
            raise ResetNeeded("cannot call step() before reset()")
        actions = self._validate(actions)
        n = self.num_envs
        active = None
        if self.autoreset_mode == AutoresetMode.NEXT_STEP and self._needs_reset.any():
            # Worlds that ended last step restart now; their actions are ignored.
            resetting = self._needs_reset.copy()
            self._reset_worlds(resetting)
            self._views = self._encode_views()
            active = ~resetting
        self._actions[:, 0] = actions
        if self.co_policy is not None:
            co_obs = self._views[:, 1:].reshape(-1, self.vocab.num_kinds, self._side, self._side)
            co = self.co_policy.act(co_obs, self._co_start.reshape(-1))
            if self._check_co_actions:
                co = check_policy_actions(co, co_obs.shape[0], self.co_policy.policy_id)
            # A resetting world's co-players acted on its first view but did not move: their
            # next call is still the first of the episode.
            if active is None:
                self._co_start[:] = False
            else:
                self._co_start &= resetting[:, None]
            self._actions[:, 1:] = co.reshape(n, -1)
        rewards, target_codes = self.world.step(self._actions, self.np_random, active)
        self._returns += rewards
        self._views = self._encode_views()
        truncated = self.world.truncated()
        terminated = np.zeros(n, dtype=bool)
        infos = self._infos(rewards, target_codes, active)
        if self.autoreset_mode == AutoresetMode.SAME_STEP and truncated.any():
            # Gymnasium's SAME_STEP convention: the ended worlds restart now; their last
            # observation (object array) and info come in final_obs / final_info.
            last_obs = self._observations()
            final_obs = np.full(n, None, dtype=object)
            for i in np.flatnonzero(truncated):
                final_obs[i] = last_obs[i].copy()
            final_info = _masked(infos, truncated)
            self._reset_worlds(truncated)
            self._views = self._encode_views()
            infos = self._infos(rewards, target_codes, ~truncated)
            infos["final_obs"], infos["_final_obs"] = final_obs, truncated.copy()
            infos["final_info"], infos["_final_info"] = final_info, truncated.copy()
        else:
            self._needs_reset = truncated.copy()
        return self._observations(), rewards[:, 0].copy(), terminated, truncated, infos

    def render(self) -> tuple[np.ndarray, ...] | tuple[str, ...] | None:
        if self.render_mode is None:
            return None
        grids, rcs = self.world.grid, self.world.agent_rc()
        if self.render_mode == "ansi":
            scores = self._returns[:, 0]
            return tuple(render_ansi(g, rc, self.params, turn=int(t), score=float(s))
                         for g, rc, t, s in zip(grids, rcs, self.world.turn, scores, strict=True))
        return tuple(render_rgb(g, rc, self.params) for g, rc in zip(grids, rcs, strict=True))

    # ------------------------------------------------------------------ helpers
    def _validate(self, actions) -> np.ndarray:
        arr = np.asarray(actions)
        if arr.shape != (self.num_envs,):
            raise ValueError(f"actions must have shape ({self.num_envs},), one per world, "
                             f"got shape {arr.shape}")
        n = self.vocab.num_actions
        if arr.dtype.kind not in "iu":
            raise TypeError(f"actions must be integers in 0..{n - 1}, got dtype {arr.dtype}")
        # Seen as unsigned, negative actions are huge: one reduction checks both bounds.
        unsigned = arr.view(np.dtype(f"u{arr.dtype.itemsize}")) if arr.dtype.kind == "i" else arr
        if unsigned.max() >= n:
            bad = np.flatnonzero((arr < 0) | (arr >= n))
            raise ValueError(f"actions out of range 0..{n - 1} at worlds {bad[:8].tolist()}: "
                             f"{arr[bad[:8]].tolist()}")
        return arr

    def _encode_views(self) -> np.ndarray:
        return one_hot(self.world.views(), self._side, self.vocab.num_kinds)

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
        return full_map_observation(self.world.grid, self.world.agent_rc()[:, 0], self.vocab.num_kinds)

    def _infos(self, rewards: np.ndarray | None, target_codes: np.ndarray | None,
               stepped: np.ndarray | None) -> dict:
        """Vector infos, keyed and masked as Gymnasium's own vector envs batch the single
        env's infos: a world that reset this step (or every world, after ``reset``) reports
        reset info, with no pickups or bumps and no ``co_actions``/``co_rewards``.

        ``stepped`` ``(N,)`` marks the worlds that played this step (all when None).
        """
        n, vocab = self.num_envs, self.vocab
        if target_codes is None:
            learner = np.full(n, vocab.empty, dtype=np.int8)
        else:
            learner = target_codes[:, 0]
            if stepped is not None:
                learner = np.where(stepped, learner, vocab.empty)
        pickups = {vocab.cells[code].name: (learner == code).astype(np.int64) for code in vocab.pickup_codes}
        infos: dict[str, Any] = {
            "turn": self.world.turn.copy(),
            "positions": self.world.agent_rc(),
            "pickups": pickups,
            "bumped": learner == vocab.wall,
            "episode_return": self._returns[:, 0].copy(),
            "level": self.world.level.copy(),
        }
        # Every world has these keys: one read-only all-True mask serves them all.
        everywhere = np.ones(n, dtype=bool)
        everywhere.flags.writeable = False
        pickups.update({"_" + name: everywhere for name in list(pickups)})
        if self.params.num_agents > 1:
            infos["co_obs"] = self._views[:, 1:]
            infos["co_returns"] = self._returns[:, 1:].copy()
        for key in list(infos):
            infos["_" + key] = everywhere
        if target_codes is not None and self.params.num_agents > 1:
            step_mask = everywhere if stepped is None else stepped.copy()
            infos["co_actions"], infos["_co_actions"] = self._actions[:, 1:].copy(), step_mask
            infos["co_rewards"], infos["_co_rewards"] = rewards[:, 1:].copy(), step_mask
        return infos


def _masked(infos: dict, mask: np.ndarray) -> dict:
    """A copy of vector ``infos`` whose ``_key`` masks are ANDed with ``mask`` (recursively)."""
    out: dict[str, Any] = {}
    for key, value in infos.items():
        if isinstance(value, dict):
            out[key] = _masked(value, mask)
        elif key.startswith("_"):
            out[key] = value & mask
        else:
            out[key] = value
    return out
