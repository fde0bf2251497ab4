"""Scripted policies: uniform random, greedy (the shortest safe path to the best visible item),
greedy with a share of random actions, and a wall-follower (a wall kept on its right hand).

What the greedy agent goes for and avoids comes from the vocabulary (`rpg_env.game.constants`):
it seeks the pick-ups worth points (the most valuable first), and never steps into walls or
pick-ups that cost points. The wall-follower knows walls and agents only as kinds it cannot enter.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from gymnasium import spaces

from rpg_base.spaces import action_dims
from rpg_env.game.constants import Vocabulary, vocabulary
from rpg_env.policies.base import BatchPolicy

_UNREACHABLE = np.int16(10_000)  # path keys stay below len(targets) * (V * V + 1)


@cache
def _greedy_tables(vocab: Vocabulary) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Per-code tables: target key (``len(targets) * steps + rank``), never-passed, hazard."""
    targets = vocab.good_pickups
    target_key = np.full(vocab.num_kinds, _UNREACHABLE, dtype=np.int16)
    for rank, code in enumerate(targets):
        target_key[code] = rank
    never = np.zeros(vocab.num_kinds, dtype=np.int16)
    never[[*vocab.hazards, vocab.agent]] = _UNREACHABLE
    hazard = np.zeros(vocab.num_kinds, dtype=bool)
    hazard[list(vocab.hazards)] = True
    return target_key, never, hazard, max(len(targets), 1)


class RandomPolicy(BatchPolicy):
    """Uniform random actions: the game's moves, or any `Discrete` or `MultiDiscrete` ``action_space``.

    Actions are drawn from the policy's generator in blocks of ``block`` and handed out in
    order, which makes a one-world step far cheaper than one generator call per step. The
    actions depend only on the generator given to ``seed`` and the batch sizes asked for. With a
    `MultiDiscrete` space each action is a row of ``K`` choices, ``(B, K)``.
    """

    policy_id = "random"

    def __init__(self, block: int = 4096, action_space: spaces.Space | None = None) -> None:
        super().__init__()
        if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
            raise ValueError(f"block must be a positive int, got {block!r}")
        self.block = int(block)
        self.dims = (vocabulary().num_actions,) if action_space is None else action_dims(action_space)
        self._multi = isinstance(action_space, spaces.MultiDiscrete)
        self._buffer = np.empty((0, len(self.dims)), dtype=np.int64)
        self._next = 0

    def seed(self, rng: np.random.Generator) -> None:
        super().seed(rng)
        self._buffer = np.empty((0, len(self.dims)), dtype=np.int64)  # drawn from the previous generator
        self._next = 0

    def act(self, obs: np.ndarray, episode_start: np.ndarray | None = None) -> np.ndarray:
        b = len(obs)
        start = self._next
        if start + b > len(self._buffer):
            rest = self._buffer[start:]
            size = max(self.block, b)
            fresh = (self.rng.integers(0, self.dims[0], size=size, dtype=np.int64)[:, None]
                     if len(self.dims) == 1
                     else self.rng.integers(0, self.dims, size=(size, len(self.dims)), dtype=np.int64))
            self._buffer, start = np.concatenate([rest, fresh]), 0
        self._next = start + b
        actions = self._buffer[start : start + b]
        return actions if self._multi else actions[:, 0]


class GreedyPolicy(BatchPolicy):
    """Scripted baseline: walk the shortest safe path to the nearest visible valuable item.

    Distances are computed inside the agent's view by breadth-first search over cells that
    are not hazards (walls, costly pick-ups such as bones) or agents, vectorized over the batch
    as repeated 4-neighbour relaxation. Between equally near items the more valuable kind wins
    (gem before food), then a random choice. With no reachable item in view, it takes a random
    safe step and keeps its heading with probability ``persistence`` so it explores instead of
    dithering.
    """

    policy_id = "greedy"

    def __init__(self, persistence: float = 0.7) -> None:
        super().__init__()
        if not 0.0 <= persistence <= 1.0:
            raise ValueError(f"persistence must be a probability in [0, 1], got {persistence!r}")
        self.persistence = persistence
        self._heading: np.ndarray | None = None

    def seed(self, rng: np.random.Generator) -> None:
        super().seed(rng)
        self._heading = None  # headings were drawn from the previous generator

    def act(self, obs: np.ndarray, episode_start: np.ndarray | None = None) -> np.ndarray:
        obs = np.asarray(obs)
        b = len(obs)
        num_actions = vocabulary().num_actions
        nxt, unsafe = _move_keys(obs)
        has_target = nxt.min(axis=1) < _UNREACHABLE

        if self._heading is None or len(self._heading) != b:
            # No heading yet (or a new batch size): every row starts afresh. Drawing only
            # here keeps the generator's use the same whether or not the policy is reused.
            episode_start = np.ones(b, dtype=bool)
            self._heading = np.zeros(b, dtype=np.int64)
        if episode_start is not None and np.any(episode_start):
            self._heading = np.where(episode_start, self.rng.integers(0, num_actions, size=b),
                                     self._heading)
        noise = self.rng.random((b, num_actions))
        # Target-seeking: minimum distance, random tie-break.
        seek = np.argmin(nxt * 2.0 + noise, axis=1)
        # Exploring: random safe move, biased toward the current heading.
        keep = (self.rng.random(b) < self.persistence)[:, None] & (
            np.arange(num_actions) == self._heading[:, None])
        explore_score = noise + unsafe * 10.0 - keep * 2.0
        explore = np.argmin(explore_score, axis=1)
        actions = np.where(has_target, seek, explore).astype(np.int64)
        self._heading = actions
        return actions


class EpsilonGreedyPolicy(GreedyPolicy):
    """`GreedyPolicy` that takes a uniform random action instead with probability ``epsilon``
    (0.3 by default: a greedy player that often strays, bumping walls now and then)."""

    policy_id = "eps-greedy"

    def __init__(self, epsilon: float = 0.3, persistence: float = 0.7) -> None:
        super().__init__(persistence)
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be a probability in [0, 1], got {epsilon!r}")
        self.epsilon = epsilon

    def act(self, obs: np.ndarray, episode_start: np.ndarray | None = None) -> np.ndarray:
        actions = super().act(obs, episode_start)
        stray = self.rng.random(len(actions)) < self.epsilon
        drawn = self.rng.integers(0, vocabulary().num_actions, size=len(actions))
        self._heading = np.where(stray, drawn, actions).astype(np.int64)
        return self._heading.copy()


class WallFollowerPolicy(BatchPolicy):
    """Follows walls with a wall on its right hand (the maze walker's rule).

    Each row keeps a heading (drawn at the episode's start) and walks straight on; where its way
    is blocked (a kind it cannot enter: a wall or an agent) it turns left until the way is free, so
    a wall it meets ends up on its right; where the wall it had on its right a step ago ends, it
    turns right round the wall's end. In the open room it walks the border round and round, so the
    border stays in view; in a level it walks the rooms' walls.
    """

    policy_id = "wall-follower"

    def __init__(self) -> None:
        super().__init__()
        vocab = vocabulary()
        deltas = [tuple(d) for d in vocab.action_deltas.tolist()]
        self._right = np.array([deltas.index((dc, -dr)) for dr, dc in deltas], dtype=np.int64)
        self._left = np.array([deltas.index((-dc, dr)) for dr, dc in deltas], dtype=np.int64)
        self._heading: np.ndarray | None = None
        self._wall_was_right: np.ndarray | None = None

    def seed(self, rng: np.random.Generator) -> None:
        super().seed(rng)
        self._heading = self._wall_was_right = None

    def act(self, obs: np.ndarray, episode_start: np.ndarray | None = None) -> np.ndarray:
        vocab = vocabulary()
        codes = np.asarray(obs).argmax(axis=1)
        b, side = len(codes), codes.shape[-1]
        if self._heading is None or len(self._heading) != b:
            episode_start = np.ones(b, dtype=bool)
            self._heading, self._wall_was_right = np.zeros(b, dtype=np.int64), np.zeros(b, dtype=bool)
        if episode_start is not None and np.any(episode_start):
            self._heading = np.where(episode_start, self.rng.integers(0, vocab.num_actions, size=b),
                                     self._heading)
            self._wall_was_right &= ~np.asarray(episode_start, dtype=bool)
        if side == 1:  # nothing seen around: walk on
            return self._heading.copy()
        c, rows = side // 2, np.arange(b)
        ahead = codes[:, c + vocab.action_deltas[:, 0], c + vocab.action_deltas[:, 1]]  # (B, A)
        wall, blocked = ahead == vocab.wall, ~vocab.passable[ahead]
        heading = self._heading
        wall_ended = self._wall_was_right & ~wall[rows, self._right[heading]]
        heading = np.where(wall_ended, self._right[heading], heading)
        for _ in range(vocab.num_actions - 1):
            heading = np.where(blocked[rows, heading], self._left[heading], heading)
        self._heading, self._wall_was_right = heading, wall[rows, self._right[heading]]
        return heading.copy()


def _move_keys(obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For one-hot views ``obs`` (B, C, V, V): the distance key of each move, (B, A) int16 (``m *
    steps + rank`` of the nearest item worth going for that the move leads to; `_UNREACHABLE` when
    none or when the move is unsafe), and which moves are unsafe (B, A) bool (they enter a hazard)."""
    b, _, side, _ = obs.shape
    vocab = vocabulary()
    target_key, never_passed, hazard, m = _greedy_tables(vocab)
    c = side // 2
    big = _UNREACHABLE
    codes = obs.argmax(axis=1)  # (B, V, V) cell codes: one gather per table below
    # Distance-to-target field with a border of "unreachable" around the view, so each
    # relaxation is four shifted minimums. Keys: m * steps + rank of the item kind (m
    # kinds worth going for), so the nearer item wins and the more valuable wins ties.
    padded = np.full((b, side + 2, side + 2), big, dtype=np.int16)
    dist = padded[:, 1:-1, 1:-1]
    dist[...] = target_key.take(codes)
    dist[:, c, c] = big  # standing still is not a target
    never = never_passed.take(codes)  # hazards and agents stay unreachable
    if side == 1:  # the agent sees only itself: no target, every move unknown
        nxt = np.full((b, vocab.num_actions), big, dtype=np.int16)
        unsafe = np.ones((b, vocab.num_actions), dtype=bool)
    else:
        # The cell each move enters.
        rows, cols = (c + vocab.action_deltas).T.tolist()
        changed = np.ones(b, dtype=bool)
        # After k relaxations every path of length <= k is in the field, so a move key
        # <= m * k + m - 1 is exact and no other move can beat it: a row is done then, or
        # when its field stops changing. Most views have a target a few steps away, so this
        # stops long before the whole field settles. At most V * V relaxations (a
        # winding corridor) are ever needed.
        for k in range(side * side + 1):
            done = (dist[:, rows, cols].min(axis=1) <= m * k + m - 1) | ~changed
            if done.all():
                break
            relaxed = np.minimum(padded[:, :-2, 1:-1], padded[:, 2:, 1:-1])
            np.minimum(relaxed, padded[:, 1:-1, :-2], out=relaxed)
            np.minimum(relaxed, padded[:, 1:-1, 2:], out=relaxed)
            relaxed += m
            np.maximum(relaxed, never, out=relaxed)
            np.minimum(relaxed, dist, out=relaxed)
            changed = (relaxed != dist).any(axis=(1, 2))
            dist[...] = relaxed
        # Score of each move: the distance key at the next cell.
        nxt = dist[:, rows, cols]
        unsafe = hazard.take(codes[:, rows, cols])
    return np.where(unsafe, big, nxt), unsafe
