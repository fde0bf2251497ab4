"""Trajectory files as data sources: open one, check that it fits a model, record what was read.

The trajectory file (`rpg_env.trajectories`, schema in docs/trajectory-format.md) is the only
contract with the game: its metadata names the channels of a view (``channel_names``) and the
actions (``action_names``), and the world model takes its vocabulary from there, never from
channel numbers of its own.

A `DataSource` is one file's metadata and per-episode table, read once and closed; the data
itself is read by the stores of `rpg_worldmodel.data.stores`, and several files are put
together into one table of games by `rpg_worldmodel.data.shards`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rpg_base.errors import InputError
from rpg_base.typed_config.values import ConfigError
from rpg_env.game.constants import vocabulary
from rpg_env.trajectories.reader import TrajectoryFile
from rpg_worldmodel.config import ModelConfig
from rpg_worldmodel.data.kinds import FRAME_KINDS


class DataMismatchError(ConfigError, InputError):
    """A trajectory file that does not fit a model config or checkpoint (both sides are named)."""


@dataclass(frozen=True)
class DataSource:
    """One trajectory file: ``meta`` (obs_shape, channel_names, action_names, env_id, ...) and
    ``table``, its structured per-episode table (game_id, agent_id, policy_id, length, ...)."""

    path: Path
    meta: dict[str, Any]
    table: np.ndarray

    @classmethod
    def open(cls, path: str | Path) -> DataSource:
        """Read a file's metadata and episode table (the file is closed again)."""
        with TrajectoryFile(path) as tf:
            return cls(Path(path), dict(tf.meta), tf.episodes)

    def __len__(self) -> int:
        return len(self.table)

    @property
    def channel_names(self) -> list[str]:
        return [str(c) for c in self.meta["channel_names"]]

    @property
    def action_names(self) -> list[str]:
        return [str(a) for a in self.meta["action_names"]]

    @property
    def fingerprint(self) -> str:
        """The file's content digest (`file_digest`)."""
        return file_digest(self.path)


_DIGESTS: dict[tuple[str, int, int], str] = {}


def file_digest(path: str | Path) -> str:
    """A trajectory file's content digest (`TrajectoryFile.digest`, as recorded by training);
    cached per (path, size, mtime) so a file is hashed once per process."""
    p = Path(path).resolve()
    stat = p.stat()
    key = (str(p), stat.st_size, stat.st_mtime_ns)
    if key not in _DIGESTS:
        with TrajectoryFile(p) as tf:
            _DIGESTS[key] = tf.digest()
    return _DIGESTS[key]


@dataclass(frozen=True)
class RewardClasses:
    """The rewards the learner can get in a file's game, one class each: ``values`` (points,
    ascending) and ``names`` (what gives them, e.g. ``"bone"``, ``"wall bump"``, ``"nothing"``)."""

    values: tuple[float, ...]
    names: tuple[str, ...]

    def names_for(self, values: Sequence[float]) -> tuple[str, ...]:
        """Names of ``values`` (e.g. a model's reward classes); unknown values by their points."""
        known = dict(zip(self.values, self.names, strict=True))
        return tuple(known.get(float(v), f"{float(v):+g}") for v in values)


def kind_values(meta: dict[str, Any]) -> np.ndarray:
    """``(C,)`` float points of moving into (or bumping into) each channel's kind of cell.

    A kind gives the points its vocabulary row names (``gem_value``, ``wall_penalty``...), read
    from the file's ``env_kwargs`` (the game's default when absent); kinds without points (empty
    cells, agents, which block) and kinds the vocabulary does not know give 0.
    """
    vocab = vocabulary()
    rules = meta.get("env_kwargs") or {}
    values = np.zeros(len(meta["channel_names"]), dtype=np.float64)
    for i, name in enumerate(meta["channel_names"]):
        if name in vocab.cell_names:
            kind = vocab.cells[vocab.code(name)]
            if kind.value_param is not None:
                values[i] = float(rules.get(kind.value_param, kind.default_value))
    return values


def plays_the_game(meta: dict[str, Any]) -> bool:
    """Whether a file records the treasurehunt game (or a variant with kinds of its own): its views
    have the game's frame, floor, walls and agents (`rpg_worldmodel.data.kinds.FRAME_KINDS`). Only
    then do the game's point table and the oracles that know its moves apply; another gridworld
    that happens to name a channel ``wall`` (but draws no agents) is not the game."""
    return set(FRAME_KINDS) <= set(meta["channel_names"])


#: The most reward classes read off the rewards of a game without a point table (`observed_rewards`).
MAX_REWARD_CLASSES = 16


def fill_view_shape(model: ModelConfig, meta: dict[str, Any]) -> None:
    """Take the file's view shape ``(C, V, V)`` and action count where a new ``model`` keeps the
    defaults (a model sized for one game's files, trained on another's), with the default patch
    size lowered to the largest that tiles the file's view; a model given other sizes, and a trained
    model's config (resumed, fine-tuned), are checked against the file as they are
    (`check_data_matches`)."""
    default = ModelConfig()
    keys = ("num_channels", "view_size", "num_actions")
    sized = tuple(getattr(model, k) for k in keys) != tuple(getattr(default, k) for k in keys)
    if model.kind_limits or sized:
        return  # a trained model's config (its kind limits read off its files), or sized by hand
    c, v = int(meta["obs_shape"][0]), int(meta["obs_shape"][-1])
    model.num_channels, model.view_size, model.num_actions = c, v, len(meta["action_names"])
    if model.patch_size == default.patch_size:
        model.patch_size = max(p for p in range(1, default.patch_size + 1) if v % p == 0)
    model.validate()


def fill_game_settings(model: ModelConfig, meta: dict[str, Any], rewards: Callable[[], np.ndarray]) -> None:
    """Fill the model settings a config leaves empty that are the training data's: its reward
    classes, the game's point table for a file of the game (`reward_classes`, every value it can
    pay), else read off the training split's rewards (``rewards()``, `observed_rewards`). Resolved
    once, then part of the config (and of every checkpoint). Nothing else of the game is given to
    the model: it learns it."""
    if model.reward_head and not model.reward_values:
        game = plays_the_game(meta)
        model.reward_values = reward_classes(meta).values if game else observed_rewards(rewards())


def observed_rewards(rewards: np.ndarray, most: int = MAX_REWARD_CLASSES) -> tuple[float, ...]:
    """Reward classes read off a game's rewards: 0 and every distinct reward (to 1e-4), or past
    ``most`` of them, ``most - 1`` evenly spaced from the least to the most, and 0. A reward between
    two classes scores as their two-hot mix (`rpg_worldmodel.models.heads.reward_weights`)."""
    seen = np.unique(np.round(np.asarray(rewards, dtype=np.float64), 4))
    values = set(seen.tolist()) | {0.0}
    if len(values) > most:
        values = {round(float(x), 4) for x in np.linspace(seen.min(), seen.max(), most - 1)} | {0.0}
    return tuple(sorted(values))


def reward_classes(meta: dict[str, Any]) -> RewardClasses:
    """The reward classes of a trajectory file's game, from its ``channel_names`` and ``env_kwargs``
    (`kind_values`): one class per distinct value, 0 ("nothing": an empty cell, a blocked move)
    always among them; kinds worth the same points share a class. A file of another game
    (`plays_the_game`) has only "nothing" here: its classes are read off its rewards."""
    if not plays_the_game(meta):  # another game: its rewards are learned from its files
        return RewardClasses((0.0,), ("nothing",))
    vocab = vocabulary()
    by_value: dict[float, list[str]] = {0.0: ["nothing"]}
    for name, value in zip(meta["channel_names"], kind_values(meta), strict=True):
        if name in vocab.cell_names and vocab.cells[vocab.code(name)].value_param is not None:
            kind = vocab.cells[vocab.code(name)]
            by_value.setdefault(float(value), []).append(name if kind.passable else f"{name} bump")
    values = tuple(sorted(by_value))
    return RewardClasses(values, tuple("|".join(by_value[v]) for v in values))


def check_data_matches(
    model_cfg: ModelConfig,
    data_meta: dict,
    *,
    data_path: str | Path = "the data file",
    model_source: str = "the model config",
    trained_on: dict | None = None,
) -> None:
    """Raise `DataMismatchError` naming both sides when a trajectory file does not fit a model.

    ``trained_on`` (a checkpoint's data record) adds a check that the file names the same
    channels and actions, in the same order, as the data the model was trained on.
    """
    expected = (model_cfg.num_channels, model_cfg.view_size, model_cfg.view_size)
    got = tuple(int(x) for x in data_meta["obs_shape"])
    problems = []
    if got != expected:
        problems.append(f"views {got} in {data_path} but {expected} in {model_source}")
    n_actions = len(data_meta["action_names"])
    if n_actions != model_cfg.num_actions:
        problems.append(
            f"{n_actions} actions in {data_path} but model.num_actions={model_cfg.num_actions} in "
            f"{model_source}"
        )
    for key in ("channel_names", "action_names"):
        names, trained = list(data_meta[key]), (trained_on or {}).get(key)
        if trained is not None and names != list(trained):
            problems.append(f"{key} {names} in {data_path} but {list(trained)} in {model_source}")
    if model_cfg.reward_head and model_cfg.reward_values:
        missing = sorted(set(reward_classes(data_meta).values) - set(model_cfg.reward_values))
        if missing:
            problems.append(f"rewards {missing} of the game in {data_path} are not among the reward "
                            f"classes {list(model_cfg.reward_values)} of {model_source}")
    if problems:
        raise DataMismatchError(
            "trajectory file and model do not match: "
            + "; ".join(problems)
            + ". Record data with the same game settings, or set model.view_size / "
            "model.num_actions to the file's values for a new model."
        )
