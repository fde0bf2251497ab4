"""`MemoryCueEnv`: a proof-of-concept memory task (seed 002's PocMemoryEnv) in Treasurehunt's views.

The map is a corridor of ``2 * length + 1`` floor cells between wall rows, walled at both ends
(``3 x (2 * length + 3)`` cells). The agent starts on the middle cell; at reset one end, left or
right, is drawn (from ``self.np_random``) as the goal. During the first ``cue_turns`` turns the
view shows a cue: a gem on the floor cell next to the agent on the goal side (drawn only, not an
item). Stepping onto an end cell ends the episode: +1 at the goal end (``success``), 0 at the
other; bumping a wall does nothing; ``max_turns`` turns without an end truncate (reward 0). The
wrong end pays 0, not -1, so that reaching an end is worth something (0.5) before the cue is read:
with -1 an agent without the cue gains nothing in expectation by walking to an end, and learning
never starts (measured: one TrXL-PPO seed of two never left the middle).

Observation: ``MultiBinary((K, V, V))`` int8, the egocentric one-hot view exactly as in
Treasurehunt-v0 (``K = vocabulary().num_kinds`` channels, ``V = 2 * vision_radius + 1``, the
agent at the centre, outside the map reads as wall). Action: ``Discrete(4)``, the game's moves.
``info``: ``turn``, ``success``, ``goal_side`` ("left"/"right"), ``episode_return``.

Why memory is needed: the two halves of the corridor are mirror images and nothing but the cue
depends on the goal. An agent acting on the cue makes ``cue_turns`` moves with it (``cue_turns +
k - 1`` with a stack of ``k`` frames); an end wall (``length + 1`` cells from the start) enters
the view ``vision_radius`` cells ahead, so if ``length >= vision_radius + cue_turns (+ k - 1)``
no end is in view when the cue is gone: the views (and so a deterministic memoryless policy's
moves) are the same for both goals, which it finds at chance (50%). Validation requires this for
``k = 1``; with a smaller ``length`` the agent could keep the cue in its position (step towards
the goal while it is shown, then follow the end that comes into view). A stochastic memoryless
policy keeps only a small bias through where it stood when the cue vanished.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import ResetNeeded

from rpg_env.envs.treasurehunt import RENDER_MODES, validate_action
from rpg_env.game.constants import vocabulary
from rpg_env.game.observation import tile_atlas
from rpg_env.game.world import WorldParams
from rpg_env.render import PygameWindow, render_ansi, render_rgb

SIDES = ("left", "right")


def _check_int(name: str, value: Any, low: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int ({what}), got {type(value).__name__} {value!r}")
    if value < low:
        raise ValueError(f"{name} must be >= {low} ({what}), got {value}")
    return int(value)


class MemoryCueEnv(gym.Env[np.ndarray, np.int64]):
    """Remember which side the cue was on, walk to that end of the corridor (module docstring)."""

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": 8}

    def __init__(self, length: int = 6, vision_radius: int = 2, cue_turns: int = 1,
                 max_turns: int | None = None, render_mode: str | None = None) -> None:
        self.length = _check_int("length", length, 2, "cells from the start to each end")
        self.vision_radius = _check_int("vision_radius", vision_radius, 1, "cells seen on each side")
        self.cue_turns = _check_int("cue_turns", cue_turns, 1, "turns from reset showing the cue")
        if self.length < self.vision_radius + self.cue_turns:
            raise ValueError(
                f"length={self.length} must be >= vision_radius + cue_turns = "
                f"{self.vision_radius + self.cue_turns}: otherwise an end is in view right after the "
                f"cue and no memory is needed; raise length or lower vision_radius/cue_turns")
        self.max_turns = 4 * self.length if max_turns is None else _check_int(
            "max_turns", max_turns, 1, "turns before truncation; None for 4 * length")
        if render_mode is not None and render_mode not in RENDER_MODES:
            raise ValueError(f"render_mode must be one of {RENDER_MODES} or None, got {render_mode!r}")
        self.render_mode = render_mode
        self.vocab = vocab = vocabulary()
        self._gem = vocab.code("gem")
        self.params = WorldParams(height=3, width=2 * self.length + 3, vision_radius=self.vision_radius,
                                  num_agents=1, max_turns=self.max_turns)
        side = self.params.view_size
        self.observation_space = spaces.MultiBinary((vocab.num_kinds, side, side))
        self.action_space = spaces.Discrete(vocab.num_actions)
        rules = {"length": self.length, "vision_radius": self.vision_radius,
                 "cue_turns": self.cue_turns, "max_turns": self.max_turns}
        self.metadata = {**type(self).metadata, "channel_names": vocab.cell_names,
                         "action_names": vocab.action_names, "max_turns": self.max_turns, "rules": rules}
        r = self.vision_radius  # the map padded by r cells of wall, so every view is a plain slice
        self._padded = np.full((3 + 2 * r, self.params.width + 2 * r), vocab.wall, dtype=np.int8)
        self._padded[r + 1, r + 1 : r + self.params.width - 1] = vocab.empty
        self._col, self._turn, self._return, self._goal = self.length + 1, 0, 0.0, 1
        self._needs_reset = True
        self._window: PygameWindow | None = None

    def reset(self, *, seed: int | None = None,
              options: dict | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        if options:
            raise ValueError(f"MemoryCue-v0 takes no reset options, got {sorted(options)}")
        super().reset(seed=seed)
        self._goal = int(self.np_random.integers(2))  # 0 left, 1 right
        self._col, self._turn, self._return = self.length + 1, 0, 0.0
        self._needs_reset = False
        if self.render_mode == "human":
            self.render()
        return self._obs(), self._info(False)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._needs_reset:
            raise ResetNeeded("cannot call step(): the episode has ended (or reset() was never "
                              "called); call reset() first")
        d_row, d_col = self.vocab.action_deltas[validate_action(action, self.vocab.num_actions)]
        r = self.vision_radius
        if self.vocab.passable[self._padded[r + 1 + d_row, r + self._col + d_col]]:
            self._col += int(d_col)
        self._turn += 1
        terminated = self._col in (1, 2 * self.length + 1)
        reward = 0.0
        if terminated:
            reward = 1.0 if (self._col > self.length + 1) == bool(self._goal) else 0.0
        self._return += reward
        truncated = not terminated and self._turn >= self.max_turns
        self._needs_reset = terminated or truncated
        if self.render_mode == "human":
            self.render()
        return self._obs(), reward, terminated, truncated, self._info(reward > 0)

    def render(self) -> np.ndarray | str | None:
        if self.render_mode is None:
            gym.logger.warn("render() called without a render_mode; pass render_mode="
                            "'rgb_array', 'ansi' or 'human' to gymnasium.make")
            return None
        r = self.vision_radius
        grid = self._codes(self._padded[r : r + 3, r : -r].copy(), 1, self._col)
        rc = np.array([[1, self._col]])
        if self.render_mode == "ansi":
            return render_ansi(grid, rc, self.params, turn=self._turn, score=self._return)
        frame = render_rgb(grid, rc, self.params)
        if self.render_mode == "rgb_array":
            return frame
        if self._window is None:
            legend = [(tile_atlas(18)[self._gem], "cue: the goal's side"),
                      (tile_atlas(18)[self.vocab.wall], "wall")]
            self._window = PygameWindow(self.metadata["render_fps"], title="MemoryCue", legend=legend)
        self._window.show(frame, header=f"turn {self._turn}/{self.max_turns}   score {self._return:+g}")
        return None

    def close(self) -> None:
        if self._window is not None:
            self._window.close()
            self._window = None

    def _codes(self, codes: np.ndarray, row: int, col: int) -> np.ndarray:
        """``codes`` with the agent at ``(row, col)`` and, while it is shown, the cue beside it."""
        codes[row, col] = self.vocab.agent
        if self._turn < self.cue_turns:
            codes[row, col + (1 if self._goal else -1)] = self._gem
        return codes

    def _obs(self) -> np.ndarray:
        r, c = self.vision_radius, self._col
        codes = self._codes(self._padded[1 : 2 * r + 2, c : c + 2 * r + 1].copy(), r, r)
        return (codes[None] == np.arange(self.vocab.num_kinds, dtype=np.int8)[:, None, None]).view(np.int8)

    def _info(self, success: bool) -> dict[str, Any]:
        return {"turn": self._turn, "success": bool(success), "goal_side": SIDES[self._goal],
                "episode_return": self._return}
