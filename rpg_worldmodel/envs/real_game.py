"""The real game a checkpoint learned, made again from its files: the env id and keyword arguments
they were recorded with (`rpg_worldmodel.run_record.DataRecord`).

An imagined env takes from it what the model does not predict: how long an episode runs, who plays
the real opening (greedy in the treasurehunt game, random elsewhere), the real worlds that opening is
played in, and how a view is drawn (the env's declared kind colours, `rpg_env.envs.protocol`). The
treasurehunt game keeps its own drawing (`rpg_env.render.render_view`) and co-players; any other game
is reached only through Gymnasium and the env protocol, so nothing here names it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from rpg_base.errors import InputError
from rpg_env.envs.any_env import make_vector
from rpg_env.envs.protocol import EnvDescription, describe
from rpg_env.render import kind_colors, kinds_legend, render_kinds, render_view
from rpg_worldmodel.data.sources import plays_the_game
from rpg_worldmodel.run_record import DataRecord


@dataclass
class RealGame:
    """The game of a checkpoint's files (module docstring); `of` reads it off a `DataRecord`."""

    env_id: str
    env_kwargs: dict[str, Any]
    channel_names: tuple[str, ...]
    action_names: tuple[str, ...]
    unavailable: str | None = field(default=None, init=False)
    """Why the env cannot be made here (see `description`), once that was tried."""

    @classmethod
    def of(cls, data: DataRecord) -> RealGame:
        return cls(data.env_id, dict(data.env_kwargs), tuple(data.channel_names), tuple(data.action_names))

    @property
    def treasurehunt(self) -> bool:
        """Whether it is the treasurehunt game (or a variant of it), with its moves and co-players."""
        return plays_the_game({"channel_names": self.channel_names})

    @functools.cached_property
    def description(self) -> EnvDescription | None:
        """The env's protocol (`describe`) from one env made with the files' arguments; None where it
        cannot be made here (its package is not installed), with the reason in `unavailable`."""
        try:
            env = gym.make(self.env_id, **self.env_kwargs)
        except (gym.error.Error, ImportError, InputError, TypeError, ValueError) as err:
            self.unavailable = f"{type(err).__name__}: {err}"
            return None
        try:
            return describe(env)
        finally:
            env.close()

    @property
    def max_turns(self) -> int:
        """The episode's length in turns: the files' ``max_turns`` setting, else the env's own."""
        if "max_turns" in self.env_kwargs:
            return int(self.env_kwargs["max_turns"])
        described = self.description
        if described is None or described.max_turns is None:
            why = self.unavailable or "it declares no max_turns and has no time limit"
            raise InputError(f"an imagined {self.env_id} needs the real game's episode length, and "
                             f"{self.env_id} cannot tell it here ({why}); install the env's package")
        return int(described.max_turns)

    def default_opener(self) -> str:
        """Who plays the real opening by default: greedy in the treasurehunt game, random elsewhere."""
        return "greedy" if self.treasurehunt else "random"

    def co_players(self, co_policy: Any = None) -> dict[str, Any]:
        """The make keywords of ``co_policy``, who drives the treasurehunt game's co-players (None:
        random); another game has none, and refuses one."""
        if self.treasurehunt:
            return {"co_policy": "random" if co_policy is None else co_policy}
        if co_policy is not None:
            raise InputError(f"co_policy drives the treasurehunt game's co-players; {self.env_id} has none: "
                             f"leave co_policy out")
        return {}

    def make_vector(self, num_envs: int, co_policy: Any = None) -> gym.vector.VectorEnv:
        """``num_envs`` real worlds, their co-players driven by ``co_policy`` (`co_players`)."""
        return make_vector(self.env_id, num_envs, {**self.env_kwargs, **self.co_players(co_policy)})

    def make(self, render_mode: str | None = None) -> gym.Env:
        """One real world, as the files recorded it."""
        return gym.make(self.env_id, render_mode=render_mode, **self.env_kwargs)

    @functools.cached_property
    def colors(self) -> np.ndarray:
        """``(C, 3)`` uint8: how a view colours each kind (the env's declared colours where it can be
        made)."""
        described = self.description
        return kind_colors(self.channel_names, None if described is None else described.channel_colors)

    def render_view(self, codes: np.ndarray) -> np.ndarray:
        """``(V, V)`` cell codes -> ``(H, W, 3)`` uint8 frame of the view."""
        if self.treasurehunt:
            return render_view(codes)
        described = self.description
        return render_kinds(codes, self.colors, None if described is None else described.agent_cell)

    def legend(self) -> list[tuple[np.ndarray, str]]:
        """Legend rows of `render_view`'s colours (another game's; the treasurehunt game has its own)."""
        return kinds_legend(self.channel_names, self.colors)
