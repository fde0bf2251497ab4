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

from rpg_env.core import AGENT, BONE, FOOD, GEM, NUM_ACTIONS, WALL


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
    """Uniform random actions."""

    policy_id = "random"

    def act(self, obs: np.ndarray, episode_start: np.ndarray | None = None) -> np.ndarray:
        return self.rng.integers(0, NUM_ACTIONS, size=len(obs))


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
        self.persistence = persistence
        self._heading: np.ndarray | None = None

    def act(self, obs: np.ndarray, episode_start: np.ndarray | None = None) -> np.ndarray:
        obs = np.asarray(obs)
        b, _, side, _ = obs.shape
        c = side // 2
        big = np.int32(10_000)
        blocked = (obs[:, WALL] | obs[:, BONE] | obs[:, AGENT]).astype(bool)
        # Distance-to-target field; gems count 0.5 closer so they win ties against food.
        dist = np.where(obs[:, GEM].astype(bool), 0, np.where(obs[:, FOOD].astype(bool), 1, big))
        dist = dist.astype(np.int32)
        dist[:, c, c] = big  # standing still is not a target
        for _ in range(2 * side):
            neighbour = np.full_like(dist, big)
            neighbour[:, 1:, :] = np.minimum(neighbour[:, 1:, :], dist[:, :-1, :])
            neighbour[:, :-1, :] = np.minimum(neighbour[:, :-1, :], dist[:, 1:, :])
            neighbour[:, :, 1:] = np.minimum(neighbour[:, :, 1:], dist[:, :, :-1])
            neighbour[:, :, :-1] = np.minimum(neighbour[:, :, :-1], dist[:, :, 1:])
            relaxed = np.where(blocked, dist, np.minimum(dist, neighbour + 2))
            if np.array_equal(relaxed, dist):
                break
            dist = relaxed
        # Score of each move (up, down, left, right): the distance field at the next cell.
        if side == 1:
            nxt = np.full((b, NUM_ACTIONS), big, dtype=np.int32)
            unsafe = np.ones((b, NUM_ACTIONS), dtype=bool)
        else:
            cells = [(c - 1, c), (c + 1, c), (c, c - 1), (c, c + 1)]
            nxt = np.stack([dist[:, i, j] for i, j in cells], axis=1)
            hazard = obs[:, WALL] | obs[:, BONE]
            unsafe = np.stack([hazard[:, i, j].astype(bool) for i, j in cells], axis=1)
        nxt = np.where(unsafe, big, nxt)
        has_target = nxt.min(axis=1) < big

        if self._heading is None or len(self._heading) != b:
            self._heading = self.rng.integers(0, NUM_ACTIONS, size=b)
        if episode_start is not None:
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
        actions = np.array([int(self.fn(o)) for o in obs], dtype=np.int64)
        if actions.size and (actions.min() < 0 or actions.max() >= NUM_ACTIONS):
            raise ValueError(f"co-player policy {self.policy_id!r} returned actions "
                             f"{actions.tolist()}; actions must be in 0..{NUM_ACTIONS - 1}")
        return actions


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
