"""Co-player and baseline policies, all batched: ``(B, 6, V, V)`` one-hot views -> ``(B,)`` actions.

The co-player protocol (`BatchPolicy`) mirrors Stable-Baselines3's ``predict``: a policy gets
a batch of observations and an ``episode_start`` mask (so stateful policies, e.g. one that
stacks frames, can clear their memory), and returns one action per row. Policies draw their
randomness from a generator the environment hands them through ``seed``, so a seeded reset
makes the whole game reproducible.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rpg_env.core import AGENT, BONE, FOOD, GEM, NUM_ACTIONS, NUM_CELL_KINDS, WALL

# GreedyPolicy's per-code tables (indexed by cell code).
_UNREACHABLE = np.int16(10_000)  # path keys stay below 2 * V * V + 2
_TARGET_KEY = np.full(NUM_CELL_KINDS, _UNREACHABLE, dtype=np.int16)
_TARGET_KEY[GEM], _TARGET_KEY[FOOD] = 0, 1
_NEVER_PASSED = np.zeros(NUM_CELL_KINDS, dtype=np.int16)
_NEVER_PASSED[[WALL, BONE, AGENT]] = _UNREACHABLE
_HAZARD = np.zeros(NUM_CELL_KINDS, dtype=bool)
_HAZARD[[WALL, BONE]] = True


class BatchPolicy(abc.ABC):
    """A policy over batches of one-hot egocentric views."""

    #: Short stable name recorded with every trajectory the policy drives.
    policy_id: str = "policy"

    def __init__(self) -> None:
        self.rng = np.random.default_rng()

    def seed(self, rng: np.random.Generator) -> None:
        """Use ``rng`` for every random choice from now on."""
        self.rng = rng

    @abc.abstractmethod
    def act(self, obs: np.ndarray, episode_start: np.ndarray | None = None) -> np.ndarray:
        """``obs`` ``(B, 6, V, V)`` uint8, ``episode_start`` ``(B,)`` bool -> ``(B,)`` int64."""

    def __call__(self, obs: np.ndarray) -> int:
        """Single-observation convenience: ``(6, V, V)`` -> action."""
        return int(self.act(obs[None])[0])


class RandomPolicy(BatchPolicy):
    """Uniform random actions.

    Actions are drawn from the policy's generator in blocks of ``block`` and handed out in
    order, which makes a one-world step far cheaper than one generator call per step. The
    actions depend only on the generator given to ``seed`` and the batch sizes asked for.
    """

    policy_id = "random"

    def __init__(self, block: int = 4096) -> None:
        super().__init__()
        if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
            raise ValueError(f"block must be a positive int, got {block!r}")
        self.block = int(block)
        self._buffer = np.empty(0, dtype=np.int64)
        self._next = 0

    def seed(self, rng: np.random.Generator) -> None:
        super().seed(rng)
        self._buffer = np.empty(0, dtype=np.int64)  # drawn from the previous generator
        self._next = 0

    def act(self, obs: np.ndarray, episode_start: np.ndarray | None = None) -> np.ndarray:
        b = len(obs)
        start = self._next
        if start + b > self._buffer.size:
            rest = self._buffer[start:]
            fresh = self.rng.integers(0, NUM_ACTIONS, size=max(self.block, b), dtype=np.int64)
            self._buffer, start = np.concatenate([rest, fresh]), 0
        self._next = start + b
        return self._buffer[start : start + b]


class GreedyPolicy(BatchPolicy):
    """Scripted baseline: walk the shortest safe path to the nearest visible gem or food.

    Distances are computed inside the agent's view by breadth-first search over cells that
    are not walls, bones or agents (vectorized over the batch as repeated 4-neighbour
    relaxation). Ties go to gems, then to a random choice. With no reachable gem or food in
    view, it takes a random safe step (never into a wall or a bone) and keeps its heading
    with probability ``persistence`` so it explores instead of dithering.
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
        b, _, side, _ = obs.shape
        c = side // 2
        big = _UNREACHABLE
        codes = obs.argmax(axis=1)  # (B, V, V) cell codes: one gather per table below
        # Distance-to-target field with a border of "unreachable" around the view, so each
        # relaxation is four shifted minimums. Keys: 2 * steps to a gem, 2 * steps + 1 to
        # food, so the nearer target wins and gems win ties.
        padded = np.full((b, side + 2, side + 2), big, dtype=np.int16)
        dist = padded[:, 1:-1, 1:-1]
        dist[...] = _TARGET_KEY.take(codes)
        dist[:, c, c] = big  # standing still is not a target
        never = _NEVER_PASSED.take(codes)  # walls, bones and agents stay unreachable
        if side == 1:  # the agent sees only itself: no target, every move unknown
            nxt = np.full((b, NUM_ACTIONS), big, dtype=np.int16)
            unsafe = np.ones((b, NUM_ACTIONS), dtype=bool)
        else:
            # The four cells a move enters (up, down, left, right).
            rows, cols = [c - 1, c + 1, c, c], [c, c, c - 1, c + 1]
            changed = np.ones(b, dtype=bool)
            # After k relaxations every path of length <= k is in the field, so a move key
            # <= 2k + 1 is exact and no other move can beat it: a row is done then, or when
            # its field stops changing. Most views have a target a few steps away, so this
            # stops long before the whole field settles. At most V * V relaxations (a
            # winding corridor) are ever needed.
            for k in range(side * side + 1):
                done = (dist[:, rows, cols].min(axis=1) <= 2 * k + 1) | ~changed
                if done.all():
                    break
                relaxed = np.minimum(padded[:, :-2, 1:-1], padded[:, 2:, 1:-1])
                np.minimum(relaxed, padded[:, 1:-1, :-2], out=relaxed)
                np.minimum(relaxed, padded[:, 1:-1, 2:], out=relaxed)
                relaxed += 2
                np.maximum(relaxed, never, out=relaxed)
                np.minimum(relaxed, dist, out=relaxed)
                changed = (relaxed != dist).any(axis=(1, 2))
                dist[...] = relaxed
            # Score of each move: the distance key at the next cell.
            nxt = dist[:, rows, cols]
            unsafe = _HAZARD.take(codes[:, rows, cols])
        nxt = np.where(unsafe, big, nxt)
        has_target = nxt.min(axis=1) < big

        if self._heading is None or len(self._heading) != b:
            # No heading yet (or a new batch size): every row starts afresh. Drawing only
            # here keeps the generator's use the same whether or not the policy is reused.
            episode_start = np.ones(b, dtype=bool)
            self._heading = np.zeros(b, dtype=np.int64)
        if episode_start is not None and np.any(episode_start):
            self._heading = np.where(episode_start, self.rng.integers(0, NUM_ACTIONS, size=b),
                                     self._heading)
        noise = self.rng.random((b, NUM_ACTIONS))
        # Target-seeking: minimum distance, random tie-break.
        seek = np.argmin(nxt * 2.0 + noise, axis=1)
        # Exploring: random safe move, biased toward the current heading.
        keep = (self.rng.random(b) < self.persistence)[:, None] & (
            np.arange(NUM_ACTIONS) == self._heading[:, None])
        explore_score = noise + unsafe * 10.0 - keep * 2.0
        explore = np.argmin(explore_score, axis=1)
        actions = np.where(has_target, seek, explore).astype(np.int64)
        self._heading = actions
        return actions


class CallablePolicy(BatchPolicy):
    """Adapts any ``obs (6, V, V) -> action`` callable, one row at a time."""

    def __init__(self, fn: Callable[[np.ndarray], Any], policy_id: str | None = None) -> None:
        super().__init__()
        self.fn = fn
        self.policy_id = policy_id or getattr(fn, "__name__", type(fn).__name__)

    def act(self, obs: np.ndarray, episode_start: np.ndarray | None = None) -> np.ndarray:
        actions = []
        for o in obs:
            action = self.fn(o)
            if isinstance(action, np.ndarray) and action.size == 1:
                action = action.reshape(()).item()
            if isinstance(action, (bool, np.bool_)) or not isinstance(action, (int, np.integer)):
                hint = (" (for a Stable-Baselines3 model pass the model or its .zip path, not "
                        "model.predict)" if isinstance(action, tuple) else "")
                raise TypeError(f"co-player policy {self.policy_id!r} returned {action!r} "
                                f"({type(action).__name__}); it must return an int action in "
                                f"0..{NUM_ACTIONS - 1}{hint}")
            actions.append(int(action))
        return check_policy_actions(np.array(actions, dtype=np.int64), len(obs), self.policy_id)


def check_policy_actions(actions: Any, batch: int, policy_id: str) -> np.ndarray:
    """Return a policy's output as ``(batch,)`` int64 in ``0..3``, or raise saying what is wrong."""
    arr = np.asarray(actions)
    if arr.shape != (batch,):
        raise ValueError(f"co-player policy {policy_id!r} returned actions of shape {arr.shape}; "
                         f"BatchPolicy.act must return shape ({batch},), one action per observation")
    if arr.dtype.kind not in "iu":
        raise TypeError(f"co-player policy {policy_id!r} returned actions of dtype {arr.dtype}; "
                        f"they must be integers in 0..{NUM_ACTIONS - 1}")
    if batch and (arr.min() < 0 or arr.max() >= NUM_ACTIONS):
        raise ValueError(f"co-player policy {policy_id!r} returned actions {arr[:16].tolist()}; "
                         f"actions must be in 0..{NUM_ACTIONS - 1}")
    return arr.astype(np.int64, copy=False)


POLICY_NAMES = ("random", "greedy")


def make_policy(spec: Any) -> BatchPolicy:
    """Build a policy from ``"random"``, ``"greedy"``, a path to an SB3 ``.zip``, an SB3 model,
    a `BatchPolicy`, or any callable ``obs -> action``."""
    if isinstance(spec, BatchPolicy):
        return spec
    if isinstance(spec, str) and spec == "random":
        return RandomPolicy()
    if isinstance(spec, str) and spec == "greedy":
        return GreedyPolicy()
    if isinstance(spec, (str, Path)) and str(spec).endswith(".zip"):
        from rpg_env.experts.policy import SB3Policy

        return SB3Policy.load(spec)
    if _is_sb3_model(spec):
        from rpg_env.experts.policy import SB3Policy

        return SB3Policy(spec)
    if callable(spec):
        return CallablePolicy(spec)
    raise ValueError(
        f"unknown policy {spec!r}: use 'random', 'greedy', a path to a Stable-Baselines3 .zip, "
        f"an SB3 model, a BatchPolicy, or a callable obs -> action"
    )


def _is_sb3_model(obj: Any) -> bool:
    return any(cls.__module__.startswith("stable_baselines3") and cls.__name__ == "BaseAlgorithm"
               for cls in type(obj).__mro__)
