"""Train/val/test splits of a trajectory file's streams, by game and deterministic."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from rpg_env.trajectories.reader import TrajectoryFile

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = (x + np.uint64(0x9E3779B97F4A7C15)) & _MASK64
    x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK64
    x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK64
    return x ^ (x >> np.uint64(31))


def game_keys(game_ids: np.ndarray, seed: int = 0) -> np.ndarray:
    """A deterministic uniform number in [0, 1) per game id (a hash of ``(seed, game_id)``)."""
    with np.errstate(over="ignore"):
        mixed = _splitmix64(np.asarray(game_ids, dtype=np.int64).astype(np.uint64)
                            ^ _splitmix64(np.array([int(seed) & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64)))
    return (mixed >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def split_episodes(
    tf: TrajectoryFile | np.ndarray,
    fractions: Sequence[float] = (0.8, 0.1, 0.1),
    seed: int = 0,
    *,
    stable: bool = False,
) -> dict[str, np.ndarray]:
    """Split episodes into ``{"train", "val", "test"}`` index arrays, by game.

    All streams of a game go to the same split, so a model never sees the co-player's view of
    a test game during training. Games are ordered by a hash of ``(seed, game_id)``:

    - ``stable=False`` (default): exact counts, ``round(fraction * n_games)`` by largest
      remainder, with at least one game in every split whose fraction is > 0 (when there are
      enough games).
    - ``stable=True``: a game goes to the split its hash falls in (fractions as probability
      thresholds), so a game's split never changes when the file grows by appending; counts
      are then only approximately proportional.

    ``tf`` is a `TrajectoryFile` or its ``episodes`` table. Index arrays are sorted int64.
    """
    table = tf.episodes if hasattr(tf, "episodes") else np.asarray(tf)
    fr = np.asarray(fractions, dtype=np.float64)
    if fr.shape != (3,) or (fr < 0).any() or not math.isclose(fr.sum(), 1.0, abs_tol=1e-6):
        raise ValueError(f"fractions must be three non-negative numbers (train, val, test) summing "
                         f"to 1, got {tuple(fractions)}")
    games, inverse = np.unique(table["game_id"], return_inverse=True)
    keys = game_keys(games, seed)
    n = len(games)
    if stable:
        edges = np.cumsum(fr)
        edges[-1] = 1.0 + 1e-12
        assign = np.searchsorted(edges, keys, side="right")
    else:
        counts = np.floor(fr * n).astype(np.int64)
        order = np.argsort(-(fr * n - counts), kind="stable")
        for j in order[: n - counts.sum()]:
            counts[j] += 1
        # Give every split with a positive fraction at least one game, taken from the largest.
        for j in range(3):
            if fr[j] > 0 and counts[j] == 0 and n >= int((fr > 0).sum()):
                donor = int(np.argmax(counts))
                counts[donor] -= 1
                counts[j] += 1
        rank = np.empty(n, dtype=np.int64)
        rank[np.argsort(keys, kind="stable")] = np.arange(n)
        assign = np.searchsorted(np.cumsum(counts), rank, side="right")
    stream_split = assign[inverse]
    return {name: np.flatnonzero(stream_split == j).astype(np.int64)
            for j, name in enumerate(("train", "val", "test"))}


def fewest_games(fractions: Sequence[float] = (0.8, 0.1, 0.1)) -> int:
    """The fewest games that `split_episodes` (exact counts) deals into a training and a validation
    split with a game each: what a world model's data needs at least, known before any is recorded.
    ``fractions`` must give both a share > 0."""
    if not (fractions[0] > 0 and fractions[1] > 0):
        raise ValueError(f"fractions need a train and a validation share > 0, got {tuple(fractions)}")
    games = 1
    while True:
        table = np.zeros(games, dtype=[("game_id", np.int64)])
        table["game_id"] = np.arange(games)
        splits = split_episodes(table, fractions)
        if len(splits["train"]) and len(splits["val"]):
            return games
        games += 1
