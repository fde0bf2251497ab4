"""The batched policy protocol: ``(B, C, V, V)`` one-hot views -> ``(B,)`` actions.

The protocol (`BatchPolicy`) mirrors Stable-Baselines3's ``predict``: a policy gets a batch of
observations and an ``episode_start`` mask (so stateful policies, e.g. one that stacks frames,
can clear their memory), and returns one action per row. Policies draw their randomness from a
generator the environment hands them through ``seed``, so a seeded reset makes the whole game
reproducible.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

import numpy as np

from rpg_env.game.constants import vocabulary


class BatchPolicy(abc.ABC):
    """A policy over batches of one-hot egocentric views."""

    #: Short stable name recorded with every trajectory the policy drives.
    policy_id: str = "policy"

    def __init__(self) -> None:
        self.rng = np.random.default_rng()

    def seed(self, rng: np.random.Generator) -> None:
        """Use ``rng`` for every random choice from now on."""
        self.rng = rng

    def check_view_shape(self, shape: tuple[int, ...]) -> None:
        """Raise a clear error if the policy cannot act on views of ``shape`` ``(C, V, V)``
        (the default: it can act on any)."""
        return None

    @abc.abstractmethod
    def act(self, obs: np.ndarray, episode_start: np.ndarray | None = None) -> np.ndarray:
        """``obs`` ``(B, C, V, V)`` uint8, ``episode_start`` ``(B,)`` bool -> ``(B,)`` int64."""

    def __call__(self, obs: np.ndarray) -> int | np.ndarray:
        """Single-observation convenience: one observation -> its action (an int; a ``(K,)`` array
        of choices in a MultiDiscrete space)."""
        action = np.asarray(self.act(np.asarray(obs)[None])[0])
        return int(action) if action.ndim == 0 else action


class CallablePolicy(BatchPolicy):
    """Adapts any ``obs (C, V, V) -> action`` callable, one row at a time."""

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
                                f"0..{vocabulary().num_actions - 1}{hint}")
            actions.append(int(action))
        return check_policy_actions(np.array(actions, dtype=np.int64), len(obs), self.policy_id)


def sample_actions(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One action per row of ``probs`` ``(B, A)`` (each row a distribution), drawn with ``rng`` by
    inverting the row's cumulative sum: the one draw every stochastic policy here makes, so a
    seeded generator gives the same actions -> ``(B,)`` int64."""
    cdf = np.cumsum(probs, axis=1)
    draws = rng.random((len(probs), 1)) * cdf[:, -1:]
    return np.minimum((draws > cdf).sum(axis=1), probs.shape[1] - 1).astype(np.int64)


def check_policy_actions(actions: Any, batch: int, policy_id: str) -> np.ndarray:
    """Return a policy's output as ``(batch,)`` int64 in ``0..3``, or raise saying what is wrong."""
    arr = np.asarray(actions)
    if arr.shape != (batch,):
        raise ValueError(f"co-player policy {policy_id!r} returned actions of shape {arr.shape}; "
                         f"BatchPolicy.act must return shape ({batch},), one action per observation")
    if arr.dtype.kind not in "iu":
        raise TypeError(f"co-player policy {policy_id!r} returned actions of dtype {arr.dtype}; "
                        f"they must be integers in 0..{vocabulary().num_actions - 1}")
    if batch and (arr.min() < 0 or arr.max() >= vocabulary().num_actions):
        raise ValueError(f"co-player policy {policy_id!r} returned actions {arr[:16].tolist()}; "
                         f"actions must be in 0..{vocabulary().num_actions - 1}")
    return arr.astype(np.int64, copy=False)
